"""Values as a person reads them: one formatter for titles, summaries and reports.

A value that holds None says why when its record knows (the record's ``missing`` entry,
doctor/seam/missing.py: a read-failure reason such as ``no-permission``, or a sentence such
as "not measured at level quick"), and ``—`` when it does not; JSON keeps the null, only the
text for people changes. A number that rounds to zero prints without a sign: a CPU sample a
hair under zero is "0.00 of 2 cores busy", never "-0.00"; a flag is "yes" or "no", never
``True``; a number that is not one (NaN, from a saved report someone edited) says so.

Renderers, the probes' summaries and the rule titles all use this module, so that no
report says ``None``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from doctor.i18n import t, translated

ABSENT = "—"  # a value with no reason known: not read, not applicable
MAX_ITEMS = 20  # a list or mapping shows its first 20 entries

# doctor.seam.host.Reason values, as a reader says them (in English; ``reason_words`` gives
# them in the current language).
REASON_WORDS = {
    "not-found": "not found",
    "no-permission": "not read (no permission)",
    "timeout": "not read (timed out)",
    "failed": "not read (the read failed)",
    "not-supported": "not supported",
    "device-lost": "not read (the GPU fell off the bus)",
    "library-missing": "not read (no NVIDIA library)",
}

_NONZERO = re.compile(r"[1-9]")


def reason_words() -> dict[str, str]:
    """REASON_WORDS in the current language."""
    return {
        "not-found": t("not found"),
        "no-permission": t("not read (no permission)"),
        "timeout": t("not read (timed out)"),
        "failed": t("not read (the read failed)"),
        "not-supported": t("not supported"),
        "device-lost": t("not read (the GPU fell off the bus)"),
        "library-missing": t("not read (no NVIDIA library)"),
    }


def why(reason: object) -> str:
    """A ``missing`` reason as words (``no-permission`` → "not read (no permission)"); a
    sentence stays as it is; no reason is ``—``."""
    if reason is None or reason == "":
        return ABSENT
    text = reason if isinstance(reason, str) else str(reason)
    return reason_words().get(text) or translated(text)


NOT_A_NUMBER = "not a number"


def flag(value: bool) -> str:
    return t("yes") if value else t("no")


def number(value: float | int, spec: str = "") -> str:
    """``format(value, spec)``, without the sign of a value that rounds to zero; NaN as
    "not a number" and infinities as ∞, never ``nan`` or ``inf``."""
    if isinstance(value, float) and not math.isfinite(value):
        return t("not a number") if math.isnan(value) else ("-∞" if value < 0 else "∞")
    text = format(value, spec)
    if (isinstance(value, float) and math.isfinite(value) and "-" in text
            and not _NONZERO.search(text.split("e")[0])):
        text = format(0.0, spec)  # -0.0, or -0.001 under .2f: zero is unsigned
    return text


def written(value: float | int) -> str:
    """A number as a person writes it: a whole float as a whole number (a gauge's 48.0
    requests is 48), any other to six significant digits (a rate of 1999.9999999999998 is
    2000), by ``number``."""
    if isinstance(value, float) and math.isfinite(value):
        if value.is_integer() and abs(value) < 1e15:
            return number(int(value))
        return number(value, ".6g")
    return number(value)


def text(value: Any, reason: object = None, spec: str = "") -> str:
    """Any value as text for people: None as ``why(reason)``, numbers by ``number``, lists
    as "a, b", mappings as "k: v", each entry by these rules. A value of a hand-written
    recording that cannot be printed (an integer of thousands of digits, nesting thousands
    deep) says so instead."""
    try:
        return _text(value, reason, spec)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        return t("(unprintable {type}: {error})", type=type(value).__name__, error=str(exc)[:80])


def _text(value: Any, reason: object, spec: str) -> str:
    if value is None:
        return why(reason)
    if isinstance(value, bool):
        return flag(value)
    if isinstance(value, (int, float)):
        try:
            return number(value, spec)
        except (ValueError, TypeError, OverflowError):  # a spec the value does not fit: plain
            return number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        shown = [f"{k}: {_text(v, None, '')}" for k, v in list(value.items())[:MAX_ITEMS]]
        return _joined(shown, len(value))
    if isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
        return _joined([_text(v, None, "") for v in items[:MAX_ITEMS]], len(items))
    return str(value)


def field(record: Any, name: str, spec: str = "") -> str:
    """A record's field as text, with the reason its ``missing`` dict gives when it is None."""
    missing = getattr(record, "missing", None)
    reason = missing.get(name) if isinstance(missing, Mapping) else None
    return text(getattr(record, name, None), reason, spec)


def _joined(shown: list[str], count: int) -> str:
    if not shown:
        return t("none")
    return ", ".join(shown) + (", …" if count > len(shown) else "")
