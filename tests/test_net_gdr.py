"""net.gpudirect and net.nic_affinity: the GPUDirect RDMA path, and the NIC nearest each GPU.

The recorded hosts are built from real public outputs (tests/fixtures/gdr/PROVENANCE.md) by
tests/fixtures/build_gdr_hosts.py; the parsers are fed the real lines those came from.
"""

from __future__ import annotations

import os
import shutil

import pytest

from doctor.model import Level, ScanOptions, Skip
from doctor.seam.recorded import RecordedHost
from probes.helpers.pci_path import level, nearer
from probes.net import gpudirect, nic_affinity
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures import build_gdr_hosts as gdr

QUICK = ScanOptions(level=Level.QUICK)
HOST = "/sys/devices/pci0000:16/0000:16:01.0"


def _host(name: str) -> RecordedHost:
    return RecordedHost(FIXTURE_HOSTS / name)


def _copy(name: str, into) -> object:
    """A copy of a recorded host to plant a fault in: its files hard links (a host has a
    thousand), so a test replaces a file with ``_plant`` and never writes through a link."""
    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:  # another filesystem (a tmpfs /tmp): a real copy
            shutil.copy2(src, dst)

    root = into / name
    shutil.copytree(FIXTURE_HOSTS / name, root, symlinks=True, copy_function=link)
    return root


def _plant(path, data: str | bytes) -> None:
    """Replace ``path`` by a new file holding ``data`` (the old one may be a hard link)."""
    path.unlink(missing_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


# --- the PCIe path between two functions, as nvidia-smi topo -m names it ---------------

@pytest.mark.parametrize("a, b, nodes, want", [
    (f"{HOST}/0000:17:00.0/0000:18:08.0/0000:19:00.0",
     f"{HOST}/0000:17:00.0/0000:18:10.0/0000:1a:00.0", (0, 0), "PIX"),  # one switch
    (f"{HOST}/0000:17:00.0", f"{HOST}/0000:17:00.1", (0, 0), "PIX"),  # two ports of one card
    (f"{HOST}/0000:17:00.0/0000:18:08.0/0000:19:00.0/0000:1a:08.0/0000:1b:00.0",
     f"{HOST}/0000:17:00.0/0000:18:10.0/0000:1c:00.0", (0, 0), "PXB"),  # two switch levels
    ("/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0",
     "/sys/devices/pci0000:16/0000:16:03.0/0000:18:00.0", (0, 0), "PHB"),  # two root ports
    ("/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0",
     "/sys/devices/pci0000:38/0000:38:01.0/0000:39:00.0", (0, 0), "NODE"),
    ("/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0",
     "/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0", (0, 1), "SYS"),
    ("/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0",
     "/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0", (None, None), "NODE"),  # one node
    ("/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0",
     "/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0", (0, None), None),  # not known
    ("/sys/devices/platform/x", f"{HOST}/0000:17:00.0", (0, 0), None),  # outside the PCI tree
])
def test_the_path_level_follows_nvidia_smi_s_legend(a, b, nodes, want):
    assert level(a, b, *nodes) == want
    assert level(b, a, nodes[1], nodes[0]) == want


def test_an_unknown_level_is_the_farthest():
    assert nearer("PXB", "SYS") and not nearer("SYS", "PXB") and nearer("SYS", None)


# --- what net.gpudirect reads, on the real lines ------------------------------------------

def test_proc_modules_from_real_lsmod_lines_name_the_peer_memory_module():
    text = gdr.proc_modules((gdr.SOURCES / "lsmod_nccl1737.txt").read_text())
    modules = gpudirect.parse_modules(text)
    assert modules["nvidia_peermem"] == "Live" and modules["ib_core"] == "Live"
    dropped = gpudirect.parse_modules(gdr.proc_modules(
        (gdr.SOURCES / "lsmod_nccl1737.txt").read_text(), drop="nvidia_peermem"))
    assert "nvidia_peermem" not in dropped
    assert gpudirect.parse_modules("garbage\n\x00\x01 x y\nnvidia_peermem 16384 0 - Loading 0x0\n") \
        == {"nvidia_peermem": "Loading"}


@pytest.mark.parametrize("line, want", [
    # nixGL#186 (Ubuntu 24.04, 565-open), neofetch#876 (proprietary), nixGL#139 (Jetson)
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
     "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\nGCC version:  gcc 13.3.0\n",
     ("565.57.01", True)),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  384.98  Thu Oct 26 15:16:01 PDT 2017\n",
     ("384.98", False)),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  35.3.1  Release Build\n",
     (None, True)),  # a Jetson's L4T numbering is not a desktop driver version
    ("", (None, None)),
    ("\x00\xff binary", (None, None)),
])
def test_the_driver_version_file_says_which_kernel_module(line, want):
    assert gpudirect.parse_driver(line) == want


