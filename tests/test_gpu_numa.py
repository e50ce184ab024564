"""gpu.numa beyond its recorded hosts: planted copies (a GPU whose sysfs gives no node, a
numa_maps longer than is read, a garbled numa_node, a one-node host, a TP group over both
sockets), the parsers on hostile text, and this machine's own process read live."""

from __future__ import annotations

import os
import shutil

import pytest

from doctor.model import Level, ScanOptions, Severity
from doctor.scan import scan
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from probes.helpers import numa_nodes
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS

RULES = builtin_rules()
MISPLACED = "l40s-2socket-numa-misplaced"
GPU0_NODE = "fs/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/numa_node"


def copy_of(tmp_path, name):
    root = tmp_path / name
    shutil.copytree(FIXTURE_HOSTS / name, root, symlinks=True)
    return root


def numa_scan(root):
    report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), PROBES, RULES)
    assert report.rule_errors == []
    found = sorted((f.rule, f.severity.label, f.key) for f in report.findings
                   if f.rule == "numa-misplaced" and f.severity >= Severity.WARNING)
    return found, {p.name: p for p in report.probes}["gpu.numa"]


@pytest.mark.slow
def test_sysfs_without_a_node_falls_back_to_nvml(tmp_path):
    """numa_node -1 (firmware without _PXM): NVML's nvmlDeviceGetNumaNodeId still says 0."""
    root = copy_of(tmp_path, MISPLACED)
    (root / GPU0_NODE).write_text("-1\n")
    found, probe = numa_scan(root)
    assert found == [("numa-misplaced", "warning", "vllm")]
    assert probe.record.engines[0].gpu_node == 0


@pytest.mark.slow
def test_sysfs_is_read_before_nvml(tmp_path):
    """sysfs's node is the kernel's own (ACPI _PXM); where it and NVML disagree, it wins."""
    root = copy_of(tmp_path, MISPLACED)
    (root / GPU0_NODE).write_text("1\n")
    found, probe = numa_scan(root)
    assert probe.record.engines[0].gpu_node == 1
    assert found == []


@pytest.mark.slow
def test_a_garbled_numa_node_is_an_error_naming_the_file(tmp_path):
    root = copy_of(tmp_path, MISPLACED)
    (root / GPU0_NODE).write_text("zero\n")
    _, probe = numa_scan(root)
    assert probe.status == "error"
    assert "0000:18:00.0/numa_node" in probe.reason and "not a NUMA node number" in probe.reason


@pytest.mark.slow
def test_a_numa_maps_longer_than_read_is_summed_as_far_as_read(tmp_path):
    root = copy_of(tmp_path, MISPLACED)
    line = "7f3a40000000 default anon=512 dirty=512 N1=512 kernelpagesize_kB=4\n"
    (root / "fs/proc/23110/numa_maps").write_text(line * (numa_nodes.MAX_MAPS_LINES + 500))
    found, probe = numa_scan(root)
    engine = probe.record.engines[0]
    assert engine.memory_partial is True
    assert engine.memory_bytes == numa_nodes.MAX_MAPS_LINES * 512 * 4096
    assert found == [("numa-misplaced", "warning", "vllm")]


@pytest.mark.slow
def test_another_users_numa_maps_unreadable_judges_the_cpus_alone(tmp_path):
    import tomli_w

    from doctor._toml import tomllib

    root = copy_of(tmp_path, MISPLACED)
    (root / "fs/proc/23110/numa_maps").unlink()
    manifest = tomllib.loads((root / "host.toml").read_text())
    manifest["errors"]["/proc/23110/numa_maps"] = "no-permission"
    (root / "host.toml").write_text(tomli_w.dumps(manifest))
    found, probe = numa_scan(root)
    engine = probe.record.engines[0]
    assert engine.memory_bytes is None and engine.missing["memory_bytes"] == "no-permission"
    assert engine.cpus_elsewhere
    assert found == [("numa-misplaced", "warning", "vllm")]


@pytest.mark.slow
def test_a_one_node_host_is_skipped_and_says_why(tmp_path):
    root = copy_of(tmp_path, MISPLACED)
    shutil.rmtree(root / "fs/sys/devices/system/node/node1")
    found, probe = numa_scan(root)
    assert probe.status == "skipped" and "one NUMA node" in probe.reason
    assert found == []


