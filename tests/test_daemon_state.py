"""The daemon's state file: written atomically after every beat, read by the adapters, and
unknown (never OK) when it is absent, broken, stale or from the future."""

from __future__ import annotations

import json
import os

from doctor.commands.setup import load_daemon as load
from doctor.daemon import state
from doctor.daemon.service import Daemon
from doctor.seam.recorded import RecordedHost
from tests.conftest import FIXTURE_HOSTS

HOST = FIXTURE_HOSTS / "xeon-gold-6338-2socket-powersave"


def _daemon(tmp_path, state_file: str) -> Daemon:
    config = tmp_path / "llm-doctor.toml"
    config.write_text(f'[daemon]\nlevel = "quick"\ninterval = "1s"\nstate_file = "{state_file}"\n')
    loaded = load(str(config), (), {})
    return Daemon(loaded, lambda: load(str(config), (), {}), host=RecordedHost(str(HOST)))


def _beat_until_cpu(daemon: Daemon) -> None:
    try:
        for _ in range(20):  # host.cpu can land a beat late on a loaded machine (bounded)
            daemon.beat()
            if "host.cpu" in daemon.latest:
                break
        for _ in range(2):
            daemon.beat()
    finally:
        daemon.dispatcher.close()


def test_a_beat_writes_a_fresh_state_that_reads_back_with_its_findings(tmp_path):
    path = tmp_path / "run" / "state.json"  # the folder is created
    daemon = _daemon(tmp_path, str(path))
    _beat_until_cpu(daemon)
    read = state.read(path)
    assert read.unknown == ""
    assert read.interval_s == 1.0 and 0 <= read.age_s < 60
    rules = {f["rule"] for f in read.findings}
    assert "cpu-powersave-governor" in rules
    governor = next(f for f in read.findings if f["rule"] == "cpu-powersave-governor")
    assert read.family(governor) == "host"
    assert {p["name"]: p["status"] for p in read.probes}["host.cpu"] == "ok"
    assert [p.name for p in tmp_path.joinpath("run").iterdir()] == ["state.json"]  # no temp left


def test_an_empty_state_file_setting_writes_none(tmp_path):
    daemon = _daemon(tmp_path, "")
    _beat_until_cpu(daemon)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llm-doctor.toml"]


def test_an_unwritable_state_file_is_logged_once_and_the_daemon_carries_on(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    daemon = _daemon(tmp_path, str(blocker / "state.json"))  # its folder is a file
    _beat_until_cpu(daemon)
    errors = [r for r in caplog.records if "cannot write the state file" in r.getMessage()]
    assert len(errors) == 1 and str(blocker) in errors[0].getMessage()
    assert daemon.evaluations >= 2


def _written(tmp_path, **changes) -> str:
    path = tmp_path / "state.json"
    daemon = _daemon(tmp_path, str(path))
    _beat_until_cpu(daemon)
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))
    return str(path)


def test_stale_absent_future_and_broken_states_are_unknown(tmp_path):
    path = _written(tmp_path)
    taken = state.read(path).taken_at
    assert state.read(path, now=taken + 2.9).unknown == ""
    assert "3 intervals" in state.read(path, now=taken + 3.1).unknown
    assert "future" in state.read(path, now=taken - 3600).unknown
    assert "no state file" in state.read(tmp_path / "nothing.json").unknown
    for changes, why in (({"kind": "scan"}, "not an llm-doctor state"),
                         ({"state_version": 2}, "state_version 2"),
                         ({"interval_s": 0}, "interval_s must be a positive"),
                         ({"families": {"x": "cpu"}}, "families must map"),
                         ({"report": {"findings": 1}}, "report")):
        broken = _written(tmp_path, **changes)
        assert why in state.read(broken).unknown, changes
    (tmp_path / "state.json").write_bytes(b"\xff{")
    assert str(tmp_path / "state.json") in state.read(tmp_path / "state.json").unknown
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert state.read(fifo).unknown  # refused at once, never blocks
