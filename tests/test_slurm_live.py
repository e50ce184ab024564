"""slurm-healthcheck against a real one-node Slurm (tests/slurm_cluster.py): slurmd runs it as
its HealthCheckProgram and its Prolog, reading state files written by a real daemon's beats
on recorded hosts (a GPU fallen off the bus; a healthy H100 host).

Each test leaves the node idle and undrained for the next; every wait is bounded, and the
cluster's daemons are stopped at the end, pass or fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import slurm_cluster
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.daemon_helpers import need
from tests.fixtures import build_ascend_hosts as ascend

pytestmark = pytest.mark.slurm

CRITICAL_HOST = FIXTURE_HOSTS / "h100-sxm-8x-gpu-lost"
OTHER_HOST = FIXTURE_HOSTS / "h100-sxm-8x-gpu-gone"  # another critical rule: the bus says so
HEALTHY_HOST = FIXTURE_HOSTS / "h100-sxm-8x-nvswitch"
RULE = "gpu-hardware-errors"  # what the daemon finds on h100-sxm-8x-gpu-lost (XID 79)
# The finding's title cut to the 120 characters of doctor/fleet/slurm.py's MAX_REASON.
REASON = ("llm-doctor: gpu-hardware-errors GPU5 (00000000:AB:00.0): memory or hardware "
          "errors: GPU_IS_LOST: fallen off the bus,...")
OPS_REASON = "disk replacement, ticket 4711"
HUGE_INTERVALS = (1e308, 1e12, 2**63 - 1)
HOSTILE_TITLE = ("GPU5 gone! $(touch canary-1) `touch canary-2`; touch canary-3 !! "
                 "--api-key sk-LEAKLEAK1234 'q'")
HOSTILE_REASON = ("llm-doctor: gpu-hardware-errors GPU5 gone (touch canary-1) touch canary-2 ; "
                  "touch canary-3 --api-key *** q")


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    work = tmp_path_factory.mktemp("states")
    critical = slurm_cluster.beat_state(CRITICAL_HOST, work / "critical.json", work, True)
    other = slurm_cluster.beat_state(OTHER_HOST, work / "other.json", work, True)
    healthy = slurm_cluster.beat_state(HEALTHY_HOST, work / "healthy.json", work, False)
    stale = work / "stale.json"
    data = json.loads(healthy.read_text())
    data["taken_at"] -= 4 * data["interval_s"]  # older than three intervals
    stale.write_text(json.dumps(data))
    found = {"critical": critical, "other": other, "healthy": healthy, "stale": stale}
    for interval in HUGE_INTERVALS:  # healthy, from 1970, "fresh" for ever by its interval
        found[f"1970-{interval:g}"] = work / f"1970-{interval:g}.json"
        found[f"1970-{interval:g}"].write_text(json.dumps({**json.loads(healthy.read_text()),
                                                           "taken_at": 1.0,
                                                           "interval_s": interval}))
    # issue 33: the same faults on AMD and Ascend hosts (an uncorrectable ECC error; a RoCE port down)
    found["amd"] = slurm_cluster.beat_state(FIXTURE_HOSTS / "amd-mi300-8x-ras", work / "amd.json", work, True)
    npu_host = ascend.build("ascend-910b2c-port-down", work / "hosts")
    found["npu"] = slurm_cluster.beat_state(npu_host, work / "npu.json", work, True)
    hostile = json.loads(critical.read_text())
    hostile["report"]["findings"][0]["title"] = HOSTILE_TITLE
    found["hostile"] = work / "hostile.json"
    found["hostile"].write_text(json.dumps(hostile))
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    for binary, package in (("munged", "munge"), ("slurmctld", "slurmctld"),
                            ("slurmd", "slurmd"), ("scontrol", "slurm-client"),
                            ("sinfo", "slurm-client"), ("sbatch", "slurm-client")):
        need(binary, package)
    if os.geteuid() != 0:
        message = "the one-node Slurm runs slurmd as root"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    folder = tmp_path_factory.mktemp("slurm")
    cluster = slurm_cluster.start(folder)
    request.addfinalizer(cluster.stop)
    return cluster


def _say(cluster, what: str) -> str:
    """The node's State= and Reason= as scontrol shows them, printed for the transcript."""
    line = cluster.node_line()
    state = line[line.index(" State="):].split()[0].strip()
    reason = line[line.index(" Reason="):].strip() if " Reason=" in line else "Reason=(none)"
    shown = f"NodeName={cluster.node} {state} {reason}"
    print(f"[{what}] {shown}")
    return shown


def _undrained(cluster):
    node = cluster.show()  # IDLE alone: after a resume slurmd answers a ping (NOT_RESPONDING)
    return node if node.state == "IDLE" else None


