"""One concurrency level of a load sweep, summarised: throughput with its spread, latency
percentiles with the samples behind them, what the engine served from its prompt cache, and
whether the client itself kept up.

Definitions (the ``load`` command's help and the README say the same):

- throughput: output tokens streamed between the level's first and last completed request,
  over that time. Starting at a completion leaves out the level's ramp (and what the engine
  still does for the requests cut at the end of the level before); ending at one, rather than
  mid-way through the next requests' prefill, keeps a fixed-length workload's synchronised
  cycles whole. The spread is the same figure in equal windows of at least one request's
  duration.
- ``itl_pooled``: percentiles of every gap between streamed tokens, all requests pooled (a
  long request weighs more; a stall shows in p99).
- ``itl_per_request_mean``: percentiles of each request's mean inter-token latency,
  (e2e - TTFT) / (output tokens - 1), as guidellm and aiperf report it.
- Percentiles are nearest-rank over completed requests only: with fewer than 20 samples p95
  is the largest one, with fewer than 100 p99 is, and the record says so.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from doctor.i18n import t
from doctor.workload.loadgen import LevelRun, RequestResult

# The client is late when its event loop wakes, on average, later than this share of a
# request's median duration: it then sends each next request about that late, the engine's
# slot idles meanwhile, and the level measures the client. 5% is the smallest loss a sweep
# can tell from its own noise (knee.MIN_RISE).
LATE_SHARE = 0.05
# One event-loop thread using this share of a core has none left to read streams on time.
CPU_SATURATED = 0.90
MAX_WINDOWS = 10


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Nearest-rank percentiles of ``samples`` values, in milliseconds (None: no samples)."""

    samples: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    p95_is_max: bool  # fewer than 20 samples: p95 is just the largest
    p99_is_max: bool  # fewer than 100 samples: p99 is just the largest


@dataclass(frozen=True, slots=True)
class LevelStats:
    """One concurrency level of a sweep; times are client-side."""

    concurrency: int
    min_requests: int  # completed requests the level needed before it could close
    sent: int
    completed: int
    errors: int  # the engine failed them (HTTP error, reset, its own timeout)
    cut: int  # in flight when the client's time budget closed the level: not samples, not errors
    error_rate: float  # errors / (completed + errors)
    window_s: float  # first send -> close
    measured_from_s: float  # the throughput window: first completion ...
    measured_to_s: float  # ... to the last one before the close (seconds since the first send)
    closed_by: str  # enough | budget | requests (see loadgen.LevelRun)
    requests_per_s: float  # completed per second of the throughput window
    output_tokens_per_s: float
    throughput_windows: tuple[float, ...]  # tokens/s in each equal window: the spread
    throughput_se: float | None  # standard error of output_tokens_per_s; None under 3 windows
    in_flight_mean: float  # requests in flight, averaged over the throughput window
    prompt_tokens_mean: float | None  # from the server's usage, when it reports it
    cached_prompt_tokens: int | None  # served from the engine's prompt cache, as it said
    reported_prompt_tokens: int | None  # prompt tokens of the requests that said so
    cached_share: float | None  # their ratio; None: the engine does not report it
    ttft: Percentiles
    itl_pooled: Percentiles
    itl_per_request_mean: Percentiles
    e2e: Percentiles
    client_lag_mean_ms: float | None  # how late the client's event loop woke, on average
    client_lag_p95_ms: float | None  # ... and at p95: the error in every client-side time
    client_cpu_share: float  # of one core, the client's event-loop thread
    client_late: str | None  # why the client could not keep up; None when it could
    unusable: str | None  # why the knee must not be judged from this level; None: usable
    first_error: str | None


def percentiles(values_s: Sequence[float]) -> Percentiles:
    """Nearest-rank p50/p95/p99 of seconds, in ms."""
    n = len(values_s)
    if not n:
        return Percentiles(0, None, None, None, False, False)
    ordered = sorted(values_s)

    def rank(q: float) -> float:
        return round(ordered[min(n - 1, max(0, math.ceil(q * n) - 1))] * 1000, 2)

    return Percentiles(n, rank(0.50), rank(0.95), rank(0.99), math.ceil(0.95 * n) >= n,
                       math.ceil(0.99 * n) >= n)


def describe(p: Percentiles) -> str:
    """``p50 40 / p95 61 / p99 61 ms (p99 = max of 12)``, for the terminal."""
    if not p.samples:
        return t("no samples")
    text = f"{p.p50_ms:g}/{p.p95_ms:g}/{p.p99_ms:g}"
    if p.p95_is_max:
        return t("{text} (p95 = p99 = max of {samples})", text=text, samples=p.samples)
    if p.p99_is_max:
        return t("{text} (p99 = max of {samples})", text=text, samples=p.samples)
    return f"{text} (n={p.samples})"


def _weights(result: RequestResult) -> float:
    """Tokens per streamed event: the usage count spread over the events that carried it."""
    if result.ok and result.stamps_s and result.output_tokens:
        return result.output_tokens / len(result.stamps_s)
    return 1.0


def throughput(results: Sequence[RequestResult], start_s: float, end_s: float,
               windows: int) -> tuple[float, tuple[float, ...]]:
    """Output tokens/s over (start_s, end_s] and in ``windows`` equal parts of it; tokens
    streamed outside it (by any request, cut, finished or not) are not counted."""
    bins = [0.0] * windows
    span = end_s - start_s
    width = span / windows
    for result in results:
        weight = _weights(result)
        for stamp in result.stamps_s:
            if start_s < stamp <= end_s:
                bins[min(windows - 1, int((stamp - start_s) / width))] += weight
    return sum(bins) / span, tuple(round(b / width, 2) for b in bins)


