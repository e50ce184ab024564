"""Issue 28 on the real llama-server: a loading engine is starting, not dead (§6); two
servers of one model are not replicas unless declared, and skew is judged on the window's
work (§7); requests go only to the endpoint named (§8).

Each test starts its own servers (tests/llama_server.py; skipped without the binary or
the model) and stops them; a scan is ``python -m doctor.commands.cli scan`` in a
subprocess, bounded by SCAN_TIMEOUT_S. Findings are picked by their endpoint: other
engines may run on a shared machine.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests import llama_server
from tests.cgroup_v1 import cpu_quota, exec_prefix
from tests.conftest import REPO

pytestmark = pytest.mark.live

SCAN_TIMEOUT_S = 300
LOAD_WAIT_S = 60.0  # for the first 503 of a server loading under its CPU quota


def _scan(*args: str, config: Path | None = None) -> tuple[int, dict]:
    extra = ("--config", str(config)) if config else ()
    result = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "scan", "--format",
                             "json", "--no-progress", *extra, *args],
                            capture_output=True, text=True, timeout=SCAN_TIMEOUT_S, cwd=REPO)
    assert result.stdout, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(url: str) -> tuple[int | None, str]:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
            return answer.status, answer.read(200).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(200).decode(errors="replace")
    except OSError:
        return None, ""


def _mine(report: dict, url: str) -> dict[str, dict]:
    return {f["rule"]: f for f in report["findings"] if url in (f.get("key") or "")
            or url in f["title"]}


def test_a_llama_server_loading_its_model_is_starting_not_unreachable(tmp_path):
    """§6: caught while it answers 503 "Loading model" (its load slowed by a 5 % CPU quota,
    cgroup v1): engine-loading at info with its uptime, never the critical engine-unreachable
    nor "restart it". Before: critical engine-unreachable, "restart it under a supervisor"."""
    exe, model = llama_server.binary(), llama_server.model_path()
    if exe is None or model is None:
        llama_server._unavailable("llama-server or its model is missing")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with cpu_quota(5_000) as group:
        with open(tmp_path / "llama-server.log", "w") as log:
            process = subprocess.Popen(
                [*exec_prefix(group), str(exe), "-m", str(model), "--host", "127.0.0.1",
                 "--port", str(port), "--metrics", "-t", "1", "--no-webui"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + LOAD_WAIT_S
            status, body = None, ""
            while time.monotonic() < deadline and status != 503:
                assert process.poll() is None, (tmp_path / "llama-server.log").read_text()[-2000:]
                status, body = _health(url)
                time.sleep(0.1)
            assert status == 503 and "Loading model" in body, (status, body)
            rc, report = _scan("--level", "quick", "--endpoint", url)
            still = _health(url)[0]
        finally:
            process.kill()
            process.wait(10)
    assert still == 503, "the server finished loading during the scan: the test saw no load"
    found = _mine(report, url)
    assert "engine-unreachable" not in found, found["engine-unreachable"]["title"]
    loading = found["engine-loading"]
    assert loading["severity"] == "info"
    assert loading["evidence"]["outcome"] == "loading"
    assert loading["evidence"]["uptime_s"] is not None and loading["evidence"]["uptime_s"] >= 0
    assert loading["evidence"]["model_gb"] > 0.1  # the GGUF's size, from its -m path
    assert "is starting: loading its model (HTTP 503 (Loading model))" in loading["title"]
    assert "restart it under" not in loading["remediation"]


def _in_netns(scenario: str, tmp_path: Path) -> dict:
    """tests/issue28_scenarios.py's ``scenario`` in a network namespace of its own (loopback
    only): the servers it starts are out of reach of other scans on a shared machine, whose
    warm-up requests would otherwise move their counters (seen: 624 tokens on B)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare or ip is missing: no network namespace for the test")
    if llama_server.binary() is None or llama_server.model_path() is None:
        llama_server._unavailable("llama-server or its model is missing")
    result = subprocess.run(
        ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
         sys.executable, "-m", "tests.issue28_scenarios", scenario, str(tmp_path)],
        capture_output=True, text=True, timeout=2 * SCAN_TIMEOUT_S + 120, cwd=REPO)
    if result.returncode == 77:
        pytest.skip(result.stderr.strip()[-300:])
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_two_llama_servers_of_one_model_with_load_on_one(tmp_path):
    """§7: the same GGUF on two servers, requests on one only. Not declared replicas: no
    group, no multi-gpu-load-skew (before: a warning from 4 in flight against 0). Declared
    in [scan] replicas: grouped, and judged on the tokens each did between the scrapes."""
    got = _in_netns("replicas", tmp_path)
    assert got["plain_skew"] == [] and got["plain_models"] == []
    (group,) = got["declared_models"]
    assert group["measure"] == "tokens" and group["served_min"] == 0
    assert group["served_max"] > 0 and group["busiest"] == got["a"]
    # the rule's threshold (256 tokens in the window) against what this machine served
    assert bool(got["declared_skew"]) == (group["served_max"] >= 256), group


def test_scan_sends_requests_only_to_the_endpoint_named(tmp_path):
    """§8: two servers; scan --endpoint A at level standard sends A its warm-up and output
    requests, and B (discovered beside it, a llama-server of this host) none: B's token
    counters do not move. Before: B got the same completions as A. --requests-to all
    would send to B too."""
    got = _in_netns("named-only", tmp_path)
    assert got["warmup_status"] == "ok", got
    assert got["a_after"] > got["a_before"]  # the named one was measured
    assert got["b_after"] == got["b_before"], got
    assert got["b"] in got["all_targets"]
    assert got["named_targets"] == [got["a"]]


def test_an_idle_llama_server_under_a_cpu_quota_below_its_threads(tmp_path):
    """§10: a real llama-server (-t 1) in a cgroup v1 cpu group of 0.3 CPU, idle: nothing
    throttled, no thread runnable, yet its pool of 1 thread is over the quota, which
    cpu-quota-throttled says at rest, keyed by its address and the quota's cgroup. Before:
    silent until requests came."""
    from doctor.model import Level, ProbeResult, ScanOptions
    from doctor.rules.evaluate import evaluate
    from doctor.rules.loader import builtin_files, load_rules
    from doctor.seam.live import LiveHost
    from probes.engine import container
    from probes.registry import by_name
    from tests.cgroup_v1 import set_quota

    rule = next(r for r in load_rules(builtin_files(), by_name()) if r.id == "cpu-quota-throttled")
    with cpu_quota(100_000) as group:  # a whole CPU to load, then 0.3 of one
        server = llama_server.start(tmp_path, prefix=exec_prefix(group))
        try:
            set_quota(group, 30_000)
            record = container.probe(LiveHost(), ScanOptions(level=Level.QUICK))
        finally:
            llama_server.stop(server)
    (mine,) = [e for e in record.engines if server.pid in e.pids]
    assert mine.cpu_quota_cpus == 0.3 and mine.cpu_quota_dir == str(group)
    assert (mine.pool_threads, mine.pool_source) == (1, "-t 1")
    assert mine.identity == f"llama.cpp 127.0.0.1:{server.port}"
    found, errors = evaluate([rule], [ProbeResult("engine.container", "ok", 0.1, None, record)])
    assert errors == []
    (finding,) = [f for f in found if f.key.startswith(mine.identity)]
    assert finding.severity.label == "warning"
    assert finding.key == f"{mine.identity} {group}"
    assert "below its 1 compute threads (-t 1)" in finding.title
