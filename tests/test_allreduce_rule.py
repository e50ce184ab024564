"""gpu-allreduce-bandwidth-low (checks/gpu_collective.toml): its table
(tests/rule_cases/gpu-allreduce-bandwidth-low.toml), and a recorded PCIe pair whose
all-reduce was staged through SHM raising it end to end.

Until probes/registry.py lists gpu.collective, the rule is loaded against ``SPEC``, the
block the registry is to hold; then the registry's own entry is used.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from doctor._toml import tomllib
from doctor.model import Level, ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.rules.loader import element_type, load_file, optional_inner
from probes.gpu import collective as gpu_collective
from probes.registry import by_name
from tests.test_allreduce_probe import HEALTHY_H100, _two_gpus

REPO = Path(__file__).resolve().parent.parent
CASES = REPO / "tests" / "rule_cases" / "gpu-allreduce-bandwidth-low.toml"
PROBES = by_name()
SPEC = PROBES["gpu.collective"]
(RULE,) = load_file(REPO / "checks" / "gpu_collective.toml", PROBES)


def _complete(tp, data):
    """A case's partial record with every field it leaves out None (tests/test_rule_cases.py)."""
    tp = optional_inner(tp)
    if dataclasses.is_dataclass(tp) and isinstance(data, dict):
        hints = typing.get_type_hints(tp)
        assert not set(data) - set(hints), f"{tp.__name__} has no field(s) {set(data) - set(hints)}"
        return tp(**{name: _complete(hints[name], data.get(name)) for name in hints})
    if isinstance(data, list):
        return tuple(_complete(element_type(tp), item) for item in data)
    return data


def _cases():
    for case in tomllib.loads(CASES.read_text())["case"]:
        yield pytest.param(case, id=case["name"])


@pytest.mark.parametrize("case", list(_cases()))
def test_rule_case(case):
    record = _complete(gpu_collective.CollectiveRecord, case["records"]["gpu.collective"])
    findings, errors = evaluate([RULE], [ProbeResult("gpu.collective", "ok", 0.0, None, record)])
    assert errors == []
    assert len(findings) == len(case["expect"]), [f.title for f in findings]
    for finding, want in zip(findings, case["expect"]):
        assert finding.cause == "gpu-p2p-blocked" and finding.severity.label == want["severity"]
        assert finding.key == want["evidence"]["gpus"]  # the GPU group, what lasts between scans
        for key, value in want["evidence"].items():
            assert finding.evidence[key] == (None if value == "None" else value), key
        assert "{" not in finding.title and "None" not in finding.title, finding.title


def test_the_table_has_a_firing_and_a_silent_case():
    cases = tomllib.loads(CASES.read_text())["case"]
    assert any(c["expect"] for c in cases) and any(not c["expect"] for c in cases)


def test_a_recorded_pcie_pair_staged_through_shm_raises_it_and_a_healthy_nvlink_pair_does_not():
    staged = {**HEALTHY_H100, "busbw_gbps": 7.8, "algbw_gbps": 7.8, "transport": "SHM"}
    full = ScanOptions(level=Level.FULL)
    for host, fires in ((_two_gpus("a100-pcie-80gb", "PXB", measured=staged), True),
                        (_two_gpus("h100-sxm", version=6, measured=HEALTHY_H100), False)):
        record = gpu_collective.probe(host, full)
        findings, errors = evaluate([RULE], [ProbeResult("gpu.collective", "ok", 0.0, None, record)])
        assert errors == [] and len(findings) == int(fires)
        if fires:
            assert findings[0].title == ("GPU 0,1: all-reduce traffic staged on a P2P-capable path "
                                         "(PXB): busbw 7.8 GB/s, 0.248 of 31.5 GB/s, NCCL chose SHM")