def _drained_ours(cluster):
    node = cluster.show()
    return node if node.held and node.reason.startswith(f"llm-doctor: {RULE} ") else None


def test_a_critical_finding_drains_the_node_once_and_its_clearing_resumes_it(cluster, states):
    cluster.plant("hc", states["critical"])
    node = cluster.wait("the node drained with our reason", lambda: _drained_ours(cluster))
    assert "DRAIN" in node.state and node.reason == REASON
    drained = _say(cluster, "critical state planted")
    cluster.wait_health_checks(2)
    assert _say(cluster, "two health checks later") == drained  # same stamp: no second update
    log = (cluster.folder / "log" / "slurmctld.log").read_text()
    assert log.count("reason set to: llm-doctor:") == 1
    assert cluster.runs()[-1].startswith("1 ")  # a critical finding exits 1
    cluster.plant("hc", states["healthy"])
    node = cluster.wait("the node resumed", lambda: _undrained(cluster))
    assert node.base == "IDLE" and node.reason == ""
    _say(cluster, "healthy state planted")


def test_another_critical_finding_updates_our_own_reason(cluster, states):
    cluster.plant("hc", states["critical"])
    cluster.wait("the node drained with our reason", lambda: _drained_ours(cluster))
    cluster.plant("hc", states["other"])
    node = cluster.wait("our reason updated", lambda: (
        n if (n := cluster.show()).our_rule == "gpu-fallen-off-the-bus" else None))
    assert "DRAIN" in node.state
    _say(cluster, "another critical finding")
    cluster.plant("hc", states["healthy"])
    cluster.wait("the node resumed", lambda: _undrained(cluster))


def test_an_amd_or_ascend_fault_drains_and_resumes_as_an_nvidia_one(cluster, states):
    """AMD's RAS errors and an Ascend RoCE port down, as a daemon found them on the recorded
    hosts: our reason names their rule, and the healthy state resumes the node."""
    for which, rules in (("amd", ("amd-gpu-ras-errors", "amd-kernel-ras-lines")),
                         ("npu", ("npu-port-down",))):
        cluster.plant("hc", states[which])
        node = cluster.wait(f"the node drained for {which}", lambda rules=rules: (
            n if (n := cluster.show()).held and n.our_rule in rules else None))
        assert "DRAIN" in node.state and node.reason.startswith(f"llm-doctor: {node.our_rule} ")
        _say(cluster, f"{which} critical state planted")
    cluster.plant("hc", states["healthy"])
    cluster.wait("the node resumed", lambda: _undrained(cluster))


def test_a_drain_another_party_set_is_left_alone(cluster, states):
    cluster.command("scontrol", "update", f"NodeName={cluster.node}", "State=DRAIN",
                    f"Reason={OPS_REASON}")
    try:
        cluster.wait("the operator's drain", lambda: cluster.show().state == "IDLE+DRAIN")
        held = _say(cluster, "drained by an operator")
        cluster.plant("hc", states["critical"])
        cluster.wait_health_checks(2)
        assert _say(cluster, "critical state planted") == held
        cluster.plant("hc", states["healthy"])
        cluster.wait_health_checks(2)
        assert _say(cluster, "healthy state planted") == held
        assert cluster.show().reason == OPS_REASON
        out = (cluster.folder / "log" / "hc-runs.out").read_text()
        assert f"left alone, held by another party: IDLE+DRAIN ({OPS_REASON})" in out
    finally:
        cluster.command("scontrol", "update", f"NodeName={cluster.node}", "State=RESUME")
    cluster.wait("the operator's resume", lambda: _undrained(cluster))


def test_a_stale_or_missing_state_neither_drains_nor_resumes(cluster, states):
    cluster.plant("hc", states["stale"])  # a healthy host, but the daemon stopped long ago
    cluster.plant("prolog", None)
    cluster.wait_health_checks(2)
    assert not cluster.show().held
    _say(cluster, "stale state planted")
    assert cluster.runs()[-1].startswith("2 ")  # unknown
    cluster.plant("hc", states["critical"])
    cluster.wait("the node drained with our reason", lambda: _drained_ours(cluster))
    for unknown in ("stale", None):
        if unknown:
            cluster.plant("hc", states[unknown])
        else:
            cluster.plant("hc", None)
        cluster.wait_health_checks(2)
        assert _drained_ours(cluster), f"a {unknown or 'missing'} state resumed the node"
        assert cluster.runs()[-1].startswith("2 ")
    cluster.plant("hc", states["healthy"])
    cluster.wait("the node resumed", lambda: _undrained(cluster))


