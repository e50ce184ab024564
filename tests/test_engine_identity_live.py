"""Two real llama-servers, each under ``prlimit --nofile=256``: two engines of one kind.

A capture made with ``--no-requests`` keeps that option, and its replay repeats it: the
probes that send completions are skipped as they were, not failed for a recording that holds
no answer (a replay used to report 2 probes failed). ``diff`` of the recording names each
engine's limits by its kind and address (``host.limits[llama.cpp@127.0.0.1:PORT]``: both
were ``host.limits[llama.cpp]``, one of them dropped), and the daemon's ``/metrics`` has one
open-files series per engine, told apart by its endpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import live_stack as stack
from tests import llama_server
from tests.conftest import REPO
from tests.daemon_helpers import need

pytestmark = pytest.mark.live

LIMIT = 256
REQUEST_PROBES = ("engine.warmup", "engine.output")  # the probes with a request cost


def _cli(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "doctor.commands.cli", *args],
                          capture_output=True, text=True, timeout=timeout_s,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def _failed(report: dict) -> list[str]:
    return [f"{p['name']}: {p.get('reason')}" for p in report["probes"]
            if p["status"] in ("error", "timeout")]


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    prlimit = need("prlimit", "util-linux")
    folder = tmp_path_factory.mktemp("two-llama")
    servers = []
    try:
        for name in ("a", "b"):
            (folder / name).mkdir()
            servers.append(llama_server.start(folder / name,
                                              prefix=(prlimit, f"--nofile={LIMIT}:{LIMIT}", "--")))
        yield servers
    finally:
        for server in servers:
            llama_server.stop(server)


@pytest.mark.timeout(600)
def test_a_no_requests_capture_replays_without_failures_and_names_both_engines(two_servers,
                                                                               tmp_path):
    urls = [s.base_url for s in two_servers]
    recorded = tmp_path / "host"
    endpoints = [w for url in urls for w in ("--endpoint", url)]
    captured = _cli("capture", str(recorded), "--level", "standard", "--no-requests",
                    "--no-progress", "--format", "json", "-o", str(tmp_path / "capture.json"),
                    *endpoints)
    assert captured.returncode in (0, 1, 2), captured.stderr[-2000:]
    meta = tomllib.loads((recorded / "host.toml").read_text())["host"]
    assert meta["requests"] is False and meta["busy_ok"] is False
    capture = json.loads((tmp_path / "capture.json").read_text())
    skipped = {p["name"]: p["status"] for p in capture["probes"] if p["name"] in REQUEST_PROBES}
    assert skipped == dict.fromkeys(REQUEST_PROBES, "skipped"), skipped

    replayed = _cli("scan", "--replay", str(recorded), "--no-progress", "--format", "json",
                    "-o", str(tmp_path / "replay.json"))
    assert replayed.returncode in (0, 1, 2), replayed.stderr[-2000:]
    replay = json.loads((tmp_path / "replay.json").read_text())
    assert _failed(replay) == [], _failed(replay)
    # skipped for the capture's reason (--no-requests), not by chance: an engine recorded
    # idle had them send completions the recording cannot answer (2 probes failed), one
    # recorded busy skipped them as "serving"
    said = {p["name"]: (p["status"], p.get("reason")) for p in capture["probes"]
            if p["name"] in REQUEST_PROBES}
    assert {p["name"]: (p["status"], p.get("reason")) for p in replay["probes"]
            if p["name"] in REQUEST_PROBES} == said
    assert all("--no-requests" in reason for _, reason in said.values()), said

    diff = _cli("diff", str(tmp_path / "capture.json"), str(recorded), "--format", "json")
    assert diff.returncode in (0, 1), diff.stdout[-2000:] + diff.stderr[-2000:]
    facts = {f["id"]: f for f in json.loads(diff.stdout)["facts"]}
    for url in urls:
        port = url.rsplit(":", 1)[1]
        fact = facts[f"host.limits[llama.cpp@127.0.0.1:{port}].nofile_soft"]
        assert fact["before"] == fact["after"] == LIMIT, fact
    assert not any(f.startswith("host.limits[llama.cpp]") for f in facts)
    print("diff limits facts:", sorted(f for f in facts if f.startswith("host.limits[")))


def _series(page: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for family in text_string_to_metric_families(page)
            for s in family.samples if s.name == name]


@pytest.mark.timeout(300)
def test_two_engines_at_256_open_files_are_two_series(two_servers, tmp_path):
    urls = {s.base_url for s in two_servers}
    daemon = None
    try:
        daemon, address = stack.daemon(tmp_path, '[daemon]\nlevel = "quick"\ninterval = "2s"\n')
        url = f"http://{address}/metrics"

        def both():
            page = stack.get(url)
            rows = [labels for labels, value in
                    _series(page, "llm_doctor_host_process_open_files_limit")
                    if labels["endpoint"] in urls and labels["limit"] == "soft" and value == LIMIT]
            return (page, rows) if len(rows) == 2 else None

        page, rows = stack.wait_for("both engines' open-files rows", both, 120, 1.0)
        assert {r["endpoint"] for r in rows} == urls
        assert {r["engine"] for r in rows} == {"llama.cpp"}
        findings = [labels["key"] for labels, _ in _series(page, "llm_doctor_finding")
                    if labels["rule"] == "fd-limit-low"]
        print("fd-limit-low finding keys:", findings)
        assert findings  # judged; one key per engine once the rule keys by address
    except AssertionError:
        if daemon is not None:
            print(daemon.log()[-6000:])
        raise
    finally:
        if daemon is not None:
            daemon.stop()


@pytest.mark.timeout(420)
def test_diff_baseline_live_reads_stream_incomplete_when_the_daemon_skipped_it(two_servers,
                                                                              tmp_path):
    """With engines running the daemon's micro-kernels wait (daemon.kernels_while_serving),
    so its baseline holds STREAM skipped; the live side measures it. It read ADDED, a change,
    on every `diff baseline live`: nothing was known of it before, so it is incomplete."""
    import signal
    import time

    state = tmp_path / "state.json"
    daemon, _ = stack.daemon(tmp_path, '[daemon]\nlevel = "standard"\ninterval = "2s"\n',
                             "--state-file", str(state))
    try:
        stack.wait_for("the state file", state.exists, 90, 0.5)
        daemon.popen.send_signal(signal.SIGUSR2)
        kept = tmp_path / "baseline.json"
        stack.wait_for("the baseline", kept.exists, 60, 0.5)
        time.sleep(0.5)  # written atomically: whole once it exists
    finally:
        daemon.stop()
    report = json.loads(kept.read_text())["report"]
    stream = next(p for p in report["probes"] if p["name"] == "host.memory_bandwidth")
    assert stream["status"] == "skipped", stream
    out = _cli("diff", "baseline", "live", "--state-file", str(state), "--format", "json",
               timeout_s=300)
    # 3 (not comparable) where another test's engine got requests between the two sides
    assert out.returncode in (0, 1, 2, 3) and out.stdout, out.stderr[-2000:]
    facts = {f["id"]: f for f in json.loads(out.stdout)["facts"]}
    triad = facts["host.memory_bandwidth.triad_gbps"]
    assert triad["status"] == "incomplete" and triad["after"] is not None, triad
    assert "host.memory_bandwidth" in triad["note"]
