"""amd.host: the host settings ROCm inference depends on, read without the ROCm library:
the AMD GPUs on the PCI bus and their gfx targets, NUMA auto-balancing, the IOMMU mode, and
each engine's ROCm environment and whether it holds /dev/kfd open (uses the GPU at all).

Source: ``/sys/bus/pci/devices/*/{vendor,class}`` (0x1002, display or processing
accelerator), ``/sys/class/kfd/kfd/topology/nodes/*/properties`` (``gfx_target_version``
90402 → gfx942: what the ROCm runtime, and Ollama's own discovery, read),
``/proc/sys/kernel/numa_balancing`` (AMD's MI300X tuning guides: 0), the IOMMU mode
(probes/helpers/iommu.py: ``iommu=pt`` is what RCCL asks for, a translated IOMMU makes its
peer-to-peer copies hang), and each engine's ``/proc/<pid>/environ`` (``HSA_OVERRIDE_GFX_VERSION``,
``HSA_FORCE_FINE_GRAIN_PCIE``) and ``/proc/<pid>/fd`` (a link to /dev/kfd); ``stat /dev/kfd``. Reading another
user's environ and fd needs root; without it the value is None with the reason. Manual
equivalent: ``lspci -d 1002:``, ``cat /proc/sys/kernel/numa_balancing``, ``cat /proc/cmdline``,
``rocminfo | grep gfx``, ``ls -l /proc/<pid>/fd | grep kfd``, ``sudo dmesg | grep amdgpu``.
The kernel log (``dmesg``, else /var/log/kern.log: probes/helpers/kernel_log.py) gives
amdgpu's RAS, reset and ring-timeout lines (the pattern table of probes/helpers/xid.py).
The ROCm release: ``/opt/rocm/.info/version`` (rocm-core installs it; ``cat`` of it is the
OS-agnostic way, ROCm/legacy-rocm-build#419; a build suffix after the version is kept), else
``/opt/rocm/core/.info/version`` (TheRock's native packages put it there, ROCm/TheRock#5475).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions
from doctor.seam.host import Host, HostReadError
from probes.helpers.amd_common import amd_pci_gpus
from probes.helpers.amd_devices import in_gpu_groups, render_nodes, xgmi_peer_links
from probes.helpers.engine_layout import layout
from probes.helpers.engine_reads import argv_of
from probes.helpers.gpu_common import reason_of
from probes.helpers.iommu import read_iommu
from probes.helpers.kernel_log import read_log
from probes.helpers.xid import AmdgpuEvent, parse_amdgpu_log
from probes.helpers.process_env import env_value
from probes.helpers.processes import Process, engine_processes, lasting_name

KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"
MAX_NODES = 256
KFD = "/dev/kfd"
MAX_EVENTS = 256  # (GPU, kind) groups kept
ROCM_VERSION_FILES = ("/opt/rocm/.info/version", "/opt/rocm/core/.info/version")
_ROCM_VERSION = re.compile(r"\d+(\.\d+){1,3}[0-9A-Za-z.+~-]{0,40}")


@dataclass(frozen=True, slots=True)
class RocmEngine:
    pid: int
    engine: str
    name: str  # what outlives the pid: "ollama on 127.0.0.1:11434" (processes.lasting_name)
    gfx_override: str | None  # HSA_OVERRIDE_GFX_VERSION, e.g. "10.3.0"
    fine_grain_pcie: str | None  # HSA_FORCE_FINE_GRAIN_PCIE
    holds_kfd: bool | None  # an fd of the engine points at /dev/kfd (None: fd/ not readable)
    missing: dict[str, str] = field(default_factory=dict)
    # its layout from its command line (probes/helpers/engine_layout.py): -tp, -pp
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    # the GPUs it may see: the fewest that ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES or
    # CUDA_VISIBLE_DEVICES list (HIP honours all three); None: none set, it sees them all
    visible_gpus: int | None = None
    visible_from: str | None = None  # the variable that gave visible_gpus
    # an fd of the engine points at a /dev/dri/renderD* node (None: fd/ not readable)
    holds_render: bool | None = None
    uid: int | None = None  # effective uid (/proc/<pid>/status)
    # root, or in the render or video group (probes/helpers/amd_devices.py); None: not known
    in_gpu_groups: bool | None = None


@dataclass(frozen=True, slots=True)
class KernelLines:
    """amdgpu's lines of one kind for one GPU: what the rules judge (a log repeating a reset
    a thousand times is one finding)."""

    bus: str
    kind: str  # probes/helpers/xid.py AMDGPU_PATTERNS: ras-uncorrectable, gpu-reset…
    count: int
    hardware: bool
    meaning: str
    action: str
    last_line: str


@dataclass(frozen=True, slots=True)
class RocmHostRecord:
    vendor: str
    amd_gpus: int  # AMD display or accelerator functions on the PCI bus
    gfx_targets: tuple[str, ...]  # from the KFD topology, one per GPU node: ("gfx942", …)
    numa_balancing: int | None  # /proc/sys/kernel/numa_balancing: 0 off, 1 on, 2 tiering
    iommu_mode: str  # "off" | "passthrough" | "translated" | "unknown"
    iommu_cmdline: str | None  # the IOMMU options of /proc/cmdline
    iommu_groups: int | None
    engines: tuple[RocmEngine, ...]
    kernel_lines: tuple[KernelLines, ...]  # amdgpu RAS, reset and ring-timeout lines, by GPU and kind
    kernel_log_source: str  # "dmesg", "/var/log/kern.log", or why neither could be read
    missing: dict[str, str]
    # /dev/kfd is there (stat): the ROCm runtime's device; a container started without
    # --device /dev/kfd sees the GPUs on the PCI bus and no kfd. None: not known (see missing)
    kfd_present: bool | None = None
    # /dev/dri/renderD* that stat (one per GPU): 0 in a container given /dev/kfd only
    render_nodes: int | None = None
    # KFD topology links of type xGMI between GPU nodes (each direction): 0 on GPUs that talk
    # over PCIe only; None where the links could not be listed
    xgmi_peer_links: int | None = None
    # the installed ROCm release (ROCM_VERSION_FILES): "7.14.0"; None: not installed or unreadable
    rocm_version: str | None = None


def gfx_name(version: int) -> str | None:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) as a gfx name:
    90402 → gfx942, 110000 → gfx1100, 90010 → gfx90a (stepping in hex, as LLVM names it)."""
    if version <= 0:
        return None  # a CPU node
    major, minor, step = version // 10000, version // 100 % 100, version % 100
    return f"gfx{major}{minor}{step:x}"


