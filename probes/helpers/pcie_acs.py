"""PCIe Access Control Services (ACS) on the bridges above a GPU, from sysfs config space.

Source: ``/sys/bus/pci/devices/<bdf>`` links to the function's directory under
``/sys/devices/pci<domain>:<bus>/…``; every bus id on that path above the GPU is a bridge
(root port, switch upstream and downstream ports). Each bridge's ``config`` is its binary
configuration space: root reads all 4096 bytes, other users only the first 64 (256 on some
kernels), which hold no extended capability, so the ACS state is then *not readable without
root*, never guessed. Manual equivalent: ``sudo lspci -vvv -s <bdf> | grep ACSCtl``.

The layout is the PCIe Base Specification's: extended capabilities are a list from offset
0x100, each header a 32-bit word (capability id bits 0-15, version 16-19, next offset 20-31);
ACS is id 0x000D, its control register the 16-bit word at cap + 6 with bits SrcValid (0),
TransBlk (1), ReqRedir (2: P2P Request Redirect), CmpltRedir (3: P2P Completion Redirect),
UpstreamFwd (4), EgressCtrl (5), DirectTrans (6). ReqRedir or CmpltRedir on a bridge between
two GPUs sends their peer traffic up to the root complex (and through the IOMMU) instead of
across the switch: P2P then fails or crawls.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_common import reason_of

CONFIG_BYTES = 4096  # PCIe extended configuration space
EXTENDED_START = 0x100
ACS_ID = 0x000D
MAX_CAPS = 64  # a bound on a hostile or looping capability list (the space holds at most 960)
# ACS control bits, as lspci -vvv names them in its ACSCtl line
ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl",
            "DirectTrans")
REDIRECT_BITS = ("ReqRedir", "CmpltRedir")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True, slots=True)
class BridgeAcs:
    bdf: str  # the bridge's sysfs bus id, "0000:02:08.0"
    acs_control: int | None  # the ACS Control register (cap + 6); None: see reason
    enabled: tuple[str, ...]  # the bits set, lspci's names: ("SrcValid", "ReqRedir", ...)
    reason: str | None  # why acs_control is None: "no ACS capability", "ACS not readable without root", ...

    @property
    def redirects(self) -> bool:
        return any(bit in self.enabled for bit in REDIRECT_BITS)


def acs_control(config: bytes) -> tuple[int | None, str | None]:
    """The ACS Control word from a function's config space, or None and why."""
    if len(config) < EXTENDED_START + 4:
        return None, (f"ACS not readable without root (config space gives {len(config)} bytes, "
                      "the extended capabilities start at 0x100)")
    offset, seen = EXTENDED_START, set()
    for _ in range(MAX_CAPS):
        if offset < EXTENDED_START or offset + 4 > len(config) or offset in seen:
            break
        seen.add(offset)
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):  # no extended capabilities; or the device is gone
            break
        if header & 0xFFFF == ACS_ID:
            if offset + 8 > len(config):
                return None, "ACS capability cut short"
            return int.from_bytes(config[offset + 6:offset + 8], "little"), None
        offset = (header >> 20) & 0xFFC  # the low two bits are reserved
        if offset == 0:
            break
    return None, "no ACS capability"


def enabled_bits(control: int) -> tuple[str, ...]:
    return tuple(name for bit, name in enumerate(ACS_BITS) if control >> bit & 1)


def device_dir(host: Host, bdf: str) -> str:
    """The function's directory under /sys/devices (raises HostReadError)."""
    link = f"/sys/bus/pci/devices/{bdf}"
    target = host.read_link(link)
    return posixpath.normpath(posixpath.join(posixpath.dirname(link), target))


def bridges_above(device: str) -> tuple[tuple[str, str], ...]:
    """(bus id, sysfs directory) of each bridge above the function at ``device`` (its
    /sys/devices directory), root port first."""
    parts = device.split("/")
    out = [(p, "/".join(parts[:i + 1])) for i, p in enumerate(parts) if _BDF.match(p)]
    return tuple(out[:-1])  # the last is the function itself


def read_bridge(host: Host, bdf: str, directory: str) -> BridgeAcs:
    """The bridge's ACS state from ``<directory>/config`` (the resolved sysfs path, not
    /sys/bus/pci/devices/<bdf>: the one tree a recording of the GPU's link points into)."""
    path = f"{directory}/config"
    try:
        config = host.read_bytes(path, 0, CONFIG_BYTES)
    except HostReadError as exc:
        return BridgeAcs(bdf, None, (), f"{path}: {reason_of(exc)}")
    control, reason = acs_control(config)
    return BridgeAcs(bdf, control, enabled_bits(control) if control is not None else (), reason)


def between(path_a: tuple[str, ...], path_b: tuple[str, ...]) -> tuple[str, ...]:
    """The bridges a peer request from one GPU to the other passes through below their
    common ancestor: those on one path and not the other (both sides' downstream ports)."""
    return tuple(b for b in path_a if b not in path_b) + tuple(b for b in path_b if b not in path_a)
