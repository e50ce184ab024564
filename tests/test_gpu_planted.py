"""Faults planted in a copy of the healthy 8x H100 host, one NVML answer edited per story:
each raises exactly its own finding (one fault, one finding)."""

from __future__ import annotations

import json
import shutil

import pytest

from doctor.model import Level, ScanOptions, Severity
from doctor.seam.recorded import RecordedHost
from probes.registry import PROBES
from doctor.scan import scan
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS

RULES = builtin_rules()
HEALTHY = FIXTURE_HOSTS / "h100-sxm-8x-nvswitch"


def planted(tmp_path, edits: dict[tuple[str, tuple], object]):
    """A copy of the healthy host whose nvml.json answers ``edits`` {(call, args): value}."""
    root = tmp_path / "host"
    shutil.copytree(HEALTHY, root, symlinks=True)
    entries = json.loads((root / "nvml.json").read_text())
    for entry in entries:
        key = (entry["call"], tuple(entry["args"]))
        if key in edits:
            entry.pop("error", None)
            entry.pop("value", None)
            value = edits.pop(key)
            entry.update({"error": value[6:]} if str(value).startswith("error:") else {"value": value})
    assert not edits, f"no such recorded calls: {list(edits)}"
    (root / "nvml.json").write_text(json.dumps(entries))
    report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), PROBES, RULES)
    assert report.rule_errors == []
    return sorted((f.rule, f.severity.label) for f in report.findings if f.severity >= Severity.WARNING), report


@pytest.mark.slow
def test_the_healthy_host_raises_nothing(tmp_path):
    assert planted(tmp_path, {})[0] == []


def test_gpu3_link_at_x8(tmp_path):
    found, report = planted(tmp_path, {("nvmlDeviceGetCurrPcieLinkWidth", (3,)): 8})
    assert found == [("pcie-link-degraded", "critical")]
    assert report.findings[0].evidence["gpu"] == 3


def test_idle_gen1_everywhere_is_power_saving(tmp_path):
    edits = {("nvmlDeviceGetCurrPcieLinkGeneration", (i,)): 1 for i in range(8)}
    assert planted(tmp_path, edits)[0] == []


def test_power_limit_lowered_and_holding_clocks_is_power_capped_only(tmp_path):
    found, report = planted(tmp_path, {
        ("nvmlDeviceGetEnforcedPowerLimit", (5,)): 500_000,
        ("nvmlDeviceGetCurrentClocksEventReasons", (5,)): 0x4,
        ("nvmlDeviceGetClockInfo", (5, 1)): 1305,
        ("nvmlDeviceGetPowerUsage", (5,)): 498_000})
    assert found == [("gpu-power-capped", "warning")]
    assert report.findings[0].evidence["power_limit_w"] == 500.0


def test_power_brake_is_power_not_thermal(tmp_path):
    found, _ = planted(tmp_path, {("nvmlDeviceGetCurrentClocksEventReasons", (0,)): 0x88,
                                  ("nvmlDeviceGetClockInfo", (0, 1)): 705})
    assert found == [("gpu-power-throttling", "critical")]


@pytest.mark.slow
def test_persistence_off_on_two_cards_is_one_finding(tmp_path):
    found, report = planted(tmp_path, {("nvmlDeviceGetPersistenceMode", (2,)): 0,
                                       ("nvmlDeviceGetPersistenceMode", (6,)): 0})
    assert found == [("gpu-persistence-mode-off", "warning")]
    assert report.findings[0].evidence["gpus"] == "2, 6"


@pytest.mark.slow
def test_nvlink_down_makes_cross_socket_pairs_a_shared_path(tmp_path):
    edits = {("nvmlDeviceGetP2PStatus", (a, b, 2)): 5 for a in range(8) for b in range(a + 1, 8)}
    edits.update({("nvmlDeviceGetP2PStatus", (a, b, 0)): 3 for a in range(4) for b in range(4, 8)})
    found, report = planted(tmp_path, edits)
    assert found == [("pcie-topology-shared-path", "warning")]
    assert report.findings[0].evidence["pairs"].count("SYS") == 16


STOPPED = ("nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksEventReasons",
           "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetCurrPcieLinkWidth",
           "nvmlDeviceGetRemappedRows")


@pytest.mark.parametrize("reason", ["not-supported", "no-permission", "failed"])
def test_a_gpu_that_stops_answering_raises_no_false_finding(tmp_path, reason):
    edits = {(c, (4, 0) if c == "nvmlDeviceGetTemperature" else (4,)): f"error:{reason}" for c in STOPPED}
    found, report = planted(tmp_path, edits)
    assert found == []
    assert all(p.status in ("ok", "skipped") for p in report.probes)


def test_a_gpu_answering_gpu_is_lost_is_a_critical_hardware_error(tmp_path):
    """NVML_ERROR_GPU_IS_LOST says the GPU fell off the bus: not a value it lacks."""
    edits = {(c, (4, 0) if c == "nvmlDeviceGetTemperature" else (4,)): "error:device-lost"
             for c in STOPPED}
    found, report = planted(tmp_path, edits)
    assert found == [("gpu-hardware-errors", "critical")]
    assert report.findings[0].evidence["gpu"] == 4
    assert report.findings[0].evidence["lost"] is True
    assert all(p.status in ("ok", "skipped") for p in report.probes)
