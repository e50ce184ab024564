"""net.gpudirect: which GPUDirect RDMA path NCCL can use on this host, if any.

GPUDirect RDMA lets the RDMA NIC read and write GPU memory directly; without it NCCL stages
every inter-node transfer through host memory (its log says ``NET/IB`` without ``/GDRDMA``),
and a 2-node all-reduce falls to a fraction of the line rate. There are two paths:

* **peer memory**: the ``nvidia_peermem`` module (shipped with the driver since R470 / CUDA
  11.4; NVIDIA GPUDirect RDMA guide, "Using nvidia-peermem") or the older Mellanox
  ``nv_peer_mem`` (github.com/Mellanox/nv_peer_memory), registered with ib_core's peer-memory
  API. NCCL looks for exactly these files (NVIDIA/nccl src/transport/net_ib.cc,
  ``ibGdrSupportInitOnce``): ``/sys/kernel/mm/memory_peers/nv_mem/version``,
  ``/sys/kernel/mm/memory_peers/nv_mem_nc/version``, ``/sys/module/nvidia_peermem/version``;
* **dma-buf**: the kernel's own buffer sharing (``ibv_reg_dmabuf_mr``), which needs Linux 5.12
  or later and NVIDIA's open kernel module (R515+); NCCL uses it by default where it works
  (``NCCL_DMABUF_ENABLE``, default 1, NCCL user guide "Environment Variables"). Ubuntu's 6.8
  kernels dropped the peer-memory API, so there dma-buf is the only path (Ubuntu Discourse,
  "NVIDIA GPUDirect over Infiniband Migration Paths", 2024): the OS upgrade that silently
  turns GPUDirect RDMA off.

Reads (world-readable, no root): ``/sys/class/infiniband`` (are there RDMA devices),
gpu.inventory's GPU count (handed by the runner; else NVML ``nvmlDeviceGetCount``), ``/proc/modules``, the three files
above, ``/proc/sys/kernel/osrelease``, ``/proc/driver/nvidia/version``. Manual equivalent:
``lsmod | grep -e nvidia_peermem -e nv_peer_mem``, ``uname -r``,
``cat /proc/driver/nvidia/version``; NCCL_DEBUG=INFO prints ``GPU Direct RDMA Enabled``.
Whether the NIC's driver accepts a dma-buf is only known by trying a registration
(NCCL does); this probe says what the kernel and GPU driver allow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_buses import count_of
from probes.helpers.gpu_common import reason_of
from probes.helpers.rdma_pci import rdma_devices

MODULES = "/proc/modules"
OSRELEASE = "/proc/sys/kernel/osrelease"
DRIVER_VERSION = "/proc/driver/nvidia/version"
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")  # as /proc/modules names them
# the files NCCL's ibGdrSupportInitOnce tests for (net_ib.cc), in its order
NCCL_PEERMEM_FILES = ("/sys/kernel/mm/memory_peers/nv_mem/version",
                      "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
                      "/sys/module/nvidia_peermem/version")
DMABUF_KERNEL = (5, 12)  # ib_umem_dmabuf: RDMA dma-buf import, merged in Linux 5.12
MAX_MODULE_LINES = 20_000  # /proc/modules has a few hundred lines
_RELEASE = re.compile(r"^(\d{1,3})\.(\d{1,3})")
_DRIVER = re.compile(r"\s(\d{3,4}\.\d{1,3}(?:\.\d{1,3})?)\s")


@dataclass(frozen=True, slots=True)
class GpuDirectRecord:
    rdma_devices: tuple[str, ...]  # /sys/class/infiniband/*: mlx5_0, ...
    gpu_count: int | None  # nvmlDeviceGetCount; None: no NVIDIA GPU (reason in missing)
    peermem_modules: tuple[str, ...]  # of PEERMEM_MODULES, those /proc/modules lists Live
    peermem_files: tuple[str, ...]  # of NCCL_PEERMEM_FILES, those present
    kernel_release: str | None  # /proc/sys/kernel/osrelease: "6.8.0-45-generic"
    kernel_dmabuf: bool | None  # kernel_release is 5.12 or later
    driver_version: str | None  # /proc/driver/nvidia/version: "535.129.03"
    open_kernel_module: bool | None  # that file says "Open Kernel Module"
    peermem: bool  # NCCL finds a peer-memory client (any of peermem_files)
    # registered with ib_core's peer-memory API (memory_peers/nv_mem*): the only files NCCL
    # 2.22 and older look for, so with only /sys/module/nvidia_peermem they see no GPUDirect
    # RDMA (NVIDIA/nccl#1676: a DGX OS upgrade, 180 -> 10 GB/s)
    peermem_registered: bool
    dmabuf: bool | None  # kernel and GPU driver allow dma-buf registration
    path: str | None  # what NCCL can use: "dma-buf", "peer-memory"; None: neither or n/a
    gdr_off: bool  # RDMA devices and NVIDIA GPUs here, and neither path is available
    missing: dict[str, str]


def parse_modules(text: str) -> dict[str, str]:
    """``/proc/modules`` -> {module name: state} ("Live", "Loading", "Unloading"). Lines
    that are not ``name size refcount deps state address`` are passed over: the file is the
    kernel's, and a module with a strange line is not one we look for."""
    out: dict[str, str] = {}
    for line in text.splitlines()[:MAX_MODULE_LINES]:
        words = line.split()
        if len(words) >= 5 and words[1].isdigit():
            out[words[0]] = words[4]
    return out


