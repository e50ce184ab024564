"""Per-level load statistics and the throughput knee (000 §4.3, domain.md "The throughput knee").

The method: a fixed prompt length, concurrency 1, 2, 4, ...; at each level the output
tokens/s and the latency percentiles. The knee is the lowest concurrency that already gives
(nearly) the highest throughput measured, provided a higher level was measured and its
latency grew: beyond it more concurrency only adds queueing. When throughput still rises at
the last level measured, the knee was not reached and the bound is reported instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from doctor.workload.loadgen import Endpoint, RequestResult, Workload, run_requests

# A level within 10% of the best throughput counts as "as good": run-to-run noise of a
# sweep on a shared machine is about 5%, so a smaller margin would chase noise.
THROUGHPUT_TOLERANCE = 0.10
# Latency must grow by a fifth past the knee for it to be a knee rather than a plateau
# reached because the engine ran out of work to batch.
LATENCY_GROWTH = 0.20
# Each level is time-boxed rather than counted: on a CPU engine a request takes seconds, on a
# GPU milliseconds; 15 s gives tens of samples per level on both and a sweep of 1..64 fits
# in about two minutes.
LEVEL_SECONDS = 15.0
# ...but no fewer than this many requests per level when the time allows: on a CPU engine
# (seconds per request) 15 s would give a handful, and a p95 of five samples is their max.
MIN_LEVEL_REQUESTS = 12


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None


@dataclass(frozen=True, slots=True)
class LevelStats:
    """One concurrency level of a sweep; times are client-side, in milliseconds."""

    concurrency: int
    requests: int
    errors: int
    error_rate: float
    wall_s: float
    requests_per_s: float
    output_tokens_per_s: float
    prompt_tokens_mean: float | None  # from the server's usage, when it reports it
    ttft: Percentiles
    itl: Percentiles
    e2e: Percentiles
    first_error: str | None


@dataclass(frozen=True, slots=True)
class Knee:
    status: str  # found | not-reached | no-data
    concurrency: int | None  # the knee (found) or the highest level measured (not-reached)
    output_tokens_per_s: float | None
    recommended_concurrency: int | None
    recommended_max_num_seqs: int | None
    explanation: str


def percentiles(values_s: Sequence[float]) -> Percentiles:
    """Nearest-rank p50/p95/p99 of seconds, in ms; None for no values."""
    if not values_s:
        return Percentiles(None, None, None)
    ordered = sorted(values_s)

    def rank(q: float) -> float:
        index = min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))
        return round(ordered[index] * 1000, 2)

    return Percentiles(rank(0.50), rank(0.95), rank(0.99))


def level_stats(concurrency: int, results: Sequence[RequestResult]) -> LevelStats:
    """Summarise one level. Its wall time runs from the first send to the last finish."""
    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok]
    wall = max((r.started_s + r.e2e_s for r in results), default=0.0) - min(
        (r.started_s for r in results), default=0.0)
    wall = max(wall, 1e-9)
    prompts = [r.prompt_tokens for r in ok if isinstance(r.prompt_tokens, int)]
    return LevelStats(
        concurrency=concurrency, requests=len(results), errors=len(errors),
        error_rate=round(len(errors) / len(results), 4) if results else 0.0,
        wall_s=round(wall, 3), requests_per_s=round(len(ok) / wall, 3),
        output_tokens_per_s=round(sum(r.output_tokens for r in ok) / wall, 2),
        prompt_tokens_mean=round(statistics.fmean(prompts), 1) if prompts else None,
        ttft=percentiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        itl=percentiles([gap for r in ok for gap in r.itl_s]),
        e2e=percentiles([r.e2e_s for r in ok]),
        first_error=errors[0].error if errors else None)


def _latency(level: LevelStats) -> float | None:
    return level.e2e.p95_ms


def find_knee(levels: Sequence[LevelStats]) -> Knee:
    """The knee of a sweep: see the module docstring for the method and its margins."""
    usable = [lv for lv in levels if lv.requests and lv.error_rate < 0.5]
    if not usable:
        return Knee("no-data", None, None, None, None,
                    "no level completed enough requests without errors")
    best = max(lv.output_tokens_per_s for lv in usable)
    knee = next(lv for lv in usable if lv.output_tokens_per_s >= (1 - THROUGHPUT_TOLERANCE) * best)
    base = _latency(knee)
    grew = [lv for lv in usable if lv.concurrency > knee.concurrency and base is not None
            and (_latency(lv) or 0.0) >= (1 + LATENCY_GROWTH) * base]
    if not grew:
        last = usable[-1]
        return Knee("not-reached", last.concurrency, last.output_tokens_per_s, last.concurrency,
                    last.concurrency,
                    f"throughput still rises or latency stays flat up to concurrency "
                    f"{last.concurrency}: raise --max-concurrency to find the knee")
    past = grew[0]
    return Knee(
        "found", knee.concurrency, knee.output_tokens_per_s, knee.concurrency, knee.concurrency,
        f"at concurrency {knee.concurrency} throughput is {knee.output_tokens_per_s:g} tokens/s "
        f"(best {best:g}); at {past.concurrency} it is {past.output_tokens_per_s:g} while p95 "
        f"latency grows from {base:g} to {_latency(past):g} ms")


def state_dir() -> Path:
    """Where measured knees are kept: $XDG_STATE_HOME/llm-doctor, else ~/.local/state/llm-doctor."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "llm-doctor"


