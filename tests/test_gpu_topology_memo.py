"""gpu.topology is read once per scan: gpu.peer_to_peer, gpu.numa and gpu.collective build on
the same record instead of asking NVML for every pair again."""

from __future__ import annotations

from collections import Counter

from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.registry import PROBES
from tests.conftest import FIXTURE_HOSTS


class Counting(RecordedHost):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.calls: Counter[str] = Counter()

    def nvml(self, name, *args):
        self.calls[name] += 1
        return super().nvml(name, *args)


def test_one_scan_reads_the_topology_once():
    host = Counting(str(FIXTURE_HOSTS / "l40s-2socket-numa-placed"))
    chosen = tuple(p for p in PROBES if p.name in ("gpu.topology", "gpu.numa", "gpu.peer_to_peer"))
    report = scan(host, ScanOptions(level=Level.STANDARD), chosen, [])
    topology = next(p for p in report.probes if p.name == "gpu.topology")
    assert topology.status == "ok"
    pairs = host.calls["nvmlDeviceGetTopologyCommonAncestor"]
    assert pairs == len(topology.record.pairs) > 0  # one read a pair, not one a probe
    host.new_scan()
    scan(host, ScanOptions(level=Level.STANDARD), chosen, [])
    assert host.calls["nvmlDeviceGetTopologyCommonAncestor"] == 2 * pairs  # once a scan
