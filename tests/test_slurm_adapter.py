"""slurm-healthcheck's parts without a cluster: reading ``scontrol show node --oneliner``, the
reason it writes, what it decides for each node state, and its errors (one line each)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from doctor.daemon import state as daemon_state
from doctor.fleet.slurm import MAX_REASON, Node, SlurmError, decide, parse_node, reason_for, shown
from doctor.fleet.slurm_scontrol import Scontrol
from doctor.fleet.verdict import Status, Verdict, judge
from doctor.model import Severity
from tests.conftest import REPO
from tests.saved_scans import finding_of

# Slurm 22.05.8's own output (Debian 12), from the one-node cluster of tests/slurm_cluster.py:
# OS= holds blanks, and the reason holds "a=b" before slurmctld's [user@time] stamp.
DRAINED = (
    "NodeName=vm Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.56 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=vm Version=22.05.8 OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=1000 AllocMem=0 FreeMem=16111 Sockets=2 Boards=1 State=IDLE+DRAIN "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  "
    "BootTime=2026-12-01T09:26:06 SlurmdStartTime=2026-12-01T19:37:38 "
    "LastBusyTime=2026-12-01T19:37:38 CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s Reason=llm-doctor: gpu-lost GPU 3 fell off a=b the bus "
    "[root@2026-12-01T19:37:52]")
IDLE = DRAINED.replace("State=IDLE+DRAIN", "State=IDLE").split(" Reason=")[0]
FINDING = {"rule": "gpu-lost", "severity": "critical", "title": "GPU 3 fell off the bus"}


def _verdict(status: Status, finding: dict | None = None) -> Verdict:
    typed = finding_of(finding) if finding else None
    return Verdict(status, "the verdict's line", typed, [typed] if typed else [])


def test_the_oneliner_is_read_with_blanks_in_values_and_the_stamp_dropped():
    node = parse_node(DRAINED, "vm")
    assert node == Node("vm", "IDLE+DRAIN", "llm-doctor: gpu-lost GPU 3 fell off a=b the bus")
    assert node.held and node.ours and node.our_rule == "gpu-lost"
    assert node.base == "IDLE" and node.flags == {"DRAIN"}
    idle = parse_node(IDLE, "vm")
    assert idle == Node("vm", "IDLE", "") and not idle.held and not idle.ours


def test_the_named_node_is_found_among_several_and_a_missing_one_is_one_clear_error():
    other = DRAINED.replace("NodeName=vm", "NodeName=vm2")
    assert parse_node(other + "\n" + IDLE + "\n", "vm").state == "IDLE"
    with pytest.raises(SlurmError, match=r"does not show node vm3: .*is --node"):
        parse_node(other, "vm3")
    with pytest.raises(SlurmError, match="without a State= field"):
        parse_node("NodeName=vm Arch=x86_64", "vm")
    with pytest.raises(SlurmError):
        parse_node("", "vm")


def test_a_reason_without_a_stamp_ends_at_the_next_field():
    node = parse_node("NodeName=n1 State=DOWN+NOT_RESPONDING Reason=Not responding "
                      "Comment=(null)", "n1")
    assert node.reason == "Not responding" and node.held and not node.ours
    assert parse_node("NodeName=n1 State=IDLE Reason=(null)", "n1").reason == ""


def test_our_reason_is_one_short_line_free_of_quotes_brackets_and_shell_characters():
    hostile = {"rule": "gpu-lost", "title": 'GPU "3"\n$(reboot) `id` \\ [x] it\'s — gone'}
    reason = reason_for(finding_of(hostile))
    assert reason == "llm-doctor: gpu-lost GPU 3 (reboot) id x it s gone"
    long = reason_for(finding_of({"rule": "gpu-lost", "title": "word " * 100}))
    assert len(long) == MAX_REASON and long.endswith("...") and long.startswith(
        "llm-doctor: gpu-lost word")
    assert reason_for(finding_of({"rule": ""})).startswith("llm-doctor: invalid-rule-id")
    line = shown("scontrol", ("update", "NodeName=vm", "State=DRAIN", f"Reason={reason}"))
    assert line == f"scontrol update NodeName=vm State=DRAIN Reason='{reason}'"


CASES = [
    # (verdict, node state, node reason, update expected, words in what it says)
    (Status.PROBLEM, "IDLE", "", ("State=DRAIN",), "drained"),
    (Status.PROBLEM, "MIXED", "", ("State=DRAIN",), "drained"),
    (Status.PROBLEM, "IDLE+DRAIN", "llm-doctor: gpu-lost GPU 3", (), "already drained"),
    (Status.PROBLEM, "IDLE+DRAIN", "llm-doctor: gpu-throttle hot", ("State=DRAIN",),
     "reason updated (was gpu-throttle)"),
    (Status.PROBLEM, "IDLE+DRAIN", "disk swap", (), "left alone"),
    (Status.PROBLEM, "DOWN", "Not responding", (), "left alone"),
    (Status.PROBLEM, "IDLE+DRAIN", "", (), "left alone"),
    (Status.OK, "IDLE+DRAIN", "llm-doctor: gpu-lost GPU 3", ("State=RESUME",), "resumed"),
    (Status.OK, "MIXED+DRAIN", "llm-doctor: gpu-lost GPU 3", ("State=RESUME",), "resumed"),
    (Status.OK, "DOWN+DRAIN", "llm-doctor: gpu-lost GPU 3", (), "not ours to resume"),
    (Status.OK, "IDLE+DRAIN", "Prolog error", (), "not ours to resume"),
    (Status.OK, "IDLE", "", (), "IDLE"),
    (Status.UNKNOWN, "IDLE+DRAIN", "llm-doctor: gpu-lost GPU 3", (), "left IDLE+DRAIN"),
    (Status.UNKNOWN, "IDLE", "", (), "left IDLE"),
]


@pytest.mark.parametrize("status,state,reason,update,says", CASES)
def test_what_is_done_for_each_verdict_and_node(status, state, reason, update, says):
    finding = FINDING if status is Status.PROBLEM else None
    action = decide(_verdict(status, finding), Node("vm", state, reason))
    assert says in action.says
    if not update:
        assert action.update == ()
    else:
        assert action.update[:2] == ("update", "NodeName=vm") and action.update[2] == update[0]
        if update[0] == "State=DRAIN":
            assert action.update[3] == "Reason=llm-doctor: gpu-lost GPU 3 fell off the bus"


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "doctor.commands.cli", "slurm-healthcheck",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=env)


@pytest.mark.slow
def test_a_missing_state_is_unknown_exit_2_and_calls_no_scontrol(tmp_path):
    done = _cli("--state-file", str(tmp_path / "none.json"), "--node", "vm",
                "--scontrol", str(tmp_path / "no-scontrol"))
    assert done.returncode == 2 and done.stderr == ""  # slurmd logs stdout only
    assert done.stdout.startswith("llm-doctor: vm unchanged: unknown no state file at ")
    prolog = _cli("--mode", "prolog", "--state-file", str(tmp_path / "none.json"),
                  "--scontrol", str(tmp_path / "no-scontrol"))
    assert prolog.returncode == 0  # an unknown state never fails a job


@pytest.fixture(scope="module")
def critical_state(tmp_path_factory):
    from tests.conftest import FIXTURE_HOSTS
    from tests.slurm_cluster import beat_state

    work = tmp_path_factory.mktemp("state")
    return beat_state(FIXTURE_HOSTS / "h100-sxm-8x-gpu-lost", work / "state.json", work, True)


@pytest.mark.slow
def test_scontrol_missing_or_failing_is_one_line_exit_3_and_a_prolog_still_fails(
        tmp_path, critical_state):
    missing = _cli("--state-file", str(critical_state), "--scontrol", str(tmp_path / "nope"))
    assert missing.returncode == 3 and missing.stderr == ""
    assert missing.stdout.count("\n") == 1 and "scontrol not found at" in missing.stdout
    dry = _cli("--dry-run", "--state-file", str(critical_state), "--scontrol",
               str(tmp_path / "nope"))  # a dry run says what it would do (below)
    assert dry.returncode == 1 and "scontrol not found" in dry.stderr
    prolog = _cli("--mode", "prolog", "--state-file", str(critical_state),
                  "--scontrol", str(tmp_path / "nope"))
    assert prolog.returncode == 1  # the finding stands even when scontrol cannot drain
    failing = tmp_path / "scontrol"
    failing.write_text("#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm "
                       "controller' >&2\nexit 1\n")
    failing.chmod(0o755)
    failed = _cli("--state-file", str(critical_state), "--node", "vm", "--scontrol",
                  str(failing))
    assert failed.returncode == 3 and failed.stdout.count("\n") == 1
    assert ("scontrol show node vm --oneliner failed (exit 1): slurm_load_node error: "
            "Unable to contact slurm controller") in failed.stdout


@pytest.mark.slow
def test_a_hanging_scontrol_is_cut_at_its_budget(tmp_path):
    hanging = tmp_path / "scontrol"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n")
    hanging.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(SlurmError, match=r"scontrol show node vm --oneliner: no answer in 1s"):
        Scontrol(str(hanging), budget_s=1.0).show_node("vm")
    assert time.monotonic() - started < 10


@pytest.mark.slow
def test_the_module_entry_answers_as_the_cli_does(tmp_path, critical_state):
    args = ("--state-file", str(critical_state), "--node", "vm", "--scontrol",
            str(tmp_path / "nope"))
    via_cli = _cli(*args)
    via_module = subprocess.run([sys.executable, "-m", "doctor.commands.slurm", *args],
                                cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (via_module.returncode, via_module.stdout, via_module.stderr) == (
        via_cli.returncode, via_cli.stdout, via_cli.stderr) and via_cli.returncode == 3
    usage = subprocess.run([sys.executable, "-m", "doctor.commands.slurm", "--mode", "x"],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 3 and "Traceback" not in usage.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vm State=DOWN", "n[1-4]", "a,b", "", "-x", "vm\nx"])
def test_a_node_name_that_is_no_node_is_refused_in_one_line(tmp_path, name):
    done = _cli("--state-file", str(tmp_path / "none.json"), "--node", name)
    if name == "":  # --node '' falls back to $SLURMD_NODENAME, then the host name
        assert done.returncode == 2
        return
    assert done.returncode == 3 and done.stdout.count("\n") == 1 and done.stderr == ""
    assert done.stdout.startswith(f"llm-doctor: --node {name!r} is not a Slurm node name")
    env = {**os.environ, "SLURMD_NODENAME": name}
    via_env = _cli("--mode", "prolog", "--state-file", str(tmp_path / "none.json"), env=env)
    assert via_env.returncode == 3 and "$SLURMD_NODENAME" in via_env.stderr


@pytest.mark.slow
def test_control_characters_from_the_host_are_shown_not_obeyed(tmp_path):
    done = _cli("--state-file", str(tmp_path / "x\x1b[2Jy.json"), "--node", "vm")
    assert done.returncode == 2 and "\x1b" not in done.stdout and "x [2Jy.json" in done.stdout


HOSTILE_TITLE = ("GPU 3 $(touch canary-1) `touch canary-2`; touch canary-3 && echo hi! !! !-1 "
                 "--api-key sk-LEAKLEAK1234 'q' \"d\" \\ [z]\n\x1b[31mred \u202eevil")


def test_the_reason_is_masked_and_the_printed_line_runs_exactly_that_command(tmp_path):
    """The printed --dry-run line pasted into a shell (sh, bash) runs scontrol with our argv and
    nothing else: no command substitution, no second command, no '!' for history expansion."""
    reason = reason_for(finding_of({"rule": "gpu-lost", "title": HOSTILE_TITLE}))
    assert "LEAKLEAK" not in reason and "--api-key ***" in reason
    assert not set(reason) & set("!$`'\"\\[]\n\x1b\u202e"), reason
    update = ("update", "NodeName=vm", "State=DRAIN", f"Reason={reason}")
    recorder = tmp_path / "bin" / "scontrol"  # writes the argv it gets, one NUL-ended word each
    recorder.parent.mkdir()
    recorder.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$ARGS"\n')
    recorder.chmod(0o755)
    line = shown(str(recorder), update)
    assert "!" not in line and shlex.split(line) == [str(recorder), *update]
    for shell in ("sh", "bash"):
        args = tmp_path / f"{shell}.args"
        subprocess.run([shell, "-c", line], cwd=tmp_path, env={**os.environ, "ARGS": str(args)},
                       check=True, timeout=30)
        assert args.read_bytes().split(b"\0")[:-1] == [w.encode() for w in update]
    assert not list(tmp_path.glob("canary-*"))


def _state_file(source, target, **changes):
    data = json.loads(source.read_text())
    data.update(changes)
    target.write_text(json.dumps(data))
    return target


@pytest.mark.parametrize("interval", [1e308, 1e12, 2**63 - 1])
def test_a_state_from_1970_with_a_huge_interval_resumes_nothing(tmp_path, critical_state,
                                                                  interval):
    data = json.loads(critical_state.read_text())
    data["report"]["findings"] = []  # it reads healthy: only its freshness could resume
    stale = _state_file(critical_state, tmp_path / "s.json", taken_at=1.0, interval_s=interval,
                        report=data["report"])
    verdict = judge(daemon_state.read(stale), None, Severity.CRITICAL, width=200)
    assert verdict.status is Status.UNKNOWN and "interval_s" in verdict.line
    action = decide(verdict, parse_node(DRAINED, "vm"))
    assert action.update == () and "left IDLE+DRAIN" in action.says


@pytest.fixture(scope="module")
def healthy_state(tmp_path_factory):
    from tests.conftest import FIXTURE_HOSTS
    from tests.slurm_cluster import beat_state

    work = tmp_path_factory.mktemp("healthy")
    return beat_state(FIXTURE_HOSTS / "h100-sxm-8x-nvswitch", work / "state.json", work, False)


def _without_slurm(tmp_path) -> dict:
    """No scontrol on PATH, no SLURMD_NODENAME: a laptop, a CI runner, a node before Slurm."""
    env = {k: v for k, v in os.environ.items() if k != "SLURMD_NODENAME"}
    return {**env, "PATH": str(tmp_path)}


@pytest.mark.slow
def test_a_dry_run_without_slurm_prints_what_it_would_do_and_the_verdicts_code(
        tmp_path, critical_state, healthy_state):
    import socket

    host = socket.gethostname().split(".")[0]
    env = _without_slurm(tmp_path)
    critical = _cli("--dry-run", "--state-file", str(critical_state), env=env)
    assert critical.returncode == 1, critical.stderr
    reason = json.loads(critical_state.read_text())["report"]["findings"][0]["title"][:20]
    assert critical.stdout.startswith(f"scontrol update NodeName={host} State=DRAIN "
                                      f"Reason='llm-doctor: gpu-hardware-errors {reason}")
    assert critical.stdout.count("\n") == 1
    assert "scontrol not found at 'scontrol'" in critical.stderr
    assert "would be drained unless another party holds it" in critical.stderr
    assert "gpu-hardware-errors critical:" in critical.stderr  # the verdict
    healthy = _cli("--dry-run", "--state-file", str(healthy_state), env=env)
    assert (healthy.returncode, healthy.stdout) == (0, ""), healthy.stderr
    assert (f"would be resumed only if llm-doctor had drained it (scontrol update "
            f"NodeName={host} State=RESUME)") in healthy.stderr
    named = _cli("--dry-run", "--node", "gpu7", "--state-file", str(critical_state), env=env)
    assert named.returncode == 1 and "NodeName=gpu7 State=DRAIN" in named.stdout
    stale = _state_file(healthy_state, tmp_path / "stale.json", taken_at=1.0, interval_s=1e308)
    unknown = _cli("--dry-run", "--state-file", str(stale), env=env)
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "unchanged: unknown" in unknown.stderr
    real = _cli("--state-file", str(critical_state), env=env)  # not a dry run: it cannot act
    assert real.returncode == 3 and "scontrol not found" in real.stdout


@pytest.mark.slow
def test_a_dry_run_on_a_host_whose_name_is_no_node_name_uses_a_placeholder(tmp_path,
                                                                           critical_state):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a host name of our own needs root and unshare (a UTS namespace)")
    code = ("import runpy, socket, sys; socket.sethostname('not a node'); "
            "sys.argv = ['llm-doctor', 'slurm-healthcheck', '--dry-run', '--state-file', "
            f"{str(critical_state)!r}]; runpy.run_module('doctor.commands.cli', "
            "run_name='__main__')")
    unshare = str(shutil.which("unshare"))
    done = subprocess.run([unshare, "--uts", sys.executable, "-c", code], cwd=REPO,
                          env=_without_slurm(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("scontrol update 'NodeName=<node>' State=DRAIN Reason='llm-doctor: ")
    assert "the host name 'not a node' is not a Slurm node name" in done.stderr
    assert "<node> stands for the node's name, which could not be determined" in done.stderr
    refused = subprocess.run([unshare, "--uts", sys.executable, "-c",
                              code.replace("'--dry-run', ", "")], cwd=REPO,
                             env=_without_slurm(tmp_path), capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode == 3 and "is not a Slurm node name" in refused.stdout
