"""slurm-healthcheck's parts without a cluster: reading ``scontrol show node --oneliner``, the
reason it writes, what it decides for each node state, and its errors (one line each)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from doctor.fleet.slurm import MAX_REASON, Node, SlurmError, decide, parse_node, reason_for, shown
from doctor.fleet.slurm_scontrol import Scontrol
from doctor.fleet.verdict import Status, Verdict
from tests.conftest import REPO

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
    return Verdict(status, "the verdict's line", finding, [finding] if finding else [])


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
    reason = reason_for(hostile)
    assert reason == "llm-doctor: gpu-lost GPU 3 (reboot) id x it s gone"
    long = reason_for({"rule": "gpu-lost", "title": "word " * 100})
    assert len(long) == MAX_REASON and long.endswith("...") and long.startswith(
        "llm-doctor: gpu-lost word")
    assert reason_for({}).startswith("llm-doctor: unknown-rule")
    line = shown("scontrol", ("update", "NodeName=vm", "State=DRAIN", f"Reason={reason}"))
    assert line == f'scontrol update NodeName=vm State=DRAIN Reason="{reason}"'


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


def test_scontrol_missing_or_failing_is_one_line_exit_3_and_a_prolog_still_fails(
        tmp_path, critical_state):
    missing = _cli("--state-file", str(critical_state), "--scontrol", str(tmp_path / "nope"))
    assert missing.returncode == 3 and missing.stderr == ""
    assert missing.stdout.count("\n") == 1 and "scontrol not found at" in missing.stdout
    dry = _cli("--dry-run", "--state-file", str(critical_state), "--scontrol",
               str(tmp_path / "nope"))
    assert dry.returncode == 3 and dry.stdout == "" and "scontrol not found" in dry.stderr
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


def test_a_hanging_scontrol_is_cut_at_its_budget(tmp_path):
    hanging = tmp_path / "scontrol"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n")
    hanging.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(SlurmError, match=r"scontrol show node vm --oneliner: no answer in 1s"):
        Scontrol(str(hanging), budget_s=1.0).show_node("vm")
    assert time.monotonic() - started < 10


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


def test_control_characters_from_the_host_are_shown_not_obeyed(tmp_path):
    done = _cli("--state-file", str(tmp_path / "x\x1b[2Jy.json"), "--node", "vm")
    assert done.returncode == 2 and "\x1b" not in done.stdout and "x\\x1b[2Jy.json" in done.stdout
