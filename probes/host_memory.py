"""host.memory: total, available and swap, from ``/proc/meminfo`` (kB there, MiB here).

Manual equivalent: ``free -m``. No root needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.host import Host
from doctor.model import ScanOptions


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    total_mib: int
    available_mib: int | None  # MemAvailable (kernels >= 3.14)
    swap_total_mib: int
    swap_used_mib: int  # SwapTotal - SwapFree - SwapCached: pages really out on swap
    huge_pages_total: int


def parse_meminfo(text: str) -> dict[str, int]:
    """``MemTotal:  24683652 kB`` → {"MemTotal": 24683652} (kB, or a count)."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[key.strip()] = int(parts[0])
    return values


def probe(host: Host, options: ScanOptions) -> MemoryRecord:
    kb = parse_meminfo(host.read_text("/proc/meminfo"))
    swap_used_kb = kb.get("SwapTotal", 0) - kb.get("SwapFree", 0) - kb.get("SwapCached", 0)
    available = kb.get("MemAvailable")
    return MemoryRecord(
        total_mib=kb["MemTotal"] // 1024,
        available_mib=None if available is None else available // 1024,
        swap_total_mib=kb.get("SwapTotal", 0) // 1024,
        swap_used_mib=max(swap_used_kb, 0) // 1024,
        huge_pages_total=kb.get("HugePages_Total", 0),
    )


def summary(record: MemoryRecord) -> str:
    """One line for people: memory and swap in MiB."""
    return (f"{record.total_mib} MiB total, {record.available_mib} available; "
            f"swap {record.swap_used_mib}/{record.swap_total_mib} MiB used")