@pytest.mark.parametrize("release, want", [
    ("6.8.0-90-generic", (6, 8)), ("5.4.0-150-generic", (5, 4)), ("5.12.0", (5, 12)),
    ("4.18.0-553.el8_10.x86_64", (4, 18)), ("garbage", None), ("", None),
])
def test_kernel_version(release, want):
    assert gpudirect.kernel_version(release) == want


@pytest.mark.parametrize("files, release, driver, gdr_off, path", [
    ((), "6.8.0-90-generic", ("550.90.07", False), True, None),  # nccl#1939's upgrade
    ((), "6.8.0-90-generic", ("550.90.07", True), False, "dma-buf"),
    ((), "5.4.0-150-generic", ("550.90.07", True), True, None),  # open module, old kernel
    (("/sys/module/nvidia_peermem/version",), "6.8.0-90-generic", ("550.90.07", False), False,
     "peer-memory"),
    ((), "6.8.0-90-generic", (None, None), False, None),  # the driver file unread: not known
    ((), None, ("550.90.07", True), False, None),  # the kernel unread: not known
])
def test_judging_the_two_paths(files, release, driver, gdr_off, path):
    record = gpudirect.judge(("mlx5_0",), 8, {}, files, release, driver, {})
    assert (record.gdr_off, record.path) == (gdr_off, path)


def test_nvidia_peermem_alone_is_invisible_to_nccl_2_22_and_older():
    """nccl#1676: NCCL <= 2.22.3 looks only in /sys/kernel/mm/memory_peers."""
    module_only = gpudirect.judge(("mlx5_0",), 8, {}, ("/sys/module/nvidia_peermem/version",),
                                  "5.15.0", ("550.90.07", False), {})
    assert module_only.peermem and not module_only.peermem_registered
    legacy = gpudirect.judge(("mlx5_0",), 8, {}, ("/sys/kernel/mm/memory_peers/nv_mem/version",),
                             "5.15.0", ("550.90.07", False), {})
    assert legacy.peermem and legacy.peermem_registered


def test_no_gpu_means_the_question_does_not_apply():
    record = gpudirect.judge(("mlx5_0",), None, {}, (), "6.8.0", ("550.90.07", False),
                             {"gpu_count": "library-missing"})
    assert record.gdr_off is False and record.path is None
    assert record.missing["path"] == "library-missing"


# --- the probes on the recorded hosts -------------------------------------------------------

@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """A story of build_gdr_hosts that is not built for every run, built once here from a
    copy of its base: ``story(name)`` is its directory."""
    into = tmp_path_factory.mktemp("gdr")
    built: dict[str, object] = {}

    def build(name: str):
        if name not in built:
            base = gdr.STORIES[name].base
            if not (into / base).exists():
                shutil.copytree(FIXTURE_HOSTS / base, into / base, symlinks=True)
            built[name] = gdr.build(name, into)
        return built[name]
    return build


@pytest.mark.parametrize("name, nics, path, off, kernel, open_module", [
    ("l40s-8x-rdma-far", 1, "peer-memory", False, "5.15.0-119-generic", False),
    ("h100-sxm-8x-rdma-ubuntu68", 12, None, True, "6.8.0-90-generic", False),
    ("h100-sxm-8x-rdma-dmabuf", 12, "dma-buf", False, "6.8.0-90-generic", True),
])
def test_gpudirect_on_the_recorded_hosts(name, nics, path, off, kernel, open_module):
    record = gpudirect.probe(_host(name), QUICK)
    assert len(record.rdma_devices) == nics and record.gpu_count == 8
    assert (record.path, record.gdr_off) == (path, off)
    assert (record.kernel_release, record.open_kernel_module) == (kernel, open_module)
    assert record.driver_version == "550.90.07"
    assert ("nvidia_peermem" in record.peermem_modules) == (path == "peer-memory")


def test_no_rdma_device_is_a_skip_with_its_reason():
    for probe in (gpudirect.probe, nic_affinity.probe):
        with pytest.raises(Skip, match="no RDMA device"):
            probe(_host("h100-sxm-8x-nvswitch"), QUICK)


