"""The IOMMU's mode: whether DMA from the GPUs is translated, as the kernel set it up.

Sources: ``/sys/class/iommu/`` (one entry per IOMMU unit: ``dmar*`` on Intel VT-d,
``ivhd*`` on AMD-Vi; none when it is off or absent), ``/proc/cmdline`` (``iommu=pt``,
``intel_iommu=on|off``, ``amd_iommu=off``, ``iommu.passthrough=1``), ``/sys/kernel/iommu_groups/``
(one directory per group) and a GPU's own group: the link ``<device>/iommu_group`` and its
``type`` ("identity" = passthrough, "DMA" / "DMA-FQ" = translated). No root needed. Manual
equivalent: ``ls /sys/class/iommu``, ``cat /proc/cmdline``,
``cat /sys/bus/pci/devices/<bdf>/iommu_group/type``.

Translated DMA beside ACS redirection is the classic P2P blocker: a peer write redirected to
the root complex is translated by the IOMMU, which has no mapping for the other GPU's BAR.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_common import reason_of

CMDLINE_KEYS = ("iommu", "intel_iommu", "amd_iommu", "iommu.passthrough", "iommu.strict")
TRANSLATED_TYPES = ("DMA", "DMA-FQ")
MAX_GROUP_TYPE_BYTES = 64


@dataclass(frozen=True, slots=True)
class IommuState:
    units: tuple[str, ...]  # /sys/class/iommu entries: ("dmar0", "dmar1")
    cmdline: str | None  # the IOMMU options of /proc/cmdline: "intel_iommu=on iommu=pt"
    groups: int | None  # directories in /sys/kernel/iommu_groups
    mode: str  # "off" | "passthrough" | "translated" | "unknown"
    mode_source: str  # how the mode was decided, for people
    missing: dict[str, str] = field(default_factory=dict)


def _cmdline_options(text: str) -> dict[str, str]:
    out = {}
    for word in text.split():
        name, _, value = word.partition("=")
        if name in CMDLINE_KEYS:
            out[name] = value
    return out


def group_type(host: Host, device: str) -> tuple[str | None, str | None]:
    """The IOMMU group type of the function at ``device`` (its /sys/devices directory):
    "identity", "DMA", "DMA-FQ", ...; or None and why."""
    link = f"{device}/iommu_group"
    try:
        target = host.read_link(link)
    except HostReadError as exc:
        return None, "no IOMMU group" if reason_of(exc) == "not-found" else f"{link}: {reason_of(exc)}"
    group = posixpath.basename(target.rstrip("/"))
    if not group.isdigit():
        return None, f"{link} points to {target!r}, not an IOMMU group"
    path = f"/sys/kernel/iommu_groups/{group}/type"
    try:
        text = host.read_text(path)[:MAX_GROUP_TYPE_BYTES].strip()
    except HostReadError as exc:
        return None, f"{path}: {reason_of(exc)}"
    return (text or None), (None if text else f"{path} is empty")


def read_iommu(host: Host) -> IommuState:
    missing: dict[str, str] = {}
    try:
        units = tuple(host.list_dirs("/sys/class/iommu"))
    except HostReadError as exc:
        units = ()
        if reason_of(exc) != "not-found":
            missing["units"] = reason_of(exc)
    try:
        options = _cmdline_options(host.read_text("/proc/cmdline"))
        cmdline: str | None = " ".join(f"{k}={v}" if v else k for k, v in options.items())
    except HostReadError as exc:
        options, cmdline = {}, None
        missing["cmdline"] = reason_of(exc)
    try:
        groups: int | None = len(host.list_dirs("/sys/kernel/iommu_groups"))
    except HostReadError as exc:
        groups = 0 if reason_of(exc) == "not-found" else None
        if groups is None:
            missing["groups"] = reason_of(exc)
    mode, source = _mode(units, options, groups)
    return IommuState(units=units, cmdline=cmdline or None, groups=groups, mode=mode,
                      mode_source=source, missing=missing)


def _mode(units: tuple[str, ...], options: dict[str, str], groups: int | None) -> tuple[str, str]:
    """The host-wide mode; a GPU's own group type, where readable, overrides it per GPU."""
    off = options.get("intel_iommu") == "off" or options.get("amd_iommu") == "off" \
        or options.get("iommu") == "off"
    if off or (not units and groups == 0):
        return "off", ("kernel command line " + " ".join(f"{k}={v}" for k, v in options.items())
                       if off else "no IOMMU unit in /sys/class/iommu and no IOMMU group")
    if options.get("iommu") == "pt" or options.get("iommu.passthrough") == "1":
        return "passthrough", "kernel command line " + (
            "iommu=pt" if options.get("iommu") == "pt" else "iommu.passthrough=1")
    if units:
        return "translated", f"IOMMU units {', '.join(units[:4])} and no iommu=pt"
    return "unknown", "no IOMMU unit listed, but IOMMU groups exist"
