"""The sweep ``llm-doctor load`` saved for an endpoint (knee-<hash>.json), read as hostile input.

Source: the file doctor.workload.knee.knee_path names for the endpoint's base URL: the knee's
concurrency and status, when it was measured, and each level of the sweep (at most
MAX_SWEEP_LEVELS), so a report can draw the curve the knee was read from. A sweep of an
older schema is not used (probes/engine/load.py says why). Read by engine.load,
engine.slots and engine.roofline. Manual equivalent: ``cat ~/.cache/llm-doctor/knee-*.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from doctor.values import count, field, non_negative, page_json, text
from doctor.workload.knee import SCHEMA, knee_path

MAX_SWEEP_LEVELS = 32


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One level of the saved sweep (knee-<hash>.json "levels"), as the knee was judged from."""

    concurrency: int
    output_tokens_per_s: float | None  # over the level's throughput window
    ttft_p50_ms: float | None  # client-side time to first token, median
    usable: bool  # False: the knee was not judged from this level (its "unusable" says why)


def _level(value: object) -> int | None:
    """A concurrency as ``llm-doctor load`` writes it: a JSON integer of at least 1. A string
    ("4") or a float means someone else wrote the file (doctor/values.py's count would take
    both)."""
    return count(value, minimum=1) if type(value) is int else None


def sweep_points(document: object) -> tuple[SweepPoint, ...]:
    """The saved sweep's levels, each read as hostile input: a level without a concurrency
    of at least 1 is left out, a throughput or TTFT that is not a finite non-negative number
    is None; at most MAX_SWEEP_LEVELS."""
    levels = field(document, "levels")
    points = []
    for level in levels[:MAX_SWEEP_LEVELS] if isinstance(levels, list) else ():
        concurrency = _level(field(level, "concurrency"))
        if concurrency is None:
            continue
        points.append(SweepPoint(concurrency, non_negative(field(level, "output_tokens_per_s")),
                                 non_negative(field(level, "ttft", "p50_ms")),
                                 field(level, "unusable") is None))
    return tuple(points)


def knee_throughput(knee: int | None, points: tuple[SweepPoint, ...]) -> float | None:
    """Output tokens/s of the usable level the knee was found at; None without a knee."""
    at = [p.output_tokens_per_s for p in points if knee is not None and p.concurrency == knee
          and p.usable and p.output_tokens_per_s is not None]
    return at[0] if at else None


def saved_sweep(host: Host, base_url: str) -> tuple[tuple[int | None, str | None, str | None, str],
                                                    tuple[SweepPoint, ...]]:
    """``saved_knee``'s answer, and the sweep's levels (none unless its schema is current)."""
    path = str(knee_path(base_url))
    try:
        document = page_json(host.read_text(path))
    except HostReadError:
        return (None, None, None, path), ()
    except ValueError:
        return (None, "unreadable", None, path), ()
    knee = _knee_of(document, path)
    return knee, (sweep_points(document) if knee[1] != "outdated" else ())


def saved_knee(host: Host, base_url: str) -> tuple[int | None, str | None, str | None, str]:
    """(knee concurrency, status, measured_at, file) from the saved sweep, if any."""
    return saved_sweep(host, base_url)[0]


def _knee_of(document: object, path: str) -> tuple[int | None, str | None, str | None, str]:
    if not isinstance(document, dict):  # JSON, but not a saved sweep of any schema
        return None, "unreadable", None, path
    measured_at = text(field(document, "measured_at"), 40)
    if field(document, "schema") != SCHEMA:
        return None, "outdated", measured_at, path
    status = text(field(document, "knee", "status"), 40)
    if status is None:
        return None, "unreadable", measured_at, path
    if status != "found":
        return None, status, measured_at, path
    found = _level(field(document, "knee", "concurrency"))
    if found is None:
        return None, "unreadable", measured_at, path
    return found, status, measured_at, path