def test_the_dgx_gives_each_gpu_its_own_nic_behind_a_switch():
    record = nic_affinity.probe(_host("h100-sxm-8x-rdma-dmabuf"), QUICK)
    names = [n.name for n in record.nics]
    assert names[:3] == ["mlx5_0", "mlx5_1", "mlx5_2"] and names[-1] == "mlx5_11"  # natural order
    nearest = {g.gpu: (g.nearest_nic, g.level) for g in record.gpus}
    # vllm#13855's matrix: GPU0 PXB NIC0, GPU1 PXB NIC3, ... GPU5 PXB NIC9
    assert nearest[0] == ("mlx5_0", "PXB") and nearest[1] == ("mlx5_3", "PXB")
    assert nearest[5] == ("mlx5_9", "PXB") and nearest[7] == ("mlx5_11", "PXB")
    assert record.gpus[0].levels["mlx5_1"] == "NODE" and record.gpus[0].levels["mlx5_6"] == "SYS"
    assert record.gpus_far == () and record.on_vm is False


@pytest.mark.slow  # builds three hosts from copies of h100-sxm-8x-nvswitch (~1 s each)
def test_the_peermem_dgx_is_healthy_and_an_8_mib_memlock_is_critical(story):
    from doctor.model import Severity
    from doctor.scan import scan
    from probes.registry import PROBES
    from tests.builtin_rules import builtin_rules

    def warnings(name):
        report = scan(RecordedHost(story(name)), QUICK, PROBES, builtin_rules())
        assert report.rule_errors == []
        return [(f.rule, f.severity.label, f.evidence.get("memlock_kib")) for f in report.findings
                if f.severity >= Severity.WARNING]
    assert warnings("h100-sxm-8x-rdma-peermem") == []
    assert warnings("h100-sxm-8x-rdma-memlock-8m") == [("rdma-memlock-low", "critical", 8192)]
    # the same limit on an engine on this host alone: no RDMA registration, not judged
    assert warnings("h100-sxm-8x-rdma-memlock-8m-one-host") == []


@pytest.mark.slow  # builds the host from a copy of l40s-4x-2socket (~2 s)
def test_gpus_on_the_nics_socket_are_still_past_nccl_s_default_gdr_level(story):
    """warpem#106: GPUs 0/1 reach the NICs across the socket link; 2/3 at NODE, on their own
    socket but past NCCL's default (PXB). The base has no PCI tree: the converter gives each
    GPU a host bridge, and the dual-port NIC two functions of one card."""
    record = nic_affinity.probe(RecordedHost(story("l40s-4x-rdma-far")), QUICK)
    assert [(g.level, g.across_sockets, g.beyond_gdr_default) for g in record.gpus] == [
        ("SYS", True, True), ("SYS", True, True), ("NODE", False, True), ("NODE", False, True)]
    assert [n.bdf[-1] for n in record.nics] == ["0", "1"]


def test_one_nic_on_the_other_socket_is_far_from_half_the_gpus():
    record = nic_affinity.probe(_host("l40s-8x-rdma-far"), QUICK)
    assert record.gpus_far == (0, 1, 2, 3)
    assert [g.level for g in record.gpus] == ["SYS"] * 4 + ["PHB"] * 4
    assert record.nics[0].numa_node == 1 and record.nics[0].bdf is not None


def test_a_device_link_that_is_not_a_pci_function_is_absent_with_its_reason(tmp_path):
    root = _copy("l40s-8x-rdma-far", tmp_path)
    link = root / "fs/sys/class/infiniband/rxe0/device"
    link.parent.mkdir()
    link.symlink_to("../../../../virtual/net/rxe0")  # soft-RoCE: no PCI function of its own
    record = nic_affinity.probe(RecordedHost(root), QUICK)
    rxe = next(n for n in record.nics if n.name == "rxe0")
    assert rxe.bdf is None and "not a PCI function" in rxe.missing["bdf"]
    assert record.gpus_far == (0, 1, 2, 3)  # mlx5_0 still places the GPUs
    (root / "fs/sys/class/infiniband/mlx5_0/device").unlink()
    with pytest.raises(Skip, match="software devices only"):
        nic_affinity.probe(RecordedHost(root), QUICK)


