"""A counter over an engine's two /metrics scrapes: its increase between them where the first
scrape had it, else its total since the engine started, and which of the two it is.

engine.features (speculative decoding, structured output) and engine.kv_tiers (NIXL transfer
failures) read their counters this way. NaN, infinite or negative totals are no count: absent,
with the reason appended to ``absent``, never judged.
"""

from __future__ import annotations

from doctor.values import non_negative
from probes.helpers.promtext import Page

BETWEEN, SINCE_START = "between scrapes", "since start"


def span(first: Page, second: Page, name: str, absent: list[str], *, still_is_window: bool,
         **match: str) -> tuple[float | None, str | None]:
    """(count, window) of counter ``name`` (series matching ``match``). A counter that did not
    move is 0 between the scrapes when ``still_is_window`` (a failure count: none new is the
    news), else its total since start (a ratio's parts: the window would hold nothing)."""
    after, before = second.total(name, **match), first.total(name, **match)
    if after is None:
        if second.has(name):
            absent.append(f"{name}: no finite value (NaN or infinite)")
        return None, None
    if non_negative(after) is None:
        absent.append(f"{name}: the page gives {after:g}, not a count >= 0")
        return None, None
    if before is not None and before >= 0 and (after > before or (still_is_window and after == before)):
        return after - before, BETWEEN
    return after, SINCE_START