def kernel_version(release: str) -> tuple[int, int] | None:
    m = _RELEASE.match(release.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_driver(text: str) -> tuple[str | None, bool | None]:
    """``/proc/driver/nvidia/version``'s first line -> (driver version, open kernel module).
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.129.03  Release Build …"
    is the open module; "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05 …" the
    proprietary one. Neither shape: (None, None)."""
    first = text.splitlines()[0] if text.strip() else ""
    if not first.startswith("NVRM version:"):
        return None, None
    m = _DRIVER.search(first + " ")
    return (m.group(1) if m else None), "Open Kernel Module" in first


def _text(host: Host, path: str, field: str, missing: dict[str, str]) -> str | None:
    try:
        return host.read_text(path)
    except HostReadError as exc:
        missing[field] = reason_of(exc)
        return None


def _present(host: Host, path: str) -> bool:
    try:
        host.read_text(path)
        return True
    except HostReadError:
        return False


def _gpus(host: Host, inputs: Inputs, missing: dict[str, str]) -> int | None:
    """gpu.inventory's count of NVIDIA GPUs (or NVML's, read here); None and why when none."""
    try:
        return count_of(host, inputs)
    except Skip as exc:
        missing["gpu_count"] = str(exc)
    except HostReadError as exc:
        missing["gpu_count"] = reason_of(exc)
    return None


def judge(devices: tuple[str, ...], gpus: int | None, modules: dict[str, str] | None,
          files: tuple[str, ...], release: str | None, driver: tuple[str | None, bool | None],
          missing: dict[str, str]) -> GpuDirectRecord:
    """The record from what was read: the decision, apart from the reads."""
    loaded = tuple(m for m in PEERMEM_MODULES if modules and modules.get(m) == "Live")
    version = kernel_version(release) if release else None
    kernel_ok = None if version is None else version >= DMABUF_KERNEL
    if release and version is None:
        missing["kernel_dmabuf"] = f"malformed: {release.strip()[:40]!r} is not a kernel release"
    driver_version, open_module = driver
    # NCCL asks for the files, not the module list: a module loaded without registering
    # with ib_core (an inbox kernel without the peer-memory API) gives NCCL nothing
    peermem = bool(files)
    dmabuf: bool | None = None
    if kernel_ok is False or open_module is False:
        dmabuf = False
    elif kernel_ok and open_module:
        dmabuf = True
    if gpus is None:
        path = None
        missing.setdefault("path", missing.get("gpu_count", "no NVIDIA GPU"))
    else:
        path = "dma-buf" if dmabuf else ("peer-memory" if peermem else None)
    return GpuDirectRecord(
        rdma_devices=devices, gpu_count=gpus, peermem_modules=loaded, peermem_files=files,
        kernel_release=release.strip() if release else None, kernel_dmabuf=kernel_ok,
        driver_version=driver_version, open_kernel_module=open_module,
        peermem=peermem, dmabuf=dmabuf, path=path,
        peermem_registered=any(f in files for f in NCCL_PEERMEM_FILES[:2]),
        # off only when both are known to be unavailable: an unread driver file is no proof
        gdr_off=gpus is not None and not peermem and dmabuf is False,
        missing=missing)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> GpuDirectRecord:
    found = rdma_devices(host)
    if not found.names:
        raise Skip(t("no RDMA device ({reason}): GPUDirect RDMA does not apply",
                     reason=found.reason or ""))
    missing: dict[str, str] = {}
    gpus = _gpus(host, inputs, missing)
    text = _text(host, MODULES, "peermem_modules", missing)
    modules = parse_modules(text) if text is not None else None
    files = tuple(f for f in NCCL_PEERMEM_FILES if _present(host, f))
    release = _text(host, OSRELEASE, "kernel_release", missing)
    driver: tuple[str | None, bool | None] = (None, None)
    if gpus is not None:
        version_text = _text(host, DRIVER_VERSION, "open_kernel_module", missing)
        driver = parse_driver(version_text) if version_text is not None else (None, None)
        if version_text is not None and driver[1] is None:
            missing["open_kernel_module"] = f"malformed: {DRIVER_VERSION} has no 'NVRM version:' line"
    return judge(found.names, gpus, modules, files, release, driver, missing)


def summary(record: GpuDirectRecord) -> str:
    shown = record.rdma_devices[:4]
    more = len(record.rdma_devices) - len(shown)
    devices = ", ".join(shown) + (f" (+{more})" if more else "")
    if record.gpu_count is None:
        return t("{devices}: no NVIDIA GPU, GPUDirect RDMA does not apply", devices=devices)
    if record.path is not None:
        return t("{devices}: NCCL can use GPUDirect RDMA by {path}", devices=devices, path=record.path)
    if record.gdr_off:
        return t("{devices}: GPUDirect RDMA off: no peer-memory module, no dma-buf path", devices=devices)
    return t("{devices}: GPUDirect RDMA not known: {why}", devices=devices,
             why="; ".join(f"{k}: {v}" for k, v in sorted(record.missing.items())) or "—")