def test_hostile_kernel_files_are_absent_with_a_reason_never_a_crash(tmp_path):
    root = _copy("l40s-8x-rdma-far", tmp_path)
    (root / "fs/sys/module/nvidia_peermem/version").unlink()
    _plant(root / "fs/proc/sys/kernel/osrelease", "\x00" * 64 + "A" * 5000)
    _plant(root / "fs/proc/driver/nvidia/version", b"\xff\xfe" * 1000)
    _plant(root / "fs/proc/modules", "x" * 100000 + "\n" + "nvidia_peermem\n" * 100)
    record = gpudirect.probe(RecordedHost(root), QUICK)
    assert record.gdr_off is False and record.path is None  # nothing proven either way
    assert record.kernel_dmabuf is None and "malformed" in record.missing["kernel_dmabuf"]


# --- the converter keeps to the real matrix -------------------------------------------------

def test_the_converter_refuses_a_tree_that_does_not_give_the_matrix_back():
    topo = (gdr.SOURCES / "topo_warpem106_l40s_4gpu.txt").read_text()
    buses = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"]
    tree, nics = gdr.convert(topo, {}, buses, [0, 0, 1, 1])
    assert tree.level(nics["mlx5_0"], nics["mlx5_1"]) == "PIX"
    wrong = topo.replace("GPU0     X      NODE", "GPU0     X      PIX ", 1)
    with pytest.raises(ValueError, match="GPU0-GPU1 is PIX in the matrix, NODE in the tree"):
        gdr.convert(wrong, {}, buses, [0, 0, 1, 1])


def test_run_together_cells_of_an_excerpt_are_split():
    names, cells = gdr.parse_topo((gdr.SOURCES / "topo_vllm13855_dgx_h100.txt").read_text())
    assert names[8:10] == ["mlx5_0", "mlx5_1"] and "mlx5_9" in names and len(names) == 20
    assert cells[("GPU5", "mlx5_9")] == "PXB" and cells[("GPU4", "mlx5_8")] == "NODE"


@pytest.mark.slow  # copies and builds a whole host twice (~0.5 s)
def test_a_rebuild_gives_the_same_bytes(tmp_path):
    """The build is deterministic (build_all_hosts keeps one digest for all hosts)."""
    from tests.fixtures.build_all_hosts import tree

    shutil.copytree(FIXTURE_HOSTS / "l40s-8x-acs-off", tmp_path / "l40s-8x-acs-off", symlinks=True)
    first = tree(gdr.build("l40s-8x-rdma-far", tmp_path))
    assert tree(gdr.build("l40s-8x-rdma-far", tmp_path)) == first
    assert first == tree(FIXTURE_HOSTS / "l40s-8x-rdma-far")


# --- the fix steps ----------------------------------------------------------------------------

def _fix(findings: list[dict], probes: list[dict]):
    from doctor.fix.plan import build_plan
    from tests.saved_scans import saved

    return build_plan(saved({"host": {"hostname": "h"}, "probes": probes, "findings": findings}),
                      "saved scan x", {})


MEMLOCK = {"rule": "rdma-memlock-low", "cause": "rdma-memlock-low", "key": "engine vllm",
           "severity": "critical", "title": "t",
           "evidence": {"process": "python3 pid 4242", "memlock_kib": 8192}}


def test_memlock_under_a_systemd_unit_is_a_drop_in_with_limitmemlock_infinity():
    unit = [{"name": "engine.container", "status": "ok",
             "data": {"engines": [{"pid": 4242, "cgroup": "/system.slice/vllm.service"}]}}]
    step, = _fix([MEMLOCK], unit).steps
    assert step.files[0].path == "/etc/systemd/system/vllm.service.d/llm-doctor.conf"
    assert step.files[0].content.endswith("[Service]\nLimitMEMLOCK=infinity\n")
    assert step.restart_to_take and [c.argv for c in step.commands] == [("systemctl", "daemon-reload")]
    docker = [{"name": "engine.container", "status": "ok", "data": {"engines": [
        {"pid": 4242, "cgroup": "/system.slice/docker-" + "a" * 64 + ".scope"}]}}]
    step, = _fix([MEMLOCK], docker).steps
    assert not step.files and "--ulimit memlock=-1:-1" in step.manual[0]


