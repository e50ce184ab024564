"""host.memory: total, available and swap, from ``/proc/meminfo`` (kB there, MiB here).

Manual equivalent: ``free -m``. No root needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host
from doctor.model import ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor import display
from doctor.i18n import t
from probes.helpers.meminfo import parse_meminfo as parse_meminfo
from probes.helpers.kernel_text import MalformedError
from probes.helpers.meminfo import required


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    total_mib: int
    available_mib: int | None  # MemAvailable (kernels >= 3.14)
    swap_total_mib: int
    swap_used_mib: int  # SwapTotal - SwapFree - SwapCached: pages really out on swap
    huge_pages_total: int
    missing: dict[str, str]  # field → why it holds None (doctor/seam/missing.py)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> MemoryRecord:
    kb = parse_meminfo(host.read_text("/proc/meminfo"))
    total_kb = required("/proc/meminfo", kb, "MemTotal")
    if total_kb == 0:
        raise MalformedError("/proc/meminfo", "MemTotal is 0 kB")
    swap_used_kb = kb.get("SwapTotal", 0) - kb.get("SwapFree", 0) - kb.get("SwapCached", 0)
    available = kb.get("MemAvailable")
    return MemoryRecord(
        total_mib=total_kb // 1024,
        available_mib=None if available is None else available // 1024,
        swap_total_mib=kb.get("SwapTotal", 0) // 1024,
        swap_used_mib=max(swap_used_kb, 0) // 1024,
        huge_pages_total=kb.get("HugePages_Total", 0),
        # MemAvailable came with Linux 3.14: older kernels do not report it
        missing={} if available is not None else {"available_mib": "not-supported"},
    )


def summary(record: MemoryRecord) -> str:
    """One line for people: memory and swap in MiB."""
    return t("{total} MiB total, {available} available; swap {used}/{swap} MiB used",
             total=record.total_mib, available=display.field(record, "available_mib"),
             used=record.swap_used_mib, swap=record.swap_total_mib)
