"""``/proc/meminfo`` read as the kernel writes it: host.memory, engine.capacity, host.memory_bandwidth
and ``llm-doctor plan`` size against it.

Source: ``/proc/meminfo`` (fs/proc/meminfo.c), kB or counts. No root needed.
Manual equivalent: ``cat /proc/meminfo``.
"""

from __future__ import annotations

from probes.helpers import kernel_text
from probes.helpers.kernel_text import MalformedError


def parse_meminfo(text: str, path: str = "/proc/meminfo") -> dict[str, int]:
    """``MemTotal:  24683652 kB`` → {"MemTotal": 24683652} (kB, or a count).

    Every row is ``Key: number`` or ``Key: number kB`` (fs/proc/meminfo.c show_val_kb);
    any other row is MalformedError naming its line.
    """
    values = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, colon, rest = line.partition(":")
        parts = rest.split()
        if not colon or not key.strip() or len(parts) not in (1, 2) or parts[1:] not in ([], ["kB"]):
            raise MalformedError(path, f"line {n}: expected 'Key: number [kB]', got {line[:60]!r}")
        values[key.strip()] = kernel_text.count(path, parts[0], f"a number for {key.strip()[:40]}")
    return values


def required(path: str, values: dict[str, int], key: str) -> int:
    """``values[key]``, or MalformedError saying the row is missing."""
    if key not in values:
        raise MalformedError(path, f"no {key} row")
    return values[key]
