"""``/proc/<pid>/limits`` read as fs/proc/base.c writes it: host.limits reports the rows,
engine.kv_tiers holds the locked-memory limit against a pinned CPU KV tier.

Source: ``/proc/<pid>/limits`` (world-readable; no root needed). Counts, except locked
memory (bytes); ``unlimited`` is None. Manual equivalent: ``cat /proc/<pid>/limits``.
"""

from __future__ import annotations

from probes.helpers import kernel_text
from probes.helpers.kernel_text import MalformedError

# /proc/<pid>/limits row names for the limits we judge.
ROWS = {
    "Max open files": "nofile",
    "Max processes": "nproc",
    "Max locked memory": "memlock",
}


def parse_limits(text: str, path: str = "/proc/self/limits") -> dict[str, int | None]:
    """``/proc/<pid>/limits`` → {"nofile_soft": 1024, ...}; unlimited is None.

    Every row of ROWS must be there (fs/proc/base.c prints all sixteen), each with a soft
    and a hard limit that are numbers or ``unlimited``, the soft no higher than the hard
    (setrlimit refuses that); anything else is MalformedError naming the row.
    """
    values: dict[str, int | None] = {}
    for line in text.splitlines()[1:]:
        for row, key in ROWS.items():
            if line.startswith(row) and line[len(row):len(row) + 1].isspace():
                soft, hard = (_limit(path, row, which, word) for which, word in
                              zip(("soft", "hard"), _two(path, row, line[len(row):])))
                if hard is not None and (soft is None or soft > hard):
                    raise MalformedError(path, f"{row!r} soft limit is above its hard limit")
                values[f"{key}_soft"], values[f"{key}_hard"] = soft, hard
    missing = [row for row, key in ROWS.items() if f"{key}_soft" not in values]
    if missing:
        raise MalformedError(path, f"no {', '.join(repr(r) for r in missing)} row")
    return values


def _two(path: str, row: str, rest: str) -> list[str]:
    words = rest.split()
    if len(words) < 2:
        raise MalformedError(path, f"{row!r}: expected a soft and a hard limit, got {len(words)} field(s)")
    return words[:2]


def _limit(path: str, row: str, which: str, word: str) -> int | None:
    if word == "unlimited":
        return None
    return kernel_text.count(path, word, f"{row!r} {which} limit as a number")