def _gfx_targets(host: Host, missing: dict[str, str]) -> list[tuple[str, str]]:
    """(KFD node, gfx target) of each GPU node."""
    try:
        nodes = host.list_dirs(KFD_NODES)
    except HostReadError as exc:
        missing["gfx_targets"] = reason_of(exc)
        return []
    out = []
    for node in sorted(nodes, key=lambda n: (len(n), n))[:MAX_NODES]:
        try:
            text = host.read_text(f"{KFD_NODES}/{node}/properties")
        except HostReadError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "gfx_target_version" and value.strip().isdigit():
                name = gfx_name(int(value.strip()))
                if name:
                    out.append((node, name))
    return out


def _numa_balancing(host: Host, missing: dict[str, str]) -> int | None:
    try:
        text = host.read_text("/proc/sys/kernel/numa_balancing").strip()
    except HostReadError as exc:
        missing["numa_balancing"] = reason_of(exc)
        return None
    if not text.isdigit():
        missing["numa_balancing"] = f"not a number: {text[:20]!r}"
        return None
    return int(text)


VISIBLE = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def _visible(host: Host, pid: int, missing: dict[str, str]) -> tuple[int | None, str | None]:
    """The fewest GPUs a visibility variable lists (``0,1,2`` → 3; ``""`` → 0), and its name."""
    best: tuple[int | None, str | None] = (None, None)
    for name in VISIBLE:
        got = env_value(host, pid, name)
        if got.reason:
            missing["visible_gpus"] = got.reason
        if got.value is None:
            continue
        count = len([part for part in got.value.split(",") if part.strip()])
        if best[0] is None or count < best[0]:
            best = (count, name)
    return best


