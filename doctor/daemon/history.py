"""Bounded in-memory history of the exported measurements, for the incident reports' plots.

One ring per series (metric name + labels), holding (unix time, value) pairs for the last
``window_s`` at no finer than ``window_s / max_points`` (a faster beat replaces the newest
point instead of adding one: 360 points per series whatever the interval). Memory stays bounded over days: points older than the window are dropped,
a series not updated for a whole window is forgotten (an engine that restarted under a new
pid), and at most ``max_series`` series are kept (the oldest-updated go first).

``about(name)`` says what a series is (the catalog's row: the record field it comes from,
the ceiling drawn beside it), so that a report can pick the plots for a finding's evidence.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left

from doctor.daemon import catalog
from doctor.daemon.catalog.rows import Metric

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]


class _Ring:
    """One series' points as two arrays of doubles: 16 bytes a point, not a tuple's ~100."""

    __slots__ = ("times", "values")

    def __init__(self) -> None:
        self.times = array("d")
        self.values = array("d")


class History:
    def __init__(self, window_s: float = 3600.0, max_series: int = 2000,
                 max_points: int = 360) -> None:
        self.window_s = window_s
        self.step_s = window_s / max_points
        self.max_series = max_series
        self._series: dict[SeriesKey, _Ring] = {}
        self._lock = threading.Lock()

    def add(self, now: float, samples: list[tuple[str, Labels, float]]) -> None:
        """Append one point per sample at ``now`` (unix seconds), then prune."""
        with self._lock:
            for name, labels, value in samples:
                ring = self._series.get((name, labels))
                if ring is None:
                    ring = self._series[(name, labels)] = _Ring()
                if len(ring.times) > 1 and now - ring.times[-2] < self.step_s:
                    ring.times[-1], ring.values[-1] = now, value
                else:
                    ring.times.append(now)
                    ring.values.append(value)
            self._prune(now)

    def _prune(self, now: float) -> None:
        horizon = now - self.window_s
        for key in list(self._series):
            ring = self._series[key]
            old = bisect_left(ring.times, horizon)
            if old:
                del ring.times[:old]
                del ring.values[:old]
            if not ring.times:
                del self._series[key]
        if len(self._series) > self.max_series:
            by_age = sorted(self._series, key=lambda k: self._series[k].times[-1])
            for key in by_age[: len(self._series) - self.max_series]:
                del self._series[key]

    def series(self, name: str) -> dict[Labels, list[tuple[float, float]]]:
        """Every series of metric ``name``: labels → points, oldest first."""
        with self._lock:
            return {labels: list(zip(ring.times, ring.values))
                    for (n, labels), ring in self._series.items() if n == name}

    def about(self, name: str) -> Metric | None:
        """The catalog's row behind metric ``name`` (None for the daemon's own metrics)."""
        return catalog.about(name)

    def names(self) -> set[str]:
        with self._lock:
            return {name for name, _ in self._series}

    def __len__(self) -> int:
        with self._lock:
            return len(self._series)
