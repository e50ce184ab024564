"""Noise floors: how far a measured figure moves between two runs on an unchanged host.

A measured figure is CHANGED only when after / before lies outside 1 ± its floor. The floor
is the kernel's own run-to-run spread when the record carries it (``<figure>_spread``, the
relative spread (max - min) / median over the kernel's repeats): twice the larger of the two
sides' spreads, never under ``MIN_FLOOR``. Recordings made before the kernels reported a
spread carry none; their figures get the conservative default of their kind below
(docs/diff.md holds the same table).

A latency percentile's floor comes from the requests it was taken over: the percentile of n
samples moves by about 1/sqrt(n) of its value between runs of a steady engine (the order
statistic's standard error, Bahadur), so the floor is 2/sqrt(n), at least 10%; a p95 over
fewer than 20 requests or a p99 over fewer than 100 is the largest sample, and is held to
100% (only a doubling or a halving counts).
"""

from __future__ import annotations

import math

BANDWIDTH, STORAGE, THROUGHPUT, LATENCY, MIB = "bandwidth", "storage", "throughput", "latency", "mib"

# kind → (default relative floor, what it covers); MIB is absolute (mebibytes), see ABSOLUTE
FLOORS: dict[str, tuple[float, str]] = {
    BANDWIDTH: (0.10, "GPU copy (D2D, H2D, D2H), host STREAM and all-reduce bandwidths, GB/s"),
    STORAGE: (0.25, "the O_DIRECT read of the weights, MB/s (a shared or cloud disk varies most)"),
    THROUGHPUT: (0.10, "output tokens/s at the knee of a saved sweep (the knee's own noise is 5%); "
                        "one sequence's decode tokens/s, its ceiling and their ratio (engine.roofline)"),
    LATENCY: (0.10, "an engine's TTFT / ITL / end-to-end percentile: 2/sqrt(requests), at least this"),
    MIB: (0.0, "GPU memory held by processes other than the engines: 1 GiB absolute"),
}
ABSOLUTE: dict[str, float] = {MIB: 1024.0}
MIN_FLOOR = 0.02  # a kernel that reports a spread under 1% is still not that repeatable across boots
LARGEST_SAMPLE_FLOOR = 1.0
MEASURED = tuple(FLOORS)


def floor_of(kind: str, spreads: tuple[float | None, ...] = (), samples: tuple[int | None, ...] = (),
             percentile: float | None = None) -> float:
    """The relative floor of a figure of ``kind``, from the two sides' spreads or sample counts."""
    default = FLOORS[kind][0]
    if kind == LATENCY:
        counts = [n for n in samples if isinstance(n, (int, float)) and n > 0]
        if not counts:
            return LARGEST_SAMPLE_FLOOR
        n = min(counts)
        if percentile is not None and percentile >= 0.99 and n < 100:
            return LARGEST_SAMPLE_FLOOR
        if percentile is not None and percentile >= 0.95 and n < 20:
            return LARGEST_SAMPLE_FLOOR
        return max(default, 2.0 / math.sqrt(n))
    given = [s for s in spreads if isinstance(s, (int, float)) and math.isfinite(s) and s >= 0]
    if given:
        return max(MIN_FLOOR, 2.0 * max(given))
    return default


def outside(kind: str, before: float, after: float, floor: float) -> bool:
    """Whether ``after`` differs from ``before`` by more than the floor."""
    if kind in ABSOLUTE:
        return abs(after - before) > ABSOLUTE[kind]
    if before == 0:
        return after != 0
    return abs(after / before - 1.0) > floor
