"""net.interfaces in a real network namespace of the test's own: veth pairs named as no
container runtime names them (vA with a routable address, vB with none of ours, vC down),
a bridge named docker0, an interface with only a link-local address, lo. The probe runs inside it (``ip netns exec`` mounts the namespace's
own /sys) through the live seam, as a scan would; then its capture replays to the same
record. Needs root and iproute2; the namespace is deleted whatever happens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[1]
NS = f"llmd-nccl-{os.getpid()}"
SETUP = [
    "ip link set lo up",
    "ip link add vA type veth peer name vB",
    "ip addr add 10.77.0.1/24 dev vA",
    "ip link set vB up",
    "ip link set vA up",
    "ip link add vC type veth peer name vD",  # vC left down
    "ip link set vD up",
    "ip link add docker0 type bridge",
    "ip addr add 172.17.0.1/16 dev docker0",
    "ip link set docker0 up",
    "ip link add ens9 type veth peer name ens9p",  # no dummy module on every kernel
    "ip addr add 169.254.10.1/16 dev ens9",
    "ip link set ens9p up",
    "ip link set ens9 up",
]
PROBE = """
import json, sys
from doctor.model import ScanOptions
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.net import interfaces
live = interfaces.probe(LiveHost(), ScanOptions())
rec = RecordingHost(LiveHost(), sys.argv[1])
captured = interfaces.probe(rec, ScanOptions())
rec.writer.save({"level": "quick"})
replayed = interfaces.probe(RecordedHost(sys.argv[1]), ScanOptions())
print(json.dumps({"same": live == captured == replayed, "reachable": list(live.reachable),
                  "items": {i.name: [i.kind, i.up, i.why_unreachable, [a.address for a in i.addresses]]
                            for i in live.interfaces}}))
"""


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)


@pytest.fixture()
def namespace():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a network namespace")
    made = _ip("netns", "add", NS)
    if made.returncode != 0:
        pytest.skip(f"no network namespace here: {made.stderr.strip()}")
    try:
        for command in SETUP:
            done = _ip("netns", "exec", NS, *command.split())
            assert done.returncode == 0, f"{command}: {done.stderr}"
        yield NS
    finally:
        _ip("netns", "del", NS)


def test_the_probe_in_a_namespace_of_our_own(namespace, tmp_path):
    run = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", PROBE, str(tmp_path / "cap")],
                         capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    items = got["items"]
    assert items["vA"][:3] == ["veth", True, None] and "10.77.0.1" in items["vA"][3]
    # up without an address of ours: the kernel gave it only its fe80:: (IPv6 link-local)
    assert items["vB"][:3] == ["veth", True, "link-local only"]
    assert items["vC"][:3] == ["veth", False, "down"]
    assert items["docker0"][:3] == ["container-bridge", True, "container bridge"]
    assert items["ens9"][:3] == ["veth", True, "link-local only"]  # 169.254/16: the same on every host
    assert items["lo"][:3] == ["loopback", True, "loopback"]
    assert got["reachable"] == ["vA"] and got["same"]
