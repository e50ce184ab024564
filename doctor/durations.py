"""Durations as people write them: a rule's ``for``, the daemon's ``interval``,
``kernel_interval``, ``resend_interval``, ``history`` and ``[daemon.for]``, and the
daemon's ``--interval`` and ``--kernel-interval`` flags. One grammar for all of them:

- a whole number and a unit: ``30s``, ``5m``, ``1h``;
- a number alone, in seconds: ``15``, ``1.5`` (a string, or a TOML number).

A duration is at most ``MAX_SECONDS`` (ten years) and is refused before any arithmetic
when it has more digits than a duration that long needs, so that ``"999…9s"`` is a
message naming what was written, never an OverflowError or a wait of 10^400 seconds.
"""

from __future__ import annotations

import math
import re

from doctor.i18n import t

UNITS = {"s": 1, "m": 60, "h": 3600}
MAX_SECONDS = 10 * 365 * 86400  # ten years: past any rule's window or daemon interval
MAX_DIGITS = 12  # of the whole number: a million years of seconds; refused before int()
_NUMBER = re.compile(r"([0-9]*)(?:\.([0-9]*))?([smh]?)")


class DurationError(ValueError):
    """Not a duration; the message quotes what was written and says what one looks like."""


def _shown(text: str) -> str:
    """What was written, quoted, cut to a readable length."""
    return repr(text) if len(text) <= 24 else t("{start}… ({length} characters)",
                                                start=repr(text[:12]), length=len(text))


def parse(value: object) -> float:
    """Seconds in ``value`` (see the module's grammar); DurationError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DurationError(t("{value} is not a duration like 30s, 5m or 1h",
                              value=f"{value!r:.40}"))
    if isinstance(value, str):
        seconds = _seconds_of(value)
    elif isinstance(value, float) and not math.isfinite(value):
        raise DurationError(t("{value} is not a duration like 30s, 5m or 1h: a duration is a "
                              "finite number of seconds", value=value))
    else:
        seconds = value
    if seconds < 0:
        raise DurationError(t("{value} is negative; a duration is 0 or more seconds",
                              value=f"{value!r:.40}"))
    if seconds > MAX_SECONDS:
        raise _too_long(value)
    return float(seconds)


def _too_long(value: str | int | float) -> DurationError:
    if isinstance(value, str):
        shown = _shown(value)
    elif isinstance(value, float):
        shown = f"{value:g}"
    else:  # an int: str() of one of thousands of digits is refused by Python itself
        digits = str(value) if value.bit_length() < 4000 else ""
        shown = digits if 0 < len(digits) <= 24 else t("a number of {count} digits",
                                                       count=len(digits) or "1,000+")
    return DurationError(t("{value} is over ten years; a duration is at most {most}s",
                           value=shown, most=MAX_SECONDS))


def _seconds_of(written: str) -> float:
    match = _NUMBER.fullmatch(written.strip())
    whole, fraction, unit = match.groups() if match else ("", None, "")
    if not match or not (whole or fraction) or (unit and fraction is not None):
        raise DurationError(t("{value} is not a duration like 30s, 5m or 1h (a whole number "
                              "with s, m or h, or a number of seconds)", value=_shown(written)))
    whole = whole.lstrip("0") or "0"
    if len(whole) > MAX_DIGITS:
        raise _too_long(written)
    return float(f"{whole}.{(fraction or '0')[:9] or '0'}") * UNITS[unit or "s"]
