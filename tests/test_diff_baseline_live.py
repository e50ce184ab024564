"""``llm-doctor diff baseline live`` against a real daemon on this machine: the daemon keeps
its baseline (kill -USR2), a fault is planted, and the diff names that fault first.

The fault is one that harms nothing else: the open-files limit of the process that scans
(host.limits reads the shell's limits when no engine runs), lowered for that process alone
with RLIMIT_NOFILE; the machine's settings are never touched."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from doctor.daemon import baseline
from tests.conftest import REPO

pytestmark = pytest.mark.timeout(300)
LOW = 1024


def _lowered() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (LOW, hard))


def _wait_for(path: Path, proc: subprocess.Popen, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None and not path.exists():
        time.sleep(0.1)
    return path.exists()


@pytest.mark.slow
def test_a_planted_fault_is_the_first_change_since_the_daemons_baseline(tmp_path):
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= LOW * 4:
        pytest.skip(f"this shell's open-files limit is {soft}: nothing to lower it from")
    state_file = tmp_path / "state.json"
    kept = baseline.baseline_path(state_file)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = tmp_path / "daemon.log"
    with log.open("w") as err:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "doctor.commands.cli", "daemon", "--listen", "127.0.0.1:0",
             "--state-file", str(state_file), "--interval", "1s", "--level", "quick",
             "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, cwd=tmp_path, env=env)
        try:
            assert _wait_for(state_file, daemon, 90), log.read_text()[-800:]
            daemon.send_signal(signal.SIGUSR2)  # this machine may have warnings of its own
            assert _wait_for(kept, daemon, 60), log.read_text()[-800:]
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=10)
    assert daemon.returncode == 0, log.read_text()[-800:]
    out = subprocess.run(
        [sys.executable, "-m", "doctor.commands.cli", "diff", "baseline", "live",
         "--state-file", str(state_file), "--format", "json"],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path, preexec_fn=_lowered)
    assert out.returncode == 2, out.stderr[-800:]
    data = json.loads(out.stdout)
    assert data["verdict"] == "regression likely"
    assert data["changes"][0] == "host.limits[shell].nofile_soft", data["changes"][:3]
    raised = {f["rule"] for f in data["findings"] if f["state"] == "raised"}
    engines = [f["id"] for f in data["facts"] if f["id"].startswith("engine[")]
    if not engines:  # with an engine running (another test's), its limits are judged instead
        assert "fd-limit-low" in raised, data["findings"]
