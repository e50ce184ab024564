"""What every renderer shares: each probe's one-line summary, and host text made safe to show.

A report shows text that came from the host (hostname, command lines, comm, paths, evidence,
error messages). None of it may steer the reader's terminal, and a record of an unexpected
shape (a hand-written recording) must not stop the report: the line says it could not be
read instead.
"""

from __future__ import annotations

from typing import Any

from doctor.model import ProbeResult
from doctor.redact import redact_text, safe_display


def show(value: Any) -> str:
    """``value`` as text a terminal or Markdown viewer prints rather than obeys, with any
    secret that slipped into a record masked (the probes mask first; this is the backstop)."""
    try:
        text = value if isinstance(value, str) else str(value)
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits
        text = f"(unprintable {type(value).__name__}: {exc})"
    return safe_display(redact_text(text))


def probe_summary(result: ProbeResult) -> str:
    """The probe's one line for people (made by the runner from the probe's own summary),
    or why there is none, made safe to show."""
    if result.status != "ok":
        return show(result.reason or "")
    return show(result.summary)