def test_a_tensor_parallel_group_over_both_sockets_is_noted_not_judged():
    found, probe = numa_scan(FIXTURE_HOSTS / "l40s-4x-2socket")
    (engine,) = probe.record.engines
    assert engine.gpu_nodes == (0, 0, 1, 1) and engine.gpu_node is None
    assert "no one node is near all of them" in engine.note
    assert found == []


@pytest.mark.parametrize("text,cpus", [
    ("0-3,8", {0, 1, 2, 3, 8}), ("", set()), ("\n", set()), ("5", {5}),
    ("3-1", None), ("a-b", None), ("0-99999999", None), ("1,,2", None), ("-1", None),
    ("0-65535,0-65535", None),
])
def test_cpulist(text, cpus):
    got = numa_nodes.parse_cpulist(text)
    assert (None if got is None else set(got)) == cpus


def test_cpulist_round_trips():
    for text in ("0-95,192-287", "0", "1,3,5-7"):
        assert numa_nodes.format_cpulist(numa_nodes.parse_cpulist(text)) == text


def test_numa_maps_sums_pages_by_page_size():
    text = ("1000 default anon=10 N0=10 kernelpagesize_kB=4\n"
            "2000 bind:1 huge anon=2 N1=2 kernelpagesize_kB=2048\n"
            "3000 default file=/x N0=3 N1=1\n"  # no page size: 4 KiB
            "4000 default N9999=5 kernelpagesize_kB=4\n"  # past MAX_NODES: not a node
            "garbage\n")
    placed = numa_nodes.parse_numa_maps(text)
    assert placed.bytes_by_node == {0: 13 * 4096, 1: 2 * 2048 * 1024 + 4096}
    assert not placed.truncated


def test_live_this_process():
    """This process's own status and numa_maps, read through the live seam."""
    host = LiveHost()
    where = numa_nodes.allowed(host, os.getpid())
    assert where.reason is None and where.cpus == frozenset(os.sched_getaffinity(0))
    nodes = numa_nodes.node_map(host)
    placed = numa_nodes.memory_placement(host, os.getpid())
    if nodes.reason is None and placed.reason is None:
        assert set(placed.bytes_by_node) <= set(nodes.cpus)
        assert sum(placed.bytes_by_node.values()) > 1 << 20  # a Python process: > 1 MiB


PLACEMENT_FILES = (GPU0_NODE, "fs/proc/23110/status", "fs/proc/23110/numa_maps",
                   "fs/proc/23110/cgroup", "fs/proc/devices",
                   "fs/sys/devices/system/node/node1/cpulist")
HOSTILE = ("", "\0" * 4096, "-1\n", "99999\n", "1" * 5000, "N0=" + "9" * 400 + "\n",
           "Cpus_allowed_list:\t0-65535\nMems_allowed_list:\t0-1023\n",
           "Cpus_allowed_list:\t\nMems_allowed_list:\t\n",
           "x N0=1 N1=2 kernelpagesize_kB=" + "9" * 30 + "\n" * 3,
           "8:devices:/../../../..\n", "0::/\n" * 3000, "Character devices:\n508\n",
           "\ufffd\u202e" * 300, "0-3,\n", ":" * 1000)


@pytest.mark.slow
def test_hostile_placement_files_never_sink_the_probes(tmp_path):
    """Each placement file replaced by hostile text in turn: gpu.numa and gpu.devices end ok,
    skipped or with an error naming what was wrong, never a traceback; bounded in time."""
    import random
    import time

    specs = tuple(p for p in PROBES if p.name in ("gpu.topology", "gpu.numa", "gpu.devices"))
    rng = random.Random(15)
    start = time.monotonic()
    tried = 0
    for n in range(40):
        if time.monotonic() - start > 15:
            break
        root = tmp_path / f"h{n}"
        shutil.copytree(FIXTURE_HOSTS / "l40s-2socket-container-lost-gpu", root, symlinks=True)
        for rel in rng.sample(PLACEMENT_FILES, 2):
            (root / rel).write_text(rng.choice(HOSTILE))
        report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), specs, RULES)
        assert report.rule_errors == []
        for p in report.probes:
            assert p.status in ("ok", "skipped", "error"), (p.name, p.status, p.reason)
            assert "internal error" not in (p.reason or "") and "Traceback" not in (p.reason or "")
        tried += 1
    assert tried >= 5
