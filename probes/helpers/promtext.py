"""Prometheus text pages, parsed with prometheus-client's own parser and flattened.

An engine's ``/metrics`` page becomes a ``Page``: every sample by its sample name (the
name as written on the page, ``vllm:num_preemptions_total``, ``..._bucket``), so the
normaliser looks names up exactly as the engines document them, whatever TYPE line (or
none) the page carries. Histograms are read back as cumulative buckets and their
quantiles computed as Prometheus' ``histogram_quantile`` does (linear interpolation
inside the bucket that holds the rank).

A page is someone else's output: a sample may be NaN, ±Inf, or absurd. NaN and ±Inf are
kept as parsed but are no value to the accessors (``values``, ``total``, ``buckets``),
nor is a negative bucket count; a number too large for a float (a 400-digit sample) makes
the page not a Prometheus page, as it is to Prometheus itself.

Manual equivalent: ``curl -s http://127.0.0.1:8000/metrics | grep -v '^#'``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]


class PageError(Exception):
    """A page is not a Prometheus text page; the message says where it went wrong."""


@dataclass(frozen=True, slots=True)
class Page:
    """Samples by name: {sample name: ((labels, value), ...)}."""

    samples: dict[str, tuple[tuple[Labels, float], ...]]

    def names(self) -> set[str]:
        return set(self.samples)

    def has(self, name: str) -> bool:
        return name in self.samples

    def values(self, name: str, **match: str) -> list[float]:
        """A sample's finite values over its series (NaN and ±Inf are no values)."""
        return [v for labels, v in self.samples.get(name, ())
                if math.isfinite(v) and _matches(labels, match)]

    def total(self, name: str, **match: str) -> float | None:
        """The sum of a sample over its series (engines, TP ranks); None when absent."""
        values = self.values(name, **match)
        try:
            found = math.fsum(values) if values else None
        except OverflowError:  # finite values whose sum is not (1.8e308 + 1e308): no total
            return None
        return found if found is not None and math.isfinite(found) else None

    def first_labels(self, name: str) -> dict[str, str] | None:
        series = self.samples.get(name)
        return dict(series[0][0]) if series else None

    def buckets(self, name: str) -> tuple[tuple[float, float], ...]:
        """A histogram's cumulative buckets ((le, count), ...) summed over its series."""
        counts: dict[float, float] = {}
        for labels, value in self.samples.get(f"{name}_bucket", ()):
            le = dict(labels).get("le")
            if le is None or not math.isfinite(value) or value < 0:
                continue
            try:
                bound = float(le)
            except ValueError:
                continue
            if not math.isnan(bound):
                counts[bound] = counts.get(bound, 0.0) + value
        if not all(math.isfinite(c) for c in counts.values()):
            return ()  # counts so large their sum overflowed: no histogram to read
        return tuple(sorted(counts.items()))


def parse(text: str, source: str) -> Page:
    """Parse a text page; PageError names ``source`` and the line that failed."""
    samples: dict[str, list[tuple[Labels, float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = tuple(sorted(sample.labels.items()))
                samples.setdefault(sample.name, []).append((labels, float(sample.value)))
    except OverflowError:  # a sample or timestamp of hundreds of digits
        raise PageError(f"{source}: not a Prometheus text page (a number too large for a "
                        "float)") from None
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise PageError(f"{source}: not a Prometheus text page ({_short(exc)})") from None
    return Page({name: tuple(series) for name, series in samples.items()})


def _short(exc: Exception) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= 120 else text[:117] + "..."


def _matches(labels: Labels, match: dict[str, str]) -> bool:
    if not match:
        return True
    have = dict(labels)
    return all(have.get(k) == v for k, v in match.items())


def bucket_delta(before: Iterable[tuple[float, float]],
                 after: Iterable[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """The buckets of the observations made between two scrapes (after minus before).

    A counter that went down means the engine restarted between scrapes: then the second
    page's buckets are the observations since the restart.
    """
    old = dict(before)
    new = tuple(after)
    if any(count < old.get(le, 0.0) for le, count in new):
        return new
    return tuple((le, count - old.get(le, 0.0)) for le, count in new)


def observed(buckets: tuple[tuple[float, float], ...]) -> float:
    """How many observations the buckets hold (the +Inf bucket's count)."""
    return buckets[-1][1] if buckets and math.isinf(buckets[-1][0]) else 0.0


def quantile(q: float, buckets: tuple[tuple[float, float], ...]) -> float | None:
    """Prometheus ``histogram_quantile(q, ...)`` over cumulative buckets sorted by le.

    None when there is no +Inf bucket or no observation. As in Prometheus, a rank that
    falls in the +Inf bucket returns the highest finite bound, the first bucket
    interpolates from 0 (when its bound is positive), and counts that go down between
    buckets (scrape races) are raised to keep the series monotonic.
    """
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]) or not 0 <= q <= 1:
        return None
    fixed: list[tuple[float, float]] = []
    running = 0.0
    for le, count in buckets:
        running = max(running, count)
        fixed.append((le, running))
    total = fixed[-1][1]
    if not 0 < total < math.inf:
        return None
    rank = q * total
    index = next(i for i, (_, count) in enumerate(fixed) if count >= rank)
    if index == len(fixed) - 1:
        return fixed[-2][0]
    end, count_end = fixed[index]
    if index == 0:
        if end <= 0:
            return end
        start, count_start = 0.0, 0.0
    else:
        start, count_start = fixed[index - 1]
    in_bucket = count_end - count_start
    if in_bucket <= 0:
        return end
    return start + (end - start) * (rank - count_start) / in_bucket
