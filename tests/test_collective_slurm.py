"""``llm-doctor collective`` under the real one-node Slurm (tests/slurm_cluster.py): ``srun -n 2``
starts two tasks, and their ranks find each other from SLURM_PROCID, SLURM_NTASKS and
SLURM_LAUNCH_NODE_IPADDR, with no rendezvous flag; a real gloo all-reduce between them. The
cluster's daemons are stopped at the end, pass or fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import slurm_cluster
from tests.daemon_helpers import need

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    for binary, package in (("munged", "munge"), ("slurmctld", "slurmctld"),
                            ("slurmd", "slurmd"), ("srun", "slurm-client")):
        need(binary, package)
    if os.geteuid() != 0:
        pytest.skip("the one-node Slurm runs slurmd as root")
    started = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    try:
        yield started
    finally:
        started.stop()


def test_srun_two_tasks_find_each_other_from_slurms_variables(cluster, tmp_path):
    # the node has one CPU (slurm_cluster): -O lets two tasks share it
    argv = ["srun", "-O", "-n", "2", "-t", "1", f"--output={tmp_path}/out.%t",
            sys.executable, "-m", "doctor.commands.cli", "collective", "--format", "json",
            "--state-file", "", "--timeout-s", "30", "--budget-s", "0.5", "--bytes", str(4 << 20)]
    done = subprocess.run(argv, env=cluster.env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"{done.stderr}\n{cluster.logs()}"
    records = [json.loads((tmp_path / f"out.{task}").read_text())["probes"][0]["data"]
               for task in (0, 1)]
    for task, r in enumerate(records):
        assert r["rendezvous"] == "slurm" and r["world"] == 2 and r["ranks_here"] == [task]
        assert r["outcome"] == "ok" and r["busbw_gbps"] > 0
    assert records[0]["master"] == records[1]["master"]  # the same port, from the job id
    print(f"\nsrun -n 2: master {records[0]['master']}, busbw {records[0]['busbw_gbps']} GB/s "
          f"over {records[0]['interface']}")