def _engine(host: Host, process: Process) -> RocmEngine:
    pid, engine = process.pid, process.engine or ""
    missing: dict[str, str] = {}
    override = env_value(host, pid, "HSA_OVERRIDE_GFX_VERSION")
    fine = env_value(host, pid, "HSA_FORCE_FINE_GRAIN_PCIE")
    if override.reason:
        missing["gfx_override"] = override.reason
    if fine.reason:
        missing["fine_grain_pcie"] = fine.reason
    render: bool | None
    try:
        links = host.list_links(f"/proc/{pid}/fd")
        holds: bool | None = any(target == KFD for target in links.values())
        render = any(target.startswith("/dev/dri/renderD") for target in links.values())
    except HostReadError as exc:
        holds = render = None
        missing["holds_kfd"] = missing["holds_render"] = reason_of(exc)
    groups, uid = in_gpu_groups(host, pid)
    shape = layout(argv_of(host, pid), None)
    visible, visible_from = _visible(host, pid, missing)
    return RocmEngine(pid=pid, engine=engine, name=lasting_name(process), gfx_override=override.value,
                      fine_grain_pcie=fine.value, holds_kfd=holds, missing=missing,
                      tensor_parallel=shape["tp"], pipeline_parallel=shape["pp"],
                      visible_gpus=visible, visible_from=visible_from, holds_render=render,
                      uid=uid, in_gpu_groups=groups)


def _by_kind(events: list[AmdgpuEvent]) -> tuple[KernelLines, ...]:
    groups: dict[tuple[str, str], list[AmdgpuEvent]] = {}
    for event in events:
        groups.setdefault((event.bus, event.kind), []).append(event)
    return tuple(KernelLines(bus=bus, kind=kind, count=len(found), hardware=found[-1].hardware,
                             meaning=found[-1].meaning, action=found[-1].action,
                             last_line=found[-1].line)
                 for (bus, kind), found in sorted(groups.items())[:MAX_EVENTS])


def _kfd_present(host: Host, missing: dict[str, str]) -> bool | None:
    try:
        host.stat(KFD)
    except HostReadError as exc:
        if reason_of(exc) == "not-found":
            return False
        missing["kfd_present"] = reason_of(exc)
        return None
    return True


def _rocm_version(host: Host, missing: dict[str, str]) -> str | None:
    """The first line of rocm-core's version file, if it is a version (the file is hostile)."""
    for path in ROCM_VERSION_FILES:
        try:
            text = host.read_text(path)
        except HostReadError as exc:
            missing["rocm_version"] = reason_of(exc)
            continue
        line = text[:256].strip().split("\n", 1)[0].strip()
        if _ROCM_VERSION.fullmatch(line):
            missing.pop("rocm_version", None)
            return line
        missing["rocm_version"] = f"{path}: not a version: {line[:40]!r}"
        return None
    return None


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> RocmHostRecord:
    missing: dict[str, str] = {}
    count = amd_pci_gpus(host)
    iommu = read_iommu(host)
    missing.update({f"iommu_{k}": v for k, v in iommu.missing.items()})
    engines = tuple(_engine(host, p) for p in engine_processes(host) if p.engine)
    events, source = read_log(host, parse_amdgpu_log, t("run as root to see amdgpu's RAS and reset lines"))
    gpu_nodes = _gfx_targets(host, missing)
    return RocmHostRecord(
        vendor="amd", amd_gpus=count, gfx_targets=tuple(gfx for _, gfx in gpu_nodes),
        render_nodes=render_nodes(host, missing),
        xgmi_peer_links=xgmi_peer_links(host, [node for node, _ in gpu_nodes], missing) if gpu_nodes else None,
        numa_balancing=_numa_balancing(host, missing), iommu_mode=iommu.mode,
        iommu_cmdline=iommu.cmdline, iommu_groups=iommu.groups, engines=engines,
        kernel_lines=_by_kind(events), kernel_log_source=source, missing=missing,
        kfd_present=_kfd_present(host, missing), rocm_version=_rocm_version(host, missing))


def summary(record: RocmHostRecord) -> str:
    targets = ", ".join(f"{record.gfx_targets.count(g)}× {g}" for g in sorted(set(record.gfx_targets)))
    return t("{count} AMD GPUs ({targets}); NUMA balancing {numa}; IOMMU {iommu}",
             count=record.amd_gpus, targets=targets or "?",
             numa=record.numa_balancing if record.numa_balancing is not None else "?",
             iommu=record.iommu_mode)
