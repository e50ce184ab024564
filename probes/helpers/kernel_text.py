"""Strict reading of the numbers and words the kernel prints in /proc and /sys.

A kernel file is printed by the kernel's own printf; what does not match its format (a
word where a number goes, a negative size, a count past 2**63, an empty /proc/loadavg) is
not a value to reason about but a sign the file is not what it claims to be: a broken
recording, a filesystem that is not procfs. Each helper raises ``MalformedError(path,
problem)``, which the runner reports as the probe's ``error`` with that message, naming
the file and what was wrong with it.
"""

from __future__ import annotations

import math
import re

from doctor.seam.host import MalformedError

# The kernel prints unsigned longs and rlim_t; 2**63 - 1 (LONG_MAX) is the largest any of
# the files read here prints as a number (fs.file-max's default on 64-bit kernels).
MAX_COUNT = 2**63 - 1
# A /proc/loadavg average is a fixed-point number the kernel keeps in an unsigned long.
MAX_LOAD = 1e9

_INT = re.compile(r"[0-9]{1,20}")
_FLOAT = re.compile(r"[0-9]{1,20}(\.[0-9]{1,20})?")
_WORD = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def _shown(word: str) -> str:
    """A word quoted for a message, cut short: a recording may hold a megabyte of garbage."""
    return repr(word if len(word) <= 40 else word[:40] + "…")


def count(path: str, word: str, what: str = "an integer") -> int:
    """``word`` as a non-negative integer of at most MAX_COUNT, else MalformedError."""
    if not _INT.fullmatch(word):
        raise MalformedError(path, f"expected {what}, got {_shown(word)}")
    value = int(word)
    if value > MAX_COUNT:
        raise MalformedError(path, f"{value} is past the largest value the kernel prints (2**63 - 1)")
    return value


def load(path: str, word: str) -> float:
    """A /proc/loadavg average ("0.42"): finite, non-negative, below MAX_LOAD."""
    if not _FLOAT.fullmatch(word):
        raise MalformedError(path, f"expected a load average, got {_shown(word)}")
    value = float(word)
    if not math.isfinite(value) or value > MAX_LOAD:
        raise MalformedError(path, f"load average {_shown(word)} is out of range")
    return value


def word(path: str, text: str) -> str:
    """A file holding one word (a governor, an energy preference), without its newline."""
    value = text.strip()
    if not _WORD.fullmatch(value):
        raise MalformedError(path, f"expected one word, got {_shown(value)}")
    return value


def fields(path: str, text: str, n: int) -> list[str]:
    """The whitespace-separated fields of a one-line file, exactly ``n`` of them."""
    parts = text.split()
    if len(parts) != n:
        raise MalformedError(path, f"expected {n} fields, got {len(parts)}")
    return parts