def _in_flight(results: Sequence[RequestResult], start_s: float, end_s: float) -> float:
    busy = sum(max(0.0, min(r.started_s + r.e2e_s, end_s) - max(r.started_s, start_s))
               for r in results)
    return busy / (end_s - start_s)


def _measured(ok: Sequence[RequestResult], window_s: float,
              e2e_p50_s: float) -> tuple[float, float]:
    """(from, to): the first and last completion inside the window when they are at least
    half a request apart, else the whole window (requests that all ended together, as four
    slots' first requests do, span no cycle to measure)."""
    ends = sorted(r.started_s + r.e2e_s for r in ok if r.started_s + r.e2e_s <= window_s)
    if len(ends) < 2 or ends[-1] - ends[0] < max(0.5 * e2e_p50_s, 1e-3):
        return 0.0, window_s
    return ends[0], ends[-1]


def _cache(ok: Sequence[RequestResult]) -> tuple[int | None, int | None, float | None]:
    said = [r for r in ok if r.cached_tokens is not None and r.prompt_tokens]
    if not said:
        return None, None, None
    cached = sum(r.cached_tokens or 0 for r in said)
    prompt = sum(r.prompt_tokens or 0 for r in said)
    return cached, prompt, round(cached / prompt, 4)


def _late(lag_mean_ms: float | None, cpu_share: float, e2e_p50_ms: float | None) -> str | None:
    if cpu_share >= CPU_SATURATED:
        return t("the client's event loop used {share:.0%} of a core", share=cpu_share)
    if lag_mean_ms is not None and e2e_p50_ms and lag_mean_ms > LATE_SHARE * e2e_p50_ms:
        return t("its event loop woke {lag:.1f} ms late on average, over {share:.0%} of a "
                 "request's {e2e:g} ms: the machine leaves the client too little CPU",
                 lag=lag_mean_ms, share=LATE_SHARE, e2e=e2e_p50_ms)
    return None


def _unusable(completed: int, errors: int, error_rate: float, min_requests: int,
              closed_by: str, late: str | None, first_error: str | None) -> str | None:
    if not completed:
        return t("no request completed ({errors} failed: {error})", errors=errors,
                 error=first_error) if errors else t("no request completed within the time left")
    if error_rate >= 0.5:
        return t("{errors} of {total} requests failed: {error}", errors=errors,
                 total=completed + errors, error=first_error)
    if completed < min_requests:
        if closed_by == "budget":
            return t("only {completed} of the {need} completed requests it needs (the time left "
                     "ran out)", completed=completed, need=min_requests)
        return t("only {completed} of the {need} completed requests it needs (--max-requests "
                 "ran out)", completed=completed, need=min_requests)
    return late


def level_stats(run: LevelRun, min_requests: int = 0) -> LevelStats:
    """Summarise one level of ``run``; ``min_requests`` completed ones make it usable."""
    results = run.results
    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok and not r.cut]
    judged = len(ok) + len(errors)
    e2e = percentiles([r.e2e_s for r in ok])
    cycle_s = (e2e.p50_ms or 0) / 1000
    start, end = _measured(ok, run.window_s, cycle_s)
    span = end - start
    count = max(1, min(MAX_WINDOWS, int(span / max(cycle_s, 1.0, span / MAX_WINDOWS))))
    tokens_per_s, spread = throughput(results, start, end, count)
    se = statistics.stdev(spread) / math.sqrt(count) if count >= 3 else None
    lag = percentiles(run.client_lag_s).p95_ms if run.client_lag_s else None
    lag_mean = round(statistics.fmean(run.client_lag_s) * 1000, 2) if run.client_lag_s else None
    cpu_share = run.client_cpu_s / run.window_s
    late = _late(lag_mean, cpu_share, e2e.p50_ms)
    error_rate = round(len(errors) / judged, 4) if judged else 0.0
    first_error = errors[0].error if errors else None
    prompts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    cached, reported, share = _cache(ok)
    return LevelStats(
        concurrency=run.concurrency, min_requests=min_requests, sent=len(results),
        completed=len(ok), errors=len(errors), cut=sum(r.cut for r in results),
        error_rate=error_rate, window_s=round(run.window_s, 3), measured_from_s=round(start, 3),
        measured_to_s=round(end, 3), closed_by=run.closed_by,
        requests_per_s=round(sum(start < r.started_s + r.e2e_s <= end for r in ok) / span, 3),
        output_tokens_per_s=round(tokens_per_s, 2), throughput_windows=spread,
        throughput_se=None if se is None else round(se, 2),
        in_flight_mean=round(_in_flight(results, start, end), 2),
        prompt_tokens_mean=round(statistics.fmean(prompts), 1) if prompts else None,
        cached_prompt_tokens=cached, reported_prompt_tokens=reported, cached_share=share,
        ttft=percentiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        itl_pooled=percentiles([gap for r in ok for gap in r.itl_s]),
        itl_per_request_mean=percentiles([m for r in ok if (m := r.mean_itl_s) is not None]),
        e2e=e2e, client_lag_mean_ms=lag_mean, client_lag_p95_ms=lag, client_cpu_share=round(cpu_share, 3),
        client_late=late,
        unusable=_unusable(len(ok), len(errors), error_rate, min_requests, run.closed_by, late,
                           first_error),
        first_error=first_error)