def normal_url(base_url: str) -> str:
    """One spelling per endpoint: no trailing slash, localhost as 127.0.0.1."""
    return base_url.rstrip("/").replace("://localhost:", "://127.0.0.1:")


def knee_path(base_url: str) -> Path:
    """The saved sweep of one endpoint: knee-<first 12 hex of sha256(base URL)>.json."""
    digest = hashlib.sha256(normal_url(base_url).encode()).hexdigest()[:12]
    return state_dir() / f"knee-{digest}.json"


def sweep_json(base_url: str, settings: dict[str, Any], levels: Sequence[LevelStats],
               knee: Knee, measured_at: str) -> dict[str, Any]:
    return {"schema": "llm-doctor/load/1", "endpoint": normal_url(base_url),
            "measured_at": measured_at, "settings": settings,
            "levels": [asdict(lv) for lv in levels], "knee": asdict(knee)}


def save_sweep(document: dict[str, Any]) -> Path:
    """Write the sweep where engine.load finds it later (atomically)."""
    from doctor.output import write_atomic

    path = knee_path(document["endpoint"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(str(path), json.dumps(document, indent=2) + "\n")
    return path


def concurrency_levels(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... and the bound itself when it is not a power of two."""
    levels, c = [], 1
    while c < max_concurrency:
        levels.append(c)
        c *= 2
    return levels + [max_concurrency]


def level_seconds(previous_e2e_s: float, previous_concurrency: int, left_s: float,
                  last_level: bool) -> float:
    """How long the next level runs: LEVEL_SECONDS, longer when ``MIN_LEVEL_REQUESTS``
    would not finish in it, never more than half the time left (all of it for the last).

    At concurrency c a saturated engine finishes a request every e2e(c)/c seconds, and
    e2e(c) <= e2e(prev) * c/prev when it only queues, so MIN requests take at most
    MIN * e2e(prev) / prev seconds.
    """
    wanted = MIN_LEVEL_REQUESTS * previous_e2e_s / previous_concurrency
    return min(max(LEVEL_SECONDS, wanted), left_s if last_level else left_s / 2)


def sweep(endpoint: Endpoint, workload: Workload, max_concurrency: int, max_requests: int,
          max_seconds: float, on_level: Callable[[str, int, LevelStats | None], None] | None = None,
          ) -> list[LevelStats]:
    """Run levels 1, 2, 4, ... until the knee is confirmed or a bound is reached.

    Bounds: ``max_requests`` in all and ``max_seconds`` of wall time. Each level sends
    requests back to back for ``level_seconds()`` and at most an equal share of the requests
    left; requests in flight then finish within their timeout. Two uncounted requests
    first, so the first level does not measure a cold engine (and gives its first estimate
    of a request's duration).
    """
    started = time.monotonic()
    warm = run_requests(endpoint, workload, 1, 2, min(30.0, max_seconds / 6))
    e2e_s, e2e_concurrency = max((r.e2e_s for r in warm), default=1.0), 1
    levels: list[LevelStats] = []
    plan = concurrency_levels(max_concurrency)
    used = len(warm)
    for index, concurrency in enumerate(plan):
        left_s = max_seconds - (time.monotonic() - started)
        left_requests = max_requests - used
        if left_s < 1.0 or left_requests < concurrency:
            break
        share_s = level_seconds(e2e_s, e2e_concurrency, left_s, index == len(plan) - 1)
        count = max(left_requests // (len(plan) - index), concurrency)
        if on_level:
            on_level("start", concurrency, None)
        timed = replace(workload, timeout_s=min(workload.timeout_s, max(left_s - share_s, share_s)))
        results = run_requests(endpoint, timed, concurrency, count, share_s, seed=concurrency)
        used += len(results)
        levels.append(level_stats(concurrency, results))
        if levels[-1].e2e.p50_ms:
            e2e_s, e2e_concurrency = levels[-1].e2e.p50_ms / 1000, concurrency
        if on_level:
            on_level("done", concurrency, levels[-1])
        if find_knee(levels).status == "found" or levels[-1].error_rate >= 0.5:
            break
    return levels
