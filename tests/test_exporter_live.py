"""A real llama-server started under ``prlimit --nofile=1024`` and a real daemon: the
engine's own row (its limits, judged by the scan) is on /metrics beside the shell's, and
the engine's series say which engine they are about. The exporter before the catalog
showed only the shell's ``nofile_soft{comm="llm-doctor"}``."""

from __future__ import annotations

import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import live_stack as stack
from tests import llama_server
from tests.daemon_helpers import need

pytestmark = pytest.mark.live


def _series(page: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for family in text_string_to_metric_families(page)
            for s in family.samples if s.name == name]


@pytest.mark.timeout(300)
def test_a_real_engine_under_a_low_open_files_limit_has_its_row_on_metrics(tmp_path):
    prlimit = need("prlimit", "util-linux")
    promtool = need("promtool", "prometheus")
    server = llama_server.start(tmp_path, prefix=(prlimit, "--nofile=1024:1024", "--"))
    daemon = None
    try:
        daemon, address = stack.daemon(tmp_path, '[daemon]\nlevel = "quick"\ninterval = "2s"\n')
        url = f"http://{address}/metrics"

        def engine_row():
            page = stack.get(url)
            rows = [labels for labels, value in _series(page, "llm_doctor_host_process_open_files_limit")
                    if labels["pid"] == str(server.pid) and labels["limit"] == "soft" and value == 1024]
            return page if rows else None

        page = stack.wait_for("the engine's open-files row on /metrics", engine_row, 90, 1.0)
        limits = _series(page, "llm_doctor_host_process_open_files_limit")
        engine = next(labels for labels, _ in limits if labels["pid"] == str(server.pid))
        assert engine == {"pid": str(server.pid), "comm": "llama-server", "engine": "llama.cpp",
                          "role": "engine", "endpoint": server.base_url,
                          "model": server.model_path, "limit": "soft"}
        assert any(labels["role"] == "shell" and labels["comm"] == "llm-doctor"
                   for labels, _ in limits)
        info = [labels for labels, _ in _series(page, "llm_doctor_engine_info")
                if labels["pid"] == str(server.pid)]
        assert info and info[0]["kind"] == "llama.cpp" and info[0]["endpoint"] == server.base_url
        assert 'rule="fd-limit-low"' in page  # the scan judged the engine's limit
        lint = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True,
                              text=True, timeout=30)
        assert lint.returncode == 0, lint.stdout + lint.stderr
    except AssertionError:
        if daemon is not None:
            print(daemon.log()[-6000:])
        raise
    finally:
        if daemon is not None:
            daemon.stop()
        llama_server.stop(server)
