"""The daemon's baseline: its first healthy evaluation after start, and the state on SIGUSR2,
written beside its state file as baseline.json in the state file's format, never replaced by
a later healthy evaluation; no state file, no baseline."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from doctor.commands.setup import load_daemon as load
from doctor.daemon import baseline, state
from doctor.daemon.service import Daemon
from doctor.seam.recorded import RecordedHost
from tests.conftest import FIXTURE_HOSTS

HEALTHY = FIXTURE_HOSTS / "this-vm-epyc-2cpu"  # no finding at warning or above at level quick
POWERSAVE = FIXTURE_HOSTS / "xeon-gold-6338-2socket-powersave"  # cpu-powersave-governor warns
REPO = Path(__file__).resolve().parent.parent
WARNING_RULE = "cpu-powersave-governor"


def _daemon(tmp_path: Path, host: Path, state_file: str) -> Daemon:
    config = tmp_path / "llm-doctor.toml"
    config.write_text(f'[daemon]\nlevel = "quick"\ninterval = "1s"\nstate_file = "{state_file}"\n')
    loaded = load(str(config), (), {})
    return Daemon(loaded, lambda: load(str(config), (), {}), host=RecordedHost(str(host)))


def _beat(daemon: Daemon, times: int, until: Path | None = None) -> None:
    """``times`` beats, or fewer once ``until`` exists (host.cpu can land a beat late)."""
    for _ in range(times):
        daemon.beat()
        if until is not None and until.exists():
            return


def _taken_at(path: Path) -> float:
    return json.loads(path.read_text())["taken_at"]


def test_baseline_path_is_beside_the_state_file():
    assert baseline.baseline_path("/var/lib/llm-doctor/state.json") == Path(
        "/var/lib/llm-doctor/baseline.json")
    assert baseline.baseline_path("run/baseline.json") == Path("run/baseline.baseline.json")


def test_the_first_healthy_evaluation_is_the_baseline_and_later_ones_keep_it(tmp_path):
    state_file = tmp_path / "run" / "state.json"
    path = baseline.baseline_path(state_file)
    daemon = _daemon(tmp_path, HEALTHY, str(state_file))
    try:
        _beat(daemon, 20, until=path)
        assert path.exists(), "no baseline after 20 healthy beats"
        first = _taken_at(path)
        kept = baseline.read(path)
        assert kept.unknown == "" and kept.interval_s == 1.0
        assert not [f for f in kept.findings if f["severity"] in ("warning", "critical")]
        done = {p["name"]: p["status"] for p in kept.probes}
        assert set(daemon.scheduler.slots) <= set(done)  # every probe of the level reported
        assert set(done.values()) <= {"ok", "skipped"}
        _beat(daemon, 3)
    finally:
        daemon.dispatcher.close()
    assert _taken_at(path) == first  # not overwritten by the healthy beats after it
    assert _taken_at(state_file) > first  # while the state file moved on
    assert sorted(p.name for p in state_file.parent.iterdir()) == ["baseline.json", "state.json"]


def test_a_host_with_a_warning_has_no_baseline_until_usr2(tmp_path):
    state_file = tmp_path / "state.json"
    path = baseline.baseline_path(state_file)
    daemon = _daemon(tmp_path, POWERSAVE, str(state_file))
    try:
        _beat(daemon, 4)
        assert state_file.exists() and not path.exists()
        daemon.baseline.request()  # what the SIGUSR2 handler does
        daemon.beat()
        assert path.exists()
        first = _taken_at(path)
        _beat(daemon, 2)
    finally:
        daemon.dispatcher.close()
    kept = baseline.read(path)
    assert kept.unknown == "" and WARNING_RULE in {f["rule"] for f in kept.findings}
    assert _taken_at(path) == first  # one request, one baseline


def test_usr2_again_replaces_the_baseline(tmp_path):
    state_file = tmp_path / "state.json"
    path = baseline.baseline_path(state_file)
    daemon = _daemon(tmp_path, HEALTHY, str(state_file))
    try:
        _beat(daemon, 20, until=path)
        first = _taken_at(path)
        time.sleep(0.01)
        daemon.baseline.request()
        daemon.beat()
    finally:
        daemon.dispatcher.close()
    assert _taken_at(path) > first


def test_no_state_file_keeps_no_baseline_and_says_so_once(tmp_path, caplog):
    daemon = _daemon(tmp_path, HEALTHY, "")
    caplog.set_level(logging.WARNING, logger="llm-doctor")
    try:
        for _ in range(2):
            daemon.baseline.request()
            _beat(daemon, 2)
    finally:
        daemon.dispatcher.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llm-doctor.toml"]
    said = [r for r in caplog.records if "no baseline" in r.getMessage()]
    assert len(said) == 1 and "--state-file" in said[0].getMessage()


def test_a_baseline_that_cannot_be_written_is_logged_once_and_the_state_goes_on(tmp_path,
                                                                                caplog):
    state_file = tmp_path / "state.json"
    baseline.baseline_path(state_file).mkdir()  # a folder where the file should go
    daemon = _daemon(tmp_path, HEALTHY, str(state_file))
    try:
        _beat(daemon, 8)
    finally:
        daemon.dispatcher.close()
    errors = [r for r in caplog.records if "cannot write the baseline" in r.getMessage()]
    assert len(errors) == 1 and str(tmp_path / "baseline.json") in errors[0].getMessage()
    assert state.read(state_file).unknown == ""


def test_a_baseline_is_known_however_old_and_unknown_when_broken(tmp_path):
    state_file = tmp_path / "state.json"
    path = baseline.baseline_path(state_file)
    daemon = _daemon(tmp_path, POWERSAVE, str(state_file))
    try:
        daemon.baseline.request()
        daemon.beat()
    finally:
        daemon.dispatcher.close()
    week = _taken_at(path) + 7 * 86400
    assert "3 intervals" in state.read(path, now=week).unknown  # a state that old is stale
    assert baseline.read(path, now=week).unknown == ""  # a baseline is old by design
    assert "future" in baseline.read(path, now=_taken_at(path) - 3600).unknown
    assert "no state file" in baseline.read(tmp_path / "none.json").unknown
    path.write_text("{}")
    assert "not an llm-doctor state" in baseline.read(path).unknown


def _wait_for(path: Path, proc: subprocess.Popen, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists():
            return True
        time.sleep(0.1)
    return path.exists()


@pytest.mark.slow
def test_a_live_daemon_writes_its_baseline_on_sigusr2_and_stops_cleanly(tmp_path):
    state_file = tmp_path / "state.json"
    path = baseline.baseline_path(state_file)
    log = tmp_path / "daemon.log"
    argv = [sys.executable, "-m", "doctor.commands.cli", "daemon", "--replay", str(POWERSAVE),
            "--listen", "127.0.0.1:0", "--state-file", str(state_file), "--interval", "1s",
            "--level", "quick"]
    with log.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err,
                                stdin=subprocess.DEVNULL, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            assert _wait_for(state_file, proc, 60), log.read_text()[-800:]
            time.sleep(1.5)  # a beat or two more: still no baseline (a warning is raised)
            assert not path.exists()
            proc.send_signal(signal.SIGUSR2)
            assert _wait_for(path, proc, 30), log.read_text()[-800:]
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    said = log.read_text()
    assert code == 0, said[-800:]
    assert "Traceback" not in said and f"baseline written to {path} (SIGUSR2)" in said
    kept = baseline.read(path)
    assert kept.unknown == "" and WARNING_RULE in {f["rule"] for f in kept.findings}
    assert kept.report["host"]["kind"] == "recorded"
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".json") == [
        "baseline.json", "state.json"]  # no temporary file left behind


def test_a_reload_that_moves_the_state_file_writes_a_baseline_beside_the_new_one(tmp_path):
    first = tmp_path / "a" / "state.json"
    moved = tmp_path / "b" / "state.json"
    daemon = _daemon(tmp_path, HEALTHY, str(first))
    try:
        _beat(daemon, 20, until=baseline.baseline_path(first))
        assert baseline.baseline_path(first).exists()
        (tmp_path / "llm-doctor.toml").write_text(
            f'[daemon]\nlevel = "quick"\ninterval = "1s"\nstate_file = "{moved}"\n')
        daemon.reload()
        _beat(daemon, 20, until=baseline.baseline_path(moved))
    finally:
        daemon.dispatcher.close()
    assert baseline.baseline_path(moved).exists() and moved.exists()
