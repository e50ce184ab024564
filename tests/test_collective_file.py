"""``llm-doctor collective``'s last result reaches the fleet: the command keeps it in
collective.json beside the daemon's state file, net.collective reads it back through the
host (fresh, stale, missing, hostile: probes/helpers/collective_file.py), a capture carries
it and its replay judges the same, and a real daemon beat on a recorded host carries its
findings into the state, ``npd --family net`` and the Slurm drain."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from doctor.commands import collective as command
from doctor.commands.setup import load_daemon
from doctor.daemon import state as daemon_state
from doctor.daemon.service import Daemon
from doctor.fleet import npd
from doctor.fleet.slurm import Node, decide
from doctor.fleet.verdict import Status, judge
from doctor.model import Level, ScanOptions, Severity, Skip
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordingHost, RecordWriter
from probes.helpers import collective_file as cf
from probes.net import xnode
from tests.test_collective_findings import SETUP_FAILED
from tests.test_xnode import GOOD

MACHINE = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"


def _write(path: Path, result: dict, age_s: float = 60.0, machine: str | None = None,
           **over) -> Path:
    doc = cf.document(result, time.time() - age_s, {"hostname": "gpu07", "machine_id":
                                                    machine or _ours()})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**doc, **over}))
    return path


def _ours() -> str:
    return LiveHost().describe().get("machine_id", MACHINE)


def _probe(host, path) -> xnode.CrossNodeCollective:
    return xnode.probe(host, ScanOptions(level=Level.QUICK, collective_file=str(path)))


def _skip(host, path) -> str:
    with pytest.raises(Skip) as skipped:
        _probe(host, path)
    reason = str(skipped.value)
    assert "\n" not in reason and "Traceback" not in reason
    return reason


def test_the_file_sits_beside_the_daemons_state_file():
    assert cf.beside(daemon_state.DEFAULT_PATH) == cf.DEFAULT_FILE
    assert cf.beside("/srv/d/state.json") == "/srv/d/collective.json"
    assert cf.beside("/srv/d/collective.json") == "/srv/d/collective.collective.json"
    assert cf.beside("") == ""


def test_a_fresh_result_is_the_record_with_its_age(tmp_path):
    r = _probe(LiveHost(), _write(tmp_path / "collective.json", GOOD, age_s=600))
    assert (r.outcome, r.busbw_gbps, r.interface) == ("ok", 0.6, "veth0")
    assert 599 <= r.age_s <= 700
    assert xnode.summary(r).endswith("busbw 0.6 GB/s (saved 10 min ago)")


def test_stale_missing_and_kept_nowhere_are_skips_that_say_what_to_run(tmp_path):
    stale = _skip(LiveHost(), _write(tmp_path / "old.json", GOOD, age_s=25 * 3600))
    assert "is 25.0 h old, more than 24 h" in stale and "llm-doctor collective --master" in stale
    missing = _skip(LiveHost(), tmp_path / "none.json")
    assert f"no result of the all-reduce across hosts at {tmp_path}/none.json" in missing
    assert "run `llm-doctor collective" in missing
    assert "keeps no state file" in _skip(LiveHost(), "")


def _hostile(tmp: Path, kind: str) -> Path:
    path = tmp / kind / "collective.json"
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink":
        _write(tmp / "elsewhere.json", GOOD)
        path.symlink_to(tmp / "elsewhere.json")
    elif kind == "huge":
        path.write_text(" " * (cf.MAX_BYTES + 1))
    elif kind == "another-machine":
        _write(path, GOOD, machine=OTHER)
    elif kind == "future":
        _write(path, GOOD, age_s=-3600)
    else:
        path.write_text({"bad-json": '{"kind": "llm-doctor-collective", ',
                         "not-ours": '{"kind": "llm-doctor-state", "version": 1}',
                         "nan": '{"kind": "llm-doctor-collective", "version": 1, '
                                '"taken_at": NaN, "result": {}}',
                         "deep": '{"kind": "llm-doctor-collective", "result": '
                                 + "[" * 50 + "]" * 50 + "}",
                         "wrong-types": json.dumps({"kind": "llm-doctor-collective", "version": 1,
                                                    "taken_at": "yesterday", "result": []}),
                         "result-list": json.dumps({**cf.document({}, time.time(), {}),
                                                    "result": [1]}),
                         }[kind])
    return path


@pytest.mark.parametrize("kind,words", [
    ("fifo", "FIFO"), ("directory", "directory"), ("symlink", "is a symbolic link"),
    ("huge", "more than the 262,144"), ("another-machine", "written on another machine (gpu07"),
    ("future", "in the future: check this host's clock"), ("bad-json", "not valid JSON"),
    ("not-ours", "not a saved result of `llm-doctor collective`"), ("nan", "NaN"),
    ("deep", "nested deeper than 8 levels"), ("wrong-types", "taken_at 'yesterday'"),
    ("result-list", "result must be an object"),
])
def test_a_hostile_file_is_one_line_naming_it_never_a_traceback_or_a_hang(tmp_path, kind, words):
    if kind == "another-machine" and "machine_id" not in LiveHost().describe():
        pytest.skip("this machine has no machine id to tell another from")
    path = _hostile(tmp_path, kind)
    reason = _skip(LiveHost(), path)
    assert words in reason and str(path) in reason, reason


def test_a_capture_carries_the_file_and_its_replay_judges_the_same(tmp_path):
    kept = _write(tmp_path / "live" / "collective.json", SETUP_FAILED, age_s=120)
    recording = RecordingHost(LiveHost(), tmp_path / "cap")
    live = _probe(recording, kept)
    recording.save({"level": "quick"})
    assert _probe(RecordedHost(tmp_path / "cap"), kept) == live  # the clock is recorded too
    assert live.failed_step == "setup" and live.age_s is not None


# --- the fleet: a real daemon beat on a recorded host whose file says the path is unusable


@pytest.fixture(scope="module")
def beaten(tmp_path_factory) -> Path:
    """The state a real daemon writes after beating on a recorded host that holds a result
    of `llm-doctor collective` beside the daemon's state file: the interface it names is
    down (critical: this host's own path)."""
    tmp = tmp_path_factory.mktemp("collective-fleet")
    state_path = tmp / "state.json"
    w = RecordWriter(tmp / "host")
    taken = 1.8e9
    w.file(cf.beside(state_path), cf.text_of(SETUP_FAILED, taken, {"hostname": "gpu07",
                                                                   "machine_id": MACHINE}))
    w.file("/etc/machine-id", MACHINE + "\n")
    w.measurement(cf.CLOCK, {"unix_s": taken + 3600})
    w.save({"level": "quick"}, hostname="gpu07")
    config = tmp / "daemon.toml"
    config.write_text(f'[daemon]\nlevel = "quick"\ninterval = "15s"\nstate_file = "{state_path}"\n')
    daemon = Daemon(load_daemon(str(config), (), {}), lambda: load_daemon(str(config), (), {}),
                    host=RecordedHost(str(tmp / "host")))
    try:
        daemon.beat()
        daemon.beat()
    finally:
        daemon.dispatcher.close()
    return state_path


def test_the_daemon_state_carries_the_finding_in_the_net_family(beaten):
    read = daemon_state.read(beaten)
    assert read.unknown == ""
    [finding] = [f for f in read.findings if f["rule"].startswith("collective-")]
    assert (finding["rule"], finding["severity"]) == ("collective-interface-unusable", "critical")
    assert read.family(finding) == "net"
    [probe] = [p for p in read.probes if p["name"] == "net.collective"]
    assert probe["status"] == "ok" and probe["data"]["age_s"] == 3600.0


def test_npd_sets_the_network_condition_and_slurm_drains_naming_the_finding(beaten):
    code, line = npd.answer(str(beaten), "net")
    assert code == 1 and line.startswith("collective-interface-unusable critical: Cross-node"), line
    assert npd.answer(str(beaten), "gpu")[0] != 1  # the network's finding, no other family's
    verdict = judge(daemon_state.read(beaten), None, Severity.CRITICAL, width=200)
    action = decide(verdict, Node("gpu07", "IDLE", ""))
    assert action.update[:3] == ("update", "NodeName=gpu07", "State=DRAIN")
    assert action.update[3].startswith("Reason=llm-doctor: collective-interface-unusable "
                                       "Cross-node all-reduce cannot start on this host")
    assert verdict.status is Status.PROBLEM


def test_the_command_keeps_its_result_beside_the_state_file_it_is_given(tmp_path, monkeypatch,
                                                                         capsys):
    monkeypatch.setattr(command, "run_kernel", lambda *a, **k: dict(GOOD))
    state_file = tmp_path / "d" / "state.json"
    with pytest.raises(SystemExit) as ended:
        command.collective.main(["--master", "10.0.0.1:29500", "--rank", "0", "--world", "2",
                                 "--state-file", str(state_file)], standalone_mode=False)
    assert ended.value.code == 0
    r = _probe(LiveHost(), tmp_path / "d" / "collective.json")
    assert (r.busbw_gbps, r.interface) == (0.6, "veth0") and r.age_s < 60
    # a folder it cannot write is one line on stderr; the run's status stands
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(SystemExit) as ended:
        command.collective.main(["--master", "10.0.0.1:29500", "--rank", "0", "--world", "2",
                                 "--state-file", str(blocked / "state.json")],
                                standalone_mode=False)
    err = capsys.readouterr().err
    assert ended.value.code == 0
    assert f"the result is not kept for the daemon: cannot write {blocked}/collective.json" in err


def test_rank_0s_host_naming_ranks_that_never_joined_is_not_drained(tmp_path):
    """The master names the ranks of *other* hosts: a warning there, so slurm-healthcheck
    leaves rank 0's node in service and NPD's network condition (critical by default) clear."""
    from doctor.rules.loader import builtin_files, load_rules
    from probes.registry import by_name
    from tests.test_collective_findings import NEVER_JOINED

    rules = load_rules(builtin_files(), by_name())
    report = command.report_of(NEVER_JOINED, 6.0, time.time(), rules)
    path = tmp_path / "state.json"
    daemon_state.write(path, daemon_state.to_state(report, rules, 15.0, time.time(), 1))
    read = daemon_state.read(path)
    assert [f["rule"] for f in read.findings] == ["collective-rank-missing"]
    verdict = judge(read, None, Severity.CRITICAL, width=200)
    assert verdict.status is Status.OK
    assert decide(verdict, Node("gpu01", "IDLE", "")).update == ()
    assert npd.answer(str(path), "net")[0] == 0
    assert npd.answer(str(path), "net", Severity.WARNING)[1].startswith("collective-rank-missing warning")


@pytest.mark.parametrize("var,value,kept", [("SLURM_LOCALID", "0", True),
                                            ("SLURM_LOCALID", "3", False),
                                            ("LOCAL_RANK", "1", False)])
def test_of_several_ranks_on_one_host_only_the_first_keeps_the_result(tmp_path, monkeypatch,
                                                                      var, value, kept):
    monkeypatch.setenv(var, value)
    source = "slurm" if var == "SLURM_LOCALID" else "torchrun"
    written = command.keep({**GOOD, "rendezvous": source}, {"hostname": "n1"},
                           str(tmp_path / "state.json"))
    assert (tmp_path / "collective.json").exists() is kept and bool(written) is kept