def test_a_far_nic_is_a_hands_on_checklist_never_on_a_vm():
    far = {"rule": "nic-far-from-gpu", "cause": "nic-far-from-gpu", "key": "GPU0",
           "severity": "warning", "title": "t", "evidence": {"gpu": 0}}
    metal = [{"name": "host.cpu", "status": "ok", "data": {"virtual_machine": False}}]
    step, = _fix([far], metal).steps
    assert step.kind.value == "manual" and "slot" in step.manual[0]
    vm = [{"name": "host.cpu", "status": "ok", "data": {"virtual_machine": True}}]
    plan = _fix([far], vm)
    assert not plan.steps and "virtual machine" in plan.no_steps[0].why



def test_gpu_inventory_s_record_is_read_when_the_runner_hands_it_over():
    """In a scan, gpu.inventory's record gives the GPUs (its count and bus ids); alone, the
    probes read NVML themselves, and agree."""
    from doctor.inputs import Inputs
    from probes.gpu import inventory

    host = _host("l40s-8x-rdma-far")
    handed = Inputs({"gpu.inventory": inventory.probe(host, QUICK)})
    assert nic_affinity.probe(host, QUICK, handed) == nic_affinity.probe(host, QUICK)
    assert gpudirect.probe(host, QUICK, handed) == gpudirect.probe(host, QUICK)
    # a handed record names the GPUs: one GPU less there is one GPU less here
    fewer = inventory.probe(host, QUICK)
    short = Inputs({"gpu.inventory": type(fewer)(**{**{f: getattr(fewer, f) for f in fewer.__slots__},
                                                    "gpu_count": 7, "gpus": fewer.gpus[:7]})})
    assert len(nic_affinity.probe(host, QUICK, short).gpus) == 7
    assert gpudirect.probe(host, QUICK, short).gpu_count == 7


def test_hostile_sysfs_names_and_numa_nodes_are_refused_with_a_reason(tmp_path):
    root = _copy("l40s-8x-rdma-far", tmp_path)
    for bad in ("a b", "x" * 200, "mlx5_0;rm", ".hidden"):  # not names ib_core gives
        (root / "fs/sys/class/infiniband" / bad).mkdir()
    link = root / "fs/sys/class/infiniband/mlx5_9/device"
    link.parent.mkdir()
    link.symlink_to("../../../../../../../etc")  # leads nowhere a PCI function is
    bdf = (root / "fs/sys/class/infiniband/mlx5_0/device").readlink().name
    numa, = (root / "fs/sys/devices").rglob(f"{bdf}/numa_node")
    _plant(numa, "1" * 5000)
    record = nic_affinity.probe(RecordedHost(root), QUICK)
    assert [n.name for n in record.nics] == ["mlx5_0", "mlx5_9"]
    mlx5_0 = record.nics[0]
    assert mlx5_0.numa_node is None and mlx5_0.missing["numa_node"].startswith("malformed")
    assert record.nics[1].bdf is None
    # the NIC's node unknown: the GPUs on other host bridges are not judged, not called far
    assert record.gpus_far == () and all(g.level in ("PHB", None) for g in record.gpus)


def test_nccls_gdr_disabled_and_the_missing_module_are_one_story():
    """NVIDIA/nccl#899's real log ("GPU Direct RDMA Disabled … (no module)") beside this host's
    GPUDirect paths: where net.gpudirect finds neither, gpudirect-rdma-off alone tells it (its
    cause and fix); where the host offers dma-buf, the log's finding is the news."""
    import dataclasses
    from pathlib import Path

    from doctor.model import ProbeResult
    from doctor.rules.evaluate import evaluate
    from doctor.seam.live import LiveHost
    from probes.net import nccl_log
    from tests.builtin_rules import builtin_rules

    log = Path(__file__).parent / "fixtures" / "nccl_logs" / "nccl-899-gdr-no-module.log"
    said = nccl_log.probe(LiveHost(), ScanOptions(nccl_log=str(log)))
    said = dataclasses.replace(said, logs=tuple(dataclasses.replace(x, rdma_devices_here=12) for x in said.logs))
    rules = [r for r in builtin_rules() if set(r.probes) <= {"net.gpudirect", "net.nccl_log"}]

    def fired(host: str) -> set[str]:
        results = [ProbeResult("net.nccl_log", "ok", 0.0, None, said),
                   ProbeResult("net.gpudirect", "ok", 0.0, None, gpudirect.probe(_host(host), QUICK))]
        found, errors = evaluate(rules, results)
        assert errors == []
        return {f.rule for f in found}
    assert fired("h100-sxm-8x-rdma-ubuntu68") == {"gpudirect-rdma-off"}
    assert fired("h100-sxm-8x-rdma-dmabuf") == {"nccl-log-gdr-disabled"}
