"""Values read from an engine's pages and flags, taken as hostile input.

An engine's JSON pages (``/v1/models``, ``/props``, ``/info``, ``/server_info``,
``/api/ps``, ``/slots``, a streamed completion's events), its ``/metrics`` samples and
labels, and its command line are someone else's output: any value may have any JSON type,
be NaN or infinite (``1e999``), have 400 digits (``float()`` raises OverflowError on such
an int, ``int()`` raises on an infinite float), be negative, or be nested 100,000 deep.
Every engine probe reads them through these helpers instead of ``float(x)``, ``int(x)``
or ``page["data"][0]``: a value that is not what it should be becomes None, "not a
number to judge", and never a crash of the probe.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeGuard

MAX_COUNT = 2**53  # beyond this a float no longer holds every whole number
MAX_TEXT = 1024  # a model name or path longer than this is not one


def number(value: Any) -> float | None:
    """A finite float from an int, a float or a numeric string ("0.9", "4096");
    None for anything else: bool, NaN, ±inf, "1e999", an int too large for a float, a list."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    if isinstance(value, str) and len(value) > 64:  # no real figure is written this long
        return None
    try:
        result = float(value)
    except (ValueError, OverflowError):
        return None
    return result if math.isfinite(result) else None


def is_number(value: Any) -> TypeGuard[int | float]:
    """An int or a float, not a bool; NaN and infinities count."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite(value: Any) -> TypeGuard[int | float]:
    """A number, not NaN or infinite (every int is, however large)."""
    return is_number(value) and (isinstance(value, int) or math.isfinite(value))


def finite_float(value: Any) -> float | None:
    """``value`` as a finite float; None for what is not an int or a float (a numeric
    string included), NaN, infinities, and an int too large for a float."""
    return number(value) if is_number(value) else None


def count(value: Any, minimum: int = 0) -> int | None:
    """A whole number from ``minimum`` to 2**53 ("16", 16, 16.0); None for anything else,
    a fraction (16.5) or a negative count included."""
    found = number(value)
    if found is None or found != int(found) or not minimum <= found <= MAX_COUNT:
        return None
    return int(found)


def fraction(value: Any) -> float | None:
    """A share from 0 to 1; None for anything else (90 for 90 % is not a share)."""
    found = number(value)
    return found if found is not None and 0.0 <= found <= 1.0 else None


def non_negative(value: Any) -> float | None:
    """A finite number of things (requests, tokens, seconds) that cannot be below 0."""
    found = number(value)
    return found if found is not None and found >= 0 else None


def text(value: Any, limit: int = MAX_TEXT) -> str | None:
    """A string no longer than ``limit``; None for another type or a longer string."""
    return value if isinstance(value, str) and len(value) <= limit else None


def field(data: Any, *path: str | int) -> Any:
    """``data[path[0]][path[1]]...`` where every step has the right shape (a dict for a
    name, a list for an index); None where it has not."""
    for step in path:
        if isinstance(step, str) and isinstance(data, dict):
            data = data.get(step)
        elif isinstance(step, int) and isinstance(data, list) and -len(data) <= step < len(data):
            data = data[step]
        else:
            return None
    return data


def first(data: Any, name: str) -> dict[str, Any]:
    """The first object in the list ``data[name]`` (``/v1/models`` "data", ``/api/ps``
    "models"), or {} when there is none of that shape."""
    item = field(data, name, 0)
    return item if isinstance(item, dict) else {}


def page_json(body: str) -> Any:
    """A page's JSON; ValueError for anything that is not (nesting too deep included)."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
