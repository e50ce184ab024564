"""The Slurm story of tests/test_slurm_live.py, told on a real one-node Slurm, with figures.

Starts munged, slurmctld and slurmd in a temporary folder (tests/slurm_cluster.py), with
``llm-doctor slurm-healthcheck`` as slurmd's HealthCheckProgram and Prolog, plants state
files a real daemon wrote on recorded hosts, and prints ``scontrol show node`` (its State= and
Reason=) at each step: a critical finding drains the node, two more health checks change
nothing, another critical finding updates our reason, its clearing resumes the node; an operator's drain is left alone through a
critical and a healthy state; a prolog with the fault drains the node and requeues the job.
Then it times ``--runs`` direct runs of slurm-healthcheck against the drained node (a fresh
state, one scontrol call each: the idempotent case) and prints their median and max.

Usage: PYTHONPATH=. python benchmarks/slurm_transcript.py [--runs 100]
Needs root, slurm-wlm and munge. Every daemon it starts is stopped at the end.
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests import slurm_cluster
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.fixtures.build_all_hosts import ensure_built


def _node(cluster: slurm_cluster.Cluster, step: str) -> None:
    line = cluster.node_line()
    state = line[line.index(" State="):].split()[0]
    reason = line[line.index(" Reason="):].strip() if " Reason=" in line else "Reason=(none)"
    print(f"[{step}]\n  $ scontrol show node {cluster.node} --oneliner | (State=, Reason=)\n"
          f"  NodeName={cluster.node} {state} {reason}")


def _until(cluster: slurm_cluster.Cluster, what: str, test) -> None:
    cluster.wait(what, lambda: test(cluster.show()), 30)


def story(cluster: slurm_cluster.Cluster, states: dict[str, Path]) -> None:
    cluster.plant("hc", states["critical"])
    _until(cluster, "our drain", lambda n: n.ours and "DRAIN" in n.state)
    _node(cluster, "HealthCheckProgram, critical state (h100-sxm-8x-gpu-lost)")
    cluster.wait_health_checks(2)
    _node(cluster, "two health checks later: no update (same stamp)")
    cluster.plant("hc", states["other"])
    _until(cluster, "our reason updated", lambda n: n.our_rule == "gpu-fallen-off-the-bus")
    _node(cluster, "another critical finding (h100-sxm-8x-gpu-gone): our reason updated")
    cluster.plant("hc", states["healthy"])
    _until(cluster, "the resume", lambda n: n.state == "IDLE")
    _node(cluster, "healthy state (h100-sxm-8x-nvswitch): resumed")
    cluster.command("scontrol", "update", f"NodeName={cluster.node}", "State=DRAIN",
                    "Reason=disk replacement, ticket 4711")
    _until(cluster, "the operator's drain", lambda n: n.state == "IDLE+DRAIN")
    _node(cluster, "an operator drains the node")
    cluster.plant("hc", states["critical"])
    cluster.wait_health_checks(2)
    _node(cluster, "critical state, two health checks: the operator's reason left alone")
    cluster.plant("hc", states["healthy"])
    cluster.wait_health_checks(2)
    _node(cluster, "healthy state, two health checks: not resumed (not ours)")
    said = (cluster.folder / "log" / "hc-runs.out").read_text().splitlines()[-1]
    print(f"  the health check said: {said}")
    cluster.command("scontrol", "update", f"NodeName={cluster.node}", "State=RESUME")
    _until(cluster, "the operator's resume", lambda n: n.state == "IDLE")
    cluster.plant("hc", None)
    cluster.plant("prolog", states["critical"])
    job = cluster.command("sbatch", "--parsable", "--wrap", "true", "-o",
                          str(cluster.folder / "job.out")).strip().split(";")[0]
    cluster.wait("the requeue", lambda: "Restarts=1" in cluster.job(job), 30)
    _until(cluster, "the prolog's drain", lambda n: n.ours and "DRAIN" in n.state)
    words = [w for w in cluster.job(job).split()
             if w.startswith(("JobState=", "Reason=", "Restarts="))]
    print(f"[Prolog, critical state: sbatch --wrap true]\n  $ scontrol show job {job} "
          f"--oneliner | (JobState=, Reason=, Restarts=)\n  JobId={job} {' '.join(words)}")
    _node(cluster, "Prolog, critical state: the node")
    cluster.command("scancel", job, check=False)


ENTRIES = {"llm-doctor slurm-healthcheck": ["doctor.commands.cli", "slurm-healthcheck"],
           "python -m doctor.commands.slurm": ["doctor.commands.slurm"]}


def timings(cluster: slurm_cluster.Cluster, critical: Path, runs: int,
            entry: list[str]) -> list[float]:
    """Seconds per run of slurm-healthcheck on the node our reason drains (idempotent)."""
    cluster.plant("hc", None)
    argv = [sys.executable, "-m", *entry, "--state-file", str(critical), "--node", cluster.node]
    subprocess.run(argv, cwd=REPO, env=cluster.env, capture_output=True, timeout=60)
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=REPO, env=cluster.env, capture_output=True, text=True,
                              timeout=60)
        seconds.append(time.perf_counter() - started)
        assert "already drained" in done.stdout, done.stdout + done.stderr
    return seconds


def main() -> None:
    ensure_built()  # the recorded test hosts, from their sources
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="llm-doctor-slurm-") as tmp:
        work = Path(tmp)
        (work / "states").mkdir()
        states = {
            "critical": slurm_cluster.beat_state(FIXTURE_HOSTS / "h100-sxm-8x-gpu-lost",
                                                 work / "states" / "critical.json",
                                                 work / "states", True),
            "other": slurm_cluster.beat_state(FIXTURE_HOSTS / "h100-sxm-8x-gpu-gone",
                                              work / "states" / "other.json",
                                              work / "states", True),
            "healthy": slurm_cluster.beat_state(FIXTURE_HOSTS / "h100-sxm-8x-nvswitch",
                                                work / "states" / "healthy.json",
                                                work / "states", False)}
        cluster = slurm_cluster.start(work / "slurm")
        try:
            story(cluster, states)
            seconds = {name: timings(cluster, states["critical"], args.runs, entry)
                       for name, entry in ENTRIES.items()}
            started = time.perf_counter()
            for _ in range(args.runs):
                cluster.node_line()
            show_s = (time.perf_counter() - started) / args.runs
        finally:
            cluster.stop()
    print(f"fresh state, node already drained by us (one scontrol call), {args.runs} runs each:")
    for name, each in seconds.items():
        print(f"  {name}: median {statistics.median(each):.3f}s, max {max(each):.3f}s")
    print(f"  of which scontrol show node alone: mean {show_s:.3f}s")


if __name__ == "__main__":
    main()
