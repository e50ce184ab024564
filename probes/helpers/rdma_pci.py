"""The RDMA devices of this host and where each sits on the PCI bus.

Source: ``/sys/class/infiniband/<dev>`` (one entry per RDMA device the kernel's ib_core
holds: InfiniBand HCAs and RoCE NICs alike, mlx5_0 ...), its ``device`` link
(``../../../0000:17:00.0``: the PCI function), and ``/sys/bus/pci/devices`` (each function's
link to its own ``/sys/devices/pci…`` directory, whose path is its place in the PCIe tree).
Its ``numa_node`` file gives the function's node (-1: the firmware gave none). World-readable,
no root. Manual equivalent: ``ls -l /sys/class/infiniband/*/device``, ``ibv_devices``,
``lspci -tv``.

Only the names and the PCI placement: the ports, rates and counters are net.rdma's.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_common import pci_bdf, reason_of
from probes.helpers.numa_nodes import pci_dirs  # one listing of the PCI functions a scan

INFINIBAND = "/sys/class/infiniband"
PCI_DEVICES = "/sys/bus/pci/devices"
MAX_RDMA_DEVICES = 256  # a bound on one scan's reads; a big host has a few dozen
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")  # ib_core names: mlx5_0, rxe0, bnxt_re0, irdma0


@dataclass(frozen=True, slots=True)
class RdmaDevices:
    names: tuple[str, ...]  # /sys/class/infiniband/* in name order
    reason: str | None  # why there are none (not-found: no RDMA driver loaded), None when listed


@dataclass(frozen=True, slots=True)
class PciPlace:
    bdf: str | None  # "0000:17:00.0", as sysfs names it
    sysfs_dir: str | None  # "/sys/devices/pci0000:16/0000:16:02.0/0000:17:00.0"
    numa_node: int | None  # …/numa_node; None when -1 or unread (reason in missing)
    missing: dict[str, str]


def rdma_devices(host: Host) -> RdmaDevices:
    """The RDMA devices ib_core holds; none, with the reason, when the class is absent."""
    try:
        names = host.list_dirs(INFINIBAND)
    except HostReadError as exc:
        return RdmaDevices((), f"{INFINIBAND}: {reason_of(exc)}")
    kept = tuple(sorted((n for n in names if _NAME.match(n)), key=_natural)[:MAX_RDMA_DEVICES])
    return RdmaDevices(kept, None if kept else f"{INFINIBAND}: empty")


def _natural(name: str) -> tuple:
    """mlx5_2 before mlx5_10, as ibv_devices lists them."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def place_of(host: Host, bdf: str | None) -> PciPlace:
    """Where the PCI function ``bdf`` sits: its sysfs directory and NUMA node."""
    missing: dict[str, str] = {}
    if bdf is None:
        missing["sysfs_dir"] = missing["numa_node"] = "no PCI address"
        return PciPlace(None, None, None, missing)
    where = pci_dirs(host).get(bdf)
    if where is None:
        try:  # a host whose /sys/bus/pci/devices is not listable still has the link itself
            target = host.read_link(f"{PCI_DEVICES}/{bdf}")
            where = posixpath.normpath(posixpath.join(PCI_DEVICES, target))
        except HostReadError as exc:
            missing["sysfs_dir"] = missing["numa_node"] = reason_of(exc)
            return PciPlace(bdf, None, None, missing)
    node: int | None = None
    try:
        text = host.read_text(f"{where}/numa_node").strip()
        if re.fullmatch(r"-?\d{1,5}", text):
            node = int(text) if int(text) >= 0 else None
            if node is None:
                missing["numa_node"] = "not-supported"
        else:
            missing["numa_node"] = f"malformed: {text[:40]!r} is not a NUMA node number"
    except HostReadError as exc:
        missing["numa_node"] = reason_of(exc)
    return PciPlace(bdf, where if where.startswith("/sys/devices/") else None, node, missing)


def device_bdf(host: Host, name: str) -> tuple[str | None, str | None]:
    """The PCI address of RDMA device ``name`` (its ``device`` link), or None and why not
    (a software device such as rxe0 has no PCI function of its own)."""
    try:
        target = host.read_link(f"{INFINIBAND}/{name}/device")
    except HostReadError as exc:
        return None, reason_of(exc)
    bdf = pci_bdf(posixpath.basename(target.rstrip("/")))
    return (bdf, None) if bdf else (None, f"not a PCI function: {target[:80]!r}")
