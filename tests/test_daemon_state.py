"""The daemon's state file: written atomically after every beat, read by the adapters, and
unknown (never OK) when it is absent, broken, stale or from the future."""

from __future__ import annotations

import json
import os
import time

import pytest

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


@pytest.mark.slow
def test_stale_absent_future_and_broken_states_are_unknown(tmp_path):
    path = _written(tmp_path)
    taken = state.read(path).taken_at
    assert state.read(path, now=taken + 2.9).unknown == ""
    assert "3 intervals" in state.read(path, now=taken + 3.1).unknown
    assert "future" in state.read(path, now=taken - 3600).unknown
    assert "no state file" in state.read(tmp_path / "nothing.json").unknown
    for changes, why in (({"kind": "scan"}, "not an llm-doctor state"),
                         ({"state_version": 2}, "state_version 2"),
                         ({"interval_s": 0}, "interval_s 0: not the daemon's interval"),
                         ({"families": {"x": "cpu"}}, "families must map"),
                         ({"report": {"findings": 1}}, "report")):
        broken = _written(tmp_path, **changes)
        assert why in state.read(broken).unknown, changes
    (tmp_path / "state.json").write_bytes(b"\xff{")
    assert str(tmp_path / "state.json") in state.read(tmp_path / "state.json").unknown
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert state.read(fifo).unknown  # refused at once, never blocks


@pytest.fixture(scope="module")
def beaten(tmp_path_factory) -> dict:
    """A state a real daemon wrote (beats on a recorded host), as JSON to break."""
    tmp = tmp_path_factory.mktemp("state")
    path = tmp / "state.json"
    _beat_until_cpu(_daemon(tmp, str(path)))
    return json.loads(path.read_text())


def _read(tmp_path, data: dict, **changes) -> state.State:
    path = tmp_path / "changed.json"
    path.write_text(json.dumps({**data, "taken_at": time.time(), **changes}))
    return state.read(path)


NEXT_HOUR = time.time() + 3600  # a time in the future; its test id says so (ids stay the same
# between collections, as pytest-xdist's workers need)

# (changes, what the reason says): each a state no daemon writes, that read fresh before
STALE_OR_BROKEN = [
    ({"taken_at": 1.0, "interval_s": 1e308}, "interval_s 1e+308: not the daemon's interval"),
    ({"taken_at": 1.0, "interval_s": 1e12}, "interval_s 1000000000000.0: not the daemon's"),
    ({"taken_at": 1.0, "interval_s": 2**63 - 1}, "interval_s 9223372036854775807: not"),
    ({"taken_at": 1.6e9, "interval_s": 1e12}, "interval_s 1000000000000.0: not"),
    ({"interval_s": float(2**63)}, "interval_s 9.223372036854776e+18: not"),
    ({"interval_s": 0.5}, "interval_s 0.5: not the daemon's interval, 1 to 86400 seconds"),
    ({"interval_s": 86401}, "interval_s 86401: not the daemon's interval"),
    ({"interval_s": True}, "interval_s True: not"),
    ({"interval_s": "15"}, "interval_s '15': not"),
    ({"taken_at": 0}, "taken_at 0: not a time in Unix seconds after 2020-01-01"),
    ({"taken_at": -5.0}, "taken_at -5.0: not a time"),
    ({"taken_at": 1e18}, "in the future"),
    ({"taken_at": NEXT_HOUR}, "in the future"),
    ({"taken_at": True}, "taken_at True: not a time"),
    ({"taken_at": [1]}, "taken_at [1]: not a time"),
    ({"state_version": True}, "state_version True, this llm-doctor reads 1"),
    ({"daemon_pid": True}, "daemon_pid True: not a whole number from 1 to 4194304"),
    ({"daemon_pid": 2**40}, "daemon_pid 1099511627776: not"),
    ({"daemon_pid": None}, "daemon_pid None: not"),
    ({"evaluations": 0}, "evaluations 0: not a whole number"),
    ({"evaluations": 2.5}, "evaluations 2.5: not"),
    ({"evaluations": "3"}, "evaluations '3': not"),
    ({"families": {"ok": "gpu"}}, "families must map rule ids"),
]


@pytest.mark.parametrize("changes,why", STALE_OR_BROKEN, ids=[repr(c)[:50] if c.get("taken_at") != NEXT_HOUR else "taken_at an hour ahead"
                              for c, _ in STALE_OR_BROKEN])
def test_a_state_no_daemon_writes_is_unknown_with_its_reason(tmp_path, beaten, changes, why):
    read = _read(tmp_path, beaten, **changes)
    assert why in read.unknown, read.unknown


def test_the_daemons_own_bounds_are_fresh_and_come_from_its_settings(tmp_path, beaten):
    from doctor.daemon.settings import BOUNDS

    assert (state.INTERVAL_MIN_S, state.INTERVAL_MAX_S) == BOUNDS["interval_s"][:2]
    for interval in (1, 1.0, 15.0, 86400):
        assert _read(tmp_path, beaten, interval_s=interval).unknown == ""
    old = _read(tmp_path, beaten, taken_at=time.time() - 4 * 86400, interval_s=86400)
    assert "more than 3 intervals of 86400s" in old.unknown


@pytest.mark.parametrize("rule", ["ok", "ok-gpu", "unknown", "unknown-state", "Gpu-Lost",
                                  "gpu lost", "a\nb", "--api-key sk-LEAKLEAK1234", "x" * 81, ""])
def test_a_finding_whose_rule_id_could_read_as_ours_or_is_no_id_makes_the_state_unknown(
        tmp_path, beaten, rule):
    report = json.loads(json.dumps(beaten["report"]))
    report["findings"].append({**(report["findings"] or [_FINDING])[0], "rule": rule})
    read = _read(tmp_path, beaten, report=report)
    at = f"findings[{len(report['findings']) - 1}].rule"  # the saved-scan reader's, in the report
    assert read.unknown.startswith(f"{tmp_path / 'changed.json'}"), read.unknown
    assert f"{at}:" in read.unknown or f"{at} " in read.unknown, read.unknown
    assert "is not a rule id" in read.unknown and "LEAKLEAK" not in read.unknown


_FINDING = {"rule": "cpu-powersave-governor", "cause": "cpu-powersave-governor", "symptoms": [],
            "severity": "warning", "title": "t", "remediation": "r", "playbook": "p",
            "evidence": {}}