def test_dry_run_prints_the_exact_line_and_changes_nothing(cluster, states):
    cluster.plant("hc", None)  # slurmd's own runs change nothing meanwhile
    before = cluster.show()
    done = subprocess.run(
        [sys.executable, "-m", "doctor.commands.cli", "slurm-healthcheck", "--dry-run",
         "--state-file", str(states["critical"]), "--node", cluster.node],
        cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stdout == (f"scontrol update NodeName={cluster.node} State=DRAIN "
                           f"Reason='{REASON}'\n")
    assert "dry run, not done" in done.stderr
    assert cluster.show() == before and not before.held and "Reason=" not in cluster.node_line()


def test_a_state_from_1970_with_a_huge_interval_never_resumes_our_drain(cluster, states):
    """Such a state answered OK, and the health check resumed the node it had drained."""
    cluster.plant("hc", states["critical"])
    cluster.wait("the node drained with our reason", lambda: _drained_ours(cluster))
    for interval in HUGE_INTERVALS:
        cluster.plant("hc", states[f"1970-{interval:g}"])
        cluster.wait_health_checks(2)
        assert _drained_ours(cluster), f"a state from 1970 with interval_s {interval:g} resumed it"
        assert cluster.runs()[-1].startswith("2 ")  # unknown
        _say(cluster, f"state from 1970, interval_s {interval:g}")
    assert "interval_s 1e+308: not the daemon's interval" in (
        cluster.folder / "log" / "hc-runs.out").read_text()
    cluster.plant("hc", states["healthy"])
    cluster.wait("the node resumed", lambda: _undrained(cluster))


def test_the_dry_run_line_pasted_into_a_shell_drains_with_our_masked_reason_only(
        cluster, states, tmp_path):
    """A title with '!', $( ), backquotes, ';' and a secret: the printed line, run by a shell
    as someone pasting it would, sets exactly our masked reason and runs nothing else."""
    cluster.plant("hc", None)
    done = subprocess.run(
        [sys.executable, "-m", "doctor.commands.cli", "slurm-healthcheck", "--dry-run",
         "--state-file", str(states["hostile"]), "--node", cluster.node],
        cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    line = done.stdout.strip()
    assert "!" not in line and "LEAKLEAK" not in line and "$" not in line and "`" not in line
    assert line.endswith(f"Reason='{HOSTILE_REASON}'")
    try:
        subprocess.run(["bash", "-c", line], cwd=tmp_path, env=cluster.env, check=True,
                       timeout=30)
        node = cluster.wait("the node drained by the pasted line", lambda: (
            n if (n := cluster.show()).held else None))
        assert node.reason == HOSTILE_REASON and not list(tmp_path.iterdir())
        _say(cluster, "the dry run's line pasted into bash")
    finally:
        cluster.plant("hc", states["healthy"])  # our reason: the health check resumes it
    cluster.wait("the node resumed", lambda: _undrained(cluster))


def _requeued(job_line: str) -> str | None:
    return job_line if "Restarts=1" in job_line and "JobState=PENDING" in job_line else None


def test_a_prolog_with_the_fault_drains_the_node_and_requeues_the_job(cluster, states):
    cluster.plant("hc", None)  # the health check leaves the node to the prolog
    cluster.plant("prolog", states["critical"])
    job = cluster.command("sbatch", "--parsable", "-o", str(cluster.folder / "job-%j.out"),
                          "--wrap", "true").strip().split(";")[0]
    try:
        line = cluster.wait("the job requeued", lambda: _requeued(cluster.job(job)))
        print(f"[prolog with the fault] job {job}: " + " ".join(
            w for w in line.split() if w.startswith(("JobState=", "Reason=", "Restarts="))))
        assert "Reason=launch_failed_requeued_held" in line  # Slurm's default: held
        node = cluster.wait("the node drained by the prolog", lambda: _drained_ours(cluster))
        assert node.reason == REASON  # ours, not slurmd's "Prolog error": the check resumes it
        _say(cluster, "prolog with the fault")
        assert cluster.runs("prolog")[-1].startswith("1 ")
        cluster.plant("hc", states["healthy"])
        cluster.wait("the node resumed", lambda: _undrained(cluster))
        _say(cluster, "healthy state planted for the health check")
    finally:
        cluster.command("scancel", job, check=False)
    cluster.plant("prolog", states["healthy"])
    job = cluster.command("sbatch", "--parsable", "-o", str(cluster.folder / "job-%j.out"),
                          "--wrap", "true").strip().split(";")[0]
    cluster.wait("the healthy job to complete", lambda: "JobState=COMPLETED" in cluster.job(job))
    assert cluster.runs("prolog")[-1].startswith("0 ")
