"""Timed passes of a memory kernel: best of up to N within a time budget, the spread of the
passes' rates, and how busy the CPUs were with other work meanwhile.

Source: ``/proc/stat`` (all CPUs' busy ticks, world-readable) and ``getrusage`` (this
process's CPU time); units: seconds, and cores (CPU-seconds per second). No root needed.
Manual equivalent: ``vmstat 1`` (us+sy+st) beside ``ps -o pcpu -p <pid>`` while a STREAM
run goes.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

from probes.helpers.spread import spread

MIN_REPEATS = 2  # best of one pass is no best: a single interruption would be the figure
TOUCH_STEPS = 16  # steps of a first touch under a deadline, the clock read between them
TOUCH_SHARE = 0.5  # of what is left of the deadline: the first touch stops past it


@dataclass(frozen=True, slots=True)
class Passes:
    """How many timed passes to run: up to ``repeats``, stopping once ``budget_s`` is spent
    or before a pass that would end past ``until`` (a perf_counter time; None: no deadline)."""

    repeats: int
    budget_s: float
    until: float | None = None
    touch_floor: float = 0.0  # share of the arrays a first touch fills whatever the deadline


@dataclass(frozen=True, slots=True)
class Run:
    copy_best_s: float
    triad_best_s: float
    ran: int
    timed_s: float
    other_busy_cores: float | None
    valid: bool = False
    huge_pages: bool | None = None
    simd: str | None = None  # the vector loops that ran (the backend's own name for them)
    # (max - min) / median of the passes' rates (1 / seconds); None after one pass
    copy_spread: float | None = None
    triad_spread: float | None = None
    elements: int | None = None  # the arrays' elements the passes used (None: all allocated)


def _cpu_seconds() -> tuple[float | None, float]:
    """(busy CPU seconds of all CPUs from /proc/stat, this process's CPU seconds).

    /proc/stat's first line sums every CPU in USER_HZ ticks: user nice system idle iowait irq
    softirq steal (guest time is already inside user). Busy is all but idle and iowait; steal
    counts, since a vCPU the hypervisor gave to another guest is contention too.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    own = usage.ru_utime + usage.ru_stime
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
        ticks = [int(value) for value in fields[1:9]]
    except (OSError, ValueError):
        return None, own
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK"), own


def timed_passes(
    copy: Callable[[], None], triad: Callable[[], None], passes: Passes, sync: Callable[[], None]
) -> Run:
    """Timed (copy, triad) passes until ``passes`` says stop; the fastest of each kernel, and
    the spread of each kernel's rates over the passes."""
    copy_s: list[float] = []
    triad_s: list[float] = []
    minimum = min(MIN_REPEATS, passes.repeats)
    sync()
    busy_before, own_before = _cpu_seconds()
    first = time.perf_counter()
    ran = 0
    while ran < passes.repeats:
        # perf_counter is monotonic and sub-microsecond; a pass here takes milliseconds.
        sync()
        start = time.perf_counter()
        copy()
        sync()
        middle = time.perf_counter()
        triad()
        sync()
        end = time.perf_counter()
        copy_s.append(middle - start)
        triad_s.append(end - middle)
        ran += 1
        # The next pass takes about as long as this one: stop before it ends past the deadline.
        late = passes.until is not None and end + (end - start) > passes.until
        if ran >= minimum and (end - first >= passes.budget_s or late):
            break
    timed_s = time.perf_counter() - first
    busy_after, own_after = _cpu_seconds()
    other = None
    if busy_before is not None and busy_after is not None:
        # Ticks are 10 ms: a short window can read a little under this process's own time.
        other_s = (busy_after - busy_before) - (own_after - own_before)
        other = round(max(other_s, 0.0) / timed_s, 2)
    return Run(min(copy_s), min(triad_s), ran, timed_s, other,
               copy_spread=_rate_spread(copy_s), triad_spread=_rate_spread(triad_s))


def _rate_spread(seconds: list[float]) -> float | None:
    """The spread of the rates (bytes are the same every pass: rate is 1 / seconds)."""
    return spread([1.0 / s for s in seconds if s > 0])


def passes_for(repeats: int, budget_s: float, deadline_s: float | None, started: float,
               touch_floor: float = 0.0) -> Passes:
    """Passes whose deadline is ``deadline_s`` after ``started`` (a perf_counter time)."""
    until = None if deadline_s is None else started + deadline_s
    return Passes(repeats, budget_s, until, min(max(touch_floor, 0.0), 1.0))


def first_touch(fill, bounds: list[tuple[int, int]], passes: Passes,
                steps: int = TOUCH_STEPS) -> list[tuple[int, int]]:
    """``fill(parts)`` over every [start, stop) of ``bounds`` (one per thread), a ``steps``-th
    of each at a time; stops after the step that ends past TOUCH_SHARE of the deadline (none:
    fills all), once ``passes.touch_floor`` of each is filled. Returns the [start, filled) of
    each: what the passes then use."""
    until = None
    if passes.until is not None:
        began = time.perf_counter()
        until = began + (passes.until - began) * TOUCH_SHARE
    filled = [start for start, _ in bounds]
    for step in range(1, steps + 1):
        ends = [start + (stop - start) * step // steps for start, stop in bounds]
        fill(list(zip(filled, ends)))
        filled = ends
        if until is not None and step >= passes.touch_floor * steps and time.perf_counter() >= until:
            break
    return [(start, end) for (start, _), end in zip(bounds, filled)]


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory (VmHWM of /proc/self/status: its own since exec,
    where getrusage's ru_maxrss also holds the peak of the process that spawned it)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
