"""NVIDIA XID codes: what each means and what to do, and the kernel-log lines that carry them.

Source of meanings and actions: NVIDIA, "XID Errors" (GPU deployment and management
documentation, https://docs.nvidia.com/deploy/xid-errors/index.html, the catalogue of
r535-r570 drivers: "Xid Error Listing" and its "Resolution"/"Immediate action" columns).
``hardware`` marks the codes that point at the card, its memory or its link rather than at
the application (13, 31, 43 and 45 are usually an application bug or its exit).

The driver logs ``NVRM: Xid (PCI:0000:18:00): 79, pid=…, GPU has fallen off the bus.`` to
the kernel log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor.i18n import lazy, translated


@dataclass(frozen=True, slots=True)
class Xid:
    meaning: str
    action: str
    hardware: bool


XIDS: dict[int, Xid] = {
    13: Xid(lazy("Graphics engine exception (often an out-of-bounds access in a kernel)"),
            lazy("Debug the application; if it repeats across applications, run the DCGM diagnostic"), False),
    31: Xid(lazy("GPU memory page fault (usually an application's illegal address)"),
            lazy("Debug the application (compute-sanitizer); reset only if it repeats across jobs"), False),
    43: Xid(lazy("GPU stopped processing (the application hit a fault and was stopped)"),
            lazy("Restart the application; none on the GPU"), False),
    45: Xid(lazy("Preemptive cleanup after an application was stopped or a previous error"),
            lazy("None by itself: look at the XID logged before it"), False),
    48: Xid(lazy("Double-bit ECC error (uncorrectable memory error)"),
            lazy("Reset the GPU (nvidia-smi -r); if it recurs, have the card serviced"), True),
    61: Xid(lazy("Internal micro-controller breakpoint/warning"), lazy("Reset the GPU; update the driver"), True),
    62: Xid(lazy("Internal micro-controller halt"), lazy("Reset the GPU; update the driver"), True),
    63: Xid(lazy("ECC page retirement or row-remapping event recorded"),
            lazy("Reset the GPU when idle so the remap takes effect (nvidia-smi -r)"), True),
    64: Xid(lazy("ECC page retirement or row-remapping failure (no spare row, or recording failed)"),
            lazy("Drain the node and have the card replaced (RMA)"), True),
    74: Xid(lazy("NVLink error"), lazy("Reset the GPU; if it persists, check the NVLink/NVSwitch hardware"), True),
    79: Xid(lazy("GPU has fallen off the bus"), lazy("Drain the node; check power, cooling and the PCIe "
            "slot/riser, then reboot; replace the card if it recurs"), True),
    92: Xid(lazy("High single-bit ECC error rate"), lazy("Watch the ECC counters; service the card if it rises"), True),
    94: Xid(lazy("Contained ECC error (the affected application was stopped)"),
            lazy("Restart the application; reset the GPU when convenient"), True),
    95: Xid(lazy("Uncontained ECC error"), lazy("Reset the GPU before running anything else on it"), True),
    109: Xid(lazy("Context switch timeout"), lazy("Restart the application; reset the GPU if it repeats"), True),
    119: Xid(lazy("GSP RPC timeout (the GPU's system processor did not answer)"),
             lazy("Reset the GPU; update the driver"), True),
    120: Xid(lazy("GSP error"), lazy("Reset the GPU; update the driver"), True),
    140: Xid(lazy("Unrecovered ECC error"), lazy("Reset the GPU; service the card if it recurs"), True),
}

XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\): (\d+)")


@dataclass(frozen=True, slots=True)
class XidEvent:
    bus: str  # "0000:18:00" as the driver logs it
    code: int
    meaning: str
    action: str
    hardware: bool
    line: str  # the log line, cut at 200 characters


def parse_kernel_log(text: str) -> list[XidEvent]:
    events = []
    for line in text.splitlines():
        m = XID_LINE.search(line)
        if not m:
            continue
        code = int(m.group(2))
        xid = XIDS.get(code, Xid(lazy("Not in llm-doctor's table: see NVIDIA's XID catalogue"),
                                  lazy("Look the code up in NVIDIA's XID catalogue"), True))
        events.append(XidEvent(m.group(1).lower(), code, translated(xid.meaning), translated(xid.action), xid.hardware,
                               line.strip()[:200]))
    return events


def same_bus(nvml_bus_id: str | None, logged: str) -> bool:
    """NVML's "00000000:18:00.0" against the log's "0000:18:00"."""
    if not nvml_bus_id:
        return False
    domain, _, rest = nvml_bus_id.lower().partition(":")
    ldomain, _, lrest = logged.partition(":")
    return rest.split(".")[0] == lrest and int(domain or "0", 16) == int(ldomain or "0", 16)


# amdgpu's lines, by pattern: the AMD half of the kernel-log table. Sources: the format
# strings of drivers/gpu/drm/amd/amdgpu (amdgpu_ras.c: "uncorrectable hardware error(%s)
# detected!", "%ld uncorrectable hardware errors detected in %s block"; amdgpu_device.c:
# "GPU reset begin!", "GPU reset(%d) failed"; amdgpu_job.c: "ring %s timeout"), and lines
# pasted in ROCm/legacy-rocm-build#1886 (MI50) and #4021 (MI300X).
_AMD_BUS = r"amdgpu (?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]):(?: amdgpu:)? (?:\{\d+\})?"


@dataclass(frozen=True, slots=True)
class KernelPattern:
    kind: str
    pattern: re.Pattern[str]
    meaning: str
    action: str
    hardware: bool


AMDGPU_PATTERNS: tuple[KernelPattern, ...] = (
    KernelPattern("ras-uncorrectable", re.compile(
        _AMD_BUS + r"(?:uncorrectable hardware error\((?P<what>\w+)\) detected"
                   r"|\d+ uncorrectable hardware errors detected in (?P<block>\w+) block)"),
        lazy("Uncorrectable RAS error (data on the GPU was lost; the driver resets it)"),
        lazy("Drain the GPU; read `amd-smi metric --ecc --ecc-blocks` and `amd-smi bad-pages`; "
             "service the card if it recurs"), True),
    KernelPattern("gpu-reset-failed", re.compile(
        _AMD_BUS + r"(?:GPU reset\(\d+\) failed|GPU Recovery Failed|ASIC reset failed)"),
        lazy("GPU reset failed: the GPU is unusable until the host reboots"),
        lazy("Drain the node and reboot it; open a service case if it recurs"), True),
    KernelPattern("gpu-reset", re.compile(_AMD_BUS + r"GPU reset begin"),
        lazy("The driver reset the GPU (after a hang or a RAS error): work on it was lost"),
        lazy("Read the lines before it for the cause (a ring timeout, a RAS error)"), True),
    KernelPattern("ring-timeout", re.compile(_AMD_BUS + r"ring (?P<ring>\S+) timeout"),
        lazy("A GPU ring (queue) stopped answering: a kernel hung or the GPU faulted"),
        lazy("Restart the engine; if it repeats across engines, update ROCm and the firmware"), False),
)


@dataclass(frozen=True, slots=True)
class AmdgpuEvent:
    bus: str  # "0000:68:00.0" as amdgpu logs it
    kind: str  # a KernelPattern.kind
    meaning: str
    action: str
    hardware: bool
    line: str  # the log line, cut at 200 characters


def parse_amdgpu_log(text: str) -> list[AmdgpuEvent]:
    """amdgpu's RAS, reset and hang lines, the first pattern of AMDGPU_PATTERNS that matches
    each line (a failed reset is not also a reset)."""
    events = []
    for line in text.splitlines():
        if "amdgpu" not in line:
            continue
        for p in AMDGPU_PATTERNS:
            m = p.pattern.search(line)
            if m:
                events.append(AmdgpuEvent(m.group("bus").lower(), p.kind, translated(p.meaning),
                                          translated(p.action), p.hardware, line.strip()[:200]))
                break
    return events
