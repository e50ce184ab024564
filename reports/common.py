"""What every renderer shares: each probe's one-line summary, and host text made safe to show.

A report shows text that came from the host (hostname, command lines, comm, paths, evidence,
error messages). None of it may steer the reader's terminal, and a record of an unexpected
shape (a hand-written recording) must not stop the report: the line says it could not be
read instead.
"""

from __future__ import annotations

from typing import Any

from doctor.model import ProbeResult, ProbeSpec
from doctor.redact import redact_text, safe_display


def show(value: Any) -> str:
    """``value`` as text a terminal or Markdown viewer prints rather than obeys, with any
    secret that slipped into a record masked (the probes mask first; this is the backstop)."""
    try:
        text = value if isinstance(value, str) else str(value)
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits
        text = f"(unprintable {type(value).__name__}: {exc})"
    return safe_display(redact_text(text))


def probe_summary(result: ProbeResult, specs: dict[str, ProbeSpec] | None = None) -> str:
    """The probe's one line for people (its module's ``summary``), or why there is none.

    Never raises: a record the summary cannot read shows as "(unreadable: ...)".
    """
    if result.status != "ok":
        return show(result.reason or "")
    if specs is None:
        from probes.registry import by_name

        specs = by_name()
    spec = specs.get(result.name)
    fn = spec.summary if spec is not None else None
    if fn is None:
        return ""
    try:
        return show(fn(result.record))
    # The isolation boundary of a report: a summary reads a record that may have come from
    # a hand-written recording; whatever it trips on, the rest of the report still prints.
    except Exception as exc:  # noqa: BLE001
        return show(f"(unreadable: {type(exc).__name__}: {exc})")
