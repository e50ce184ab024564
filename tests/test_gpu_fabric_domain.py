"""Issue 32 item 8: the NVLink domain across trays (GB200 NVL72), probed on a copy of the
recorded DGX H100 turned into a GB200 compute tray: no NVSwitch on its PCI bus (the switches
are in the switch trays), every GPU in one cluster and clique as a real tray reports them
(leptonai/gpud#1106: clique 4026, cluster 9c6f5af3-53bf-49b5-a436-b66766c413c3), one GPU's
health mask set (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*), 18 NVLinks answering and index 18
refused as a GB200 refuses it (NVML_ERROR_INVALID_ARGUMENT, NVIDIA/TensorRT-LLM#17060), and an
IMEX config for the rack's 18 trays with neither the daemon nor channel0."""

from __future__ import annotations

import json
import shutil
import uuid

import pynvml
import pytest

from doctor._toml import tomllib
from doctor.model import Level, ScanOptions, Severity
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.helpers import nvlinks
from probes.helpers.fabric_domain import HEALTH_FIELDS, health_problems
from probes.registry import by_name
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS

CLUSTER = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
SWITCHES = ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")
# GPU 2: route unhealthy (1 << 4) and too few NVLinks (5 << 8); the other fields "false"
SICK = 2 | 2 << 2 | 1 << 4 | 2 << 6 | 5 << 8
HEALTHY = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8
RULES = [r for r in builtin_rules() if r.probes == ("gpu.fabric",) or "gpu.fabric" in r.probes]


def _tray(root, imex_nodes=18, imex_running=False, channel0=False):
    import tomli_w

    manifest = tomllib.loads((root / "host.toml").read_text())
    for bdf in SWITCHES:
        manifest["links"]["/sys/bus/pci/devices"].pop(bdf)
    if channel0:
        manifest.setdefault("paths", {})["/dev/nvidia-caps-imex-channels/channel0"] = {
            "device": "0:5", "is_dir": False, "fs_total_bytes": 0, "fs_free_bytes": 0}
    (root / "host.toml").write_text(tomli_w.dumps(manifest))
    entries = json.loads((root / "nvml.json").read_text())
    for e in entries:
        if e["call"] == "nvmlDeviceGetGpuFabricInfoV":
            e["value"].update(clusterUuid=list(uuid.UUID(CLUSTER).bytes), cliqueId=4026,
                              healthMask=SICK if e["args"] == [2] else HEALTHY)
    entries.append({"call": "nvmlDeviceGetNvLinkState", "args": [0, 18], "error": "failed"})
    (root / "nvml.json").write_text(json.dumps(entries))
    if imex_nodes:
        (root / "fs/etc/nvidia-imex").mkdir(parents=True)
        (root / "fs/etc/nvidia-imex/nodes_config.cfg").write_text(
            "# the rack's compute trays\n" + "".join(f"10.0.0.{i}\n" for i in range(1, imex_nodes + 1)))
    if imex_running:
        (root / "fs/proc/4100").mkdir()
        (root / "fs/proc/4100/comm").write_text("nvidia-imex\n")
        (root / "fs/proc/4100/cmdline").write_text("/usr/bin/nvidia-imex\0-c\0/etc/nvidia-imex/config.cfg\0")
    # the tray runs no fabric manager: its process leaves the table
    shutil.rmtree(root / "fs/proc/2871")
    return root


@pytest.fixture(scope="module")
def tray(tmp_path_factory):
    root = tmp_path_factory.mktemp("gb200") / "tray"
    shutil.copytree(FIXTURE_HOSTS / "h100-sxm-8x-nvswitch", root, symlinks=True)
    return _tray(root)


def _scan(root):
    report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), [by_name()["gpu.fabric"]], RULES)
    assert report.rule_errors == []
    probe = report.probes[0]
    assert probe.status == "ok", probe.reason
    found = sorted((f.rule, f.severity.label) for f in report.findings if f.severity >= Severity.WARNING)
    return probe.record, found, report


def test_health_fields_are_nvmls_shifts_and_widths():
    """The decoder's table against the binding's own constants (nvidia-ml-py's pynvml.py)."""
    for name, shift, width, _ in HEALTH_FIELDS:
        key = name.upper().replace("-", "_").replace("DEGRADED_BANDWIDTH", "DEGRADED_BW")
        assert getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{key}") == shift, name
        assert getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{key}") == width, name
    assert health_problems(pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NO_PARTITION
                           << pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION) \
        == ("config-no-partition",)
    assert health_problems(HEALTHY) == () and health_problems(0) == () and health_problems(None) is None


def test_gb200_tray_reads_cluster_health_links_and_imex(tray):
    record, found, report = _scan(tray)
    assert record.nvswitches == 0 and record.multi_node and record.clusters == 1
    assert {g.cluster_uuid for g in record.gpus} == {CLUSTER}
    assert {g.clique_id for g in record.gpus} == {4026}
    assert record.gpus[2].health == ("route-unhealthy", "config-insufficient-nvlinks")
    assert record.gpus[0].health == ()
    # index 18 refused as a GB200 refuses it: 18 links, no error
    assert record.gpus[0].nvlinks_total == 18 and record.gpus[0].nvlinks_up == 18
    # no switch here: the fabric manager is the switch trays', not judged, not "not running"
    assert record.manager_running is None and "switch trays" in record.manager_reason
    assert (record.imex_nodes, record.imex_running, record.imex_channel0) == (18, False, False)
    assert found == [("imex-domain-not-ready", "critical"), ("nvlink-domain-unhealthy", "critical")]
    unhealthy = next(f for f in report.findings if f.rule == "nvlink-domain-unhealthy")
    assert unhealthy.evidence["problem"] == "GPU2 route-unhealthy+config-insufficient-nvlinks"


def test_gb200_tray_with_imex_up_and_a_healthy_fabric_is_silent(tmp_path):
    root = tmp_path / "tray"
    shutil.copytree(FIXTURE_HOSTS / "h100-sxm-8x-nvswitch", root, symlinks=True)
    _tray(root, imex_running=True, channel0=True)
    entries = json.loads((root / "nvml.json").read_text())
    for e in entries:
        if e["call"] == "nvmlDeviceGetGpuFabricInfoV":
            e["value"]["healthMask"] = HEALTHY
    (root / "nvml.json").write_text(json.dumps(entries))
    record, found, _ = _scan(root)
    assert (record.imex_running, record.imex_channel0) == (True, True)
    assert found == []


def test_nvlink_loops_reach_nvmls_bound():
    """The link loops stop at the first link a GPU refuses, so their bound must not cut a GPU
    short: NVML_NVLINK_MAX_LINKS is 36 in nvidia-ml-py 13 (it was 18, the old loops' bound)."""
    assert nvlinks.NVLINK_MAX_LINKS >= pynvml.NVML_NVLINK_MAX_LINKS
    assert nvlinks.FI_DEV_NVLINK_LINK_COUNT == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT
