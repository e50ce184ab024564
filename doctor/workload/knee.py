"""The throughput knee of a load sweep (000 §4.3, domain.md "The throughput knee").

The method: a fixed prompt length, concurrency 1, 2, 4, ... (or the levels asked for); at each
level output tokens/s and latency percentiles (doctor/workload/levels.py). A level runs until
it has both its minimum of completed requests (MIN_LEVEL_REQUESTS, at least two per
concurrent request) and its minimum time; then the requests still in flight are cut off. Cut
requests are the client's doing: they are counted apart, never as errors or samples.

The knee is the lowest level whose throughput no higher level beats beyond the noise, judged
only once at least two higher levels were measured: the flat one, and one past it (a single
flat level can be a pause in a rise). The noise is MIN_RISE or twice the combined standard
error of the two levels' windows, whichever is larger. Levels that are short of their minimum,
mostly failed, or where the client itself could not keep up (its event loop late, its core
saturated) are left out of the judgement and the result says which and why. When throughput
still rises at the last level measured there is no knee, and no recommendation.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from doctor.i18n import t
from doctor.workload.levels import LevelStats, level_stats
from doctor.workload.loadgen import RequestTarget, LoadError, RequestResult, Workload, run_level
from doctor.workload.prompts import new_seed

SCHEMA = "llm-doctor/load/2"
# A rise smaller than this is noise: two sweeps of the same engine a minute apart on a quiet
# machine differ by 2-4%; the peers saw +8-15% from c=2 to c=4 on a 4-slot llama-server, which
# must count as a rise.
MIN_RISE = 0.05
# A level's minimum time: on a GPU engine a request takes a fraction of a second and 15 s
# gives hundreds of samples; on a CPU engine the minimum count decides.
LEVEL_SECONDS = 15.0
# Completed requests per level (and at least two per concurrent request): the throughput of
# fewer than two cycles of every slot is mostly the ramp. Percentiles of 10 are their
# maximum; --min-requests buys tails.
MIN_LEVEL_REQUESTS = 10
WARMUP_REQUESTS = 2  # uncounted, so the first level does not measure a cold engine


@dataclass(frozen=True, slots=True)
class Knee:
    status: str  # found | not-reached | no-data
    concurrency: int | None  # the knee (found) or the highest usable level (not-reached)
    output_tokens_per_s: float | None
    recommended_concurrency: int | None  # only when found
    recommended_max_num_seqs: int | None
    explanation: str
    left_out: tuple[str, ...] = ()  # levels not judged, each with its reason


@dataclass(frozen=True, slots=True)
class Sweep:
    levels: tuple[LevelStats, ...]
    seed: int
    warmup: tuple[RequestResult, ...]
    stopped: str  # why the sweep stopped


def min_requests_at(concurrency: int, min_requests: int) -> int:
    return max(min_requests, 2 * concurrency)


def _margin(low: LevelStats, high: LevelStats) -> float:
    """The relative rise from ``low`` to ``high`` that is still noise."""
    if low.throughput_se is None or high.throughput_se is None or not low.output_tokens_per_s:
        return MIN_RISE
    combined = math.hypot(low.throughput_se, high.throughput_se)
    return max(MIN_RISE, 2 * combined / low.output_tokens_per_s)


def _rises(low: LevelStats, high: LevelStats) -> bool:
    return high.output_tokens_per_s > low.output_tokens_per_s * (1 + _margin(low, high))


def _pct(low: LevelStats, high: LevelStats) -> str:
    change = high.output_tokens_per_s / low.output_tokens_per_s - 1 if low.output_tokens_per_s \
        else 0.0
    return f"{change:+.0%}"


def find_knee(levels: Sequence[LevelStats]) -> Knee:
    """The knee of a sweep: see the module docstring for the method and its margins."""
    usable = [lv for lv in levels if lv.unusable is None]
    left_out = tuple(f"c={lv.concurrency}: {lv.unusable}" for lv in levels if lv.unusable)
    if not usable:
        return Knee("no-data", None, None, None, None,
                    t("no level completed enough requests to judge"), left_out)
    for index, low in enumerate(usable[:-1]):
        above = usable[index + 1:]
        if any(_rises(low, high) for high in above):
            continue
        rest = ", ".join(f"c={h.concurrency} {h.output_tokens_per_s:g} ({_pct(low, h)})"
                         for h in above)
        noise = max(_margin(low, h) for h in above)
        if len(above) < 2:
            return Knee("not-reached", above[-1].concurrency, above[-1].output_tokens_per_s,
                        None, None,
                        t("throughput is flat from c={low} ({tps:g} tokens/s) to {rest}; one "
                          "more level must confirm it before it is a knee: add a higher one "
                          "to --levels", low=low.concurrency, tps=low.output_tokens_per_s,
                          rest=rest),
                        left_out)
        last = above[-1]
        return Knee(
            "found", low.concurrency, low.output_tokens_per_s, low.concurrency, low.concurrency,
            t("at c={low} throughput is {tps:g} tokens/s; higher levels give no more beyond "
              "the noise (±{noise:.0%}): {rest}, while e2e p50 grows from {first:g} to "
              "{last:g} ms", low=low.concurrency, tps=low.output_tokens_per_s, noise=noise,
              rest=rest, first=low.e2e.p50_ms, last=last.e2e.p50_ms), left_out)
    last = usable[-1]
    rise = t(" ({change} over c={before})", change=_pct(usable[-2], last),
             before=usable[-2].concurrency) if len(usable) > 1 else ""
    return Knee("not-reached", last.concurrency, last.output_tokens_per_s, None, None,
                t("throughput still rises at c={last}{rise}: no knee up to there; measure "
                  "higher levels (--levels or --max-concurrency)", last=last.concurrency,
                  rise=rise), left_out)


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


def cache_summary(levels: Sequence[LevelStats]) -> dict[str, Any]:
    """Prompt tokens the engine said it served from its cache, over the whole sweep."""
    said = [lv for lv in levels if lv.cached_prompt_tokens is not None]
    if not said:
        return {"reported": False, "cached_prompt_tokens": None, "prompt_tokens": None,
                "share": None}
    cached = sum(lv.cached_prompt_tokens or 0 for lv in said)
    prompt = sum(lv.reported_prompt_tokens or 0 for lv in said)
    return {"reported": True, "cached_prompt_tokens": cached, "prompt_tokens": prompt,
            "share": round(cached / prompt, 4) if prompt else None}


def sweep_json(base_url: str, settings: dict[str, Any], levels: Sequence[LevelStats],
               knee: Knee, measured_at: str, stopped: str = "") -> dict[str, Any]:
    return {"schema": SCHEMA, "endpoint": normal_url(base_url), "measured_at": measured_at,
            "settings": settings, "levels": [asdict(lv) for lv in levels],
            "prompt_cache": cache_summary(levels), "stopped": stopped, "knee": asdict(knee)}


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


def _too_long(concurrency: int, need: int, e2e_s: float | None, left_s: float) -> bool:
    """Even if all ``concurrency`` requests ran in parallel, each as fast as the last level's
    median, ``need`` of them would not finish in ``left_s``: the level cannot be judged."""
    return e2e_s is not None and need * e2e_s / concurrency > left_s


def sweep(endpoint: RequestTarget, workload: Workload, levels: Sequence[int], max_requests: int,
          max_seconds: float, seconds_per_level: float = LEVEL_SECONDS,
          min_requests: int = MIN_LEVEL_REQUESTS, seed: int | None = None,
          on_level: Callable[[str, int, LevelStats | None], None] | None = None) -> Sweep:
    """Run the levels in order until the knee is confirmed or a bound is reached.

    Bounds: ``max_requests`` in all and ``max_seconds`` of wall time; requests in flight
    when the time is out are cut off, so the sweep ends within it (give or take a connection
    close). Prompts are fresh (a new seed) unless ``seed`` is given, and never repeat
    within the sweep. ``on_level`` hears of each level's start, of its figures so far once
    it has run its minimum time without its minimum count (a first result in about
    ``seconds_per_level``, even on an engine of seconds per request), and of its end.
    Raises LoadError when every warm-up request failed.
    """
    seed = new_seed() if seed is None else seed
    started = time.monotonic()
    warm = run_level(endpoint, workload, 1, WARMUP_REQUESTS, min(30.0, max_seconds / 6),
                     seed=seed, cut=True)
    failed = [r for r in warm.results if not r.ok and not r.cut]
    if warm.results and len(failed) == len(warm.results):
        raise LoadError(t("{url}: every request failed: {error}", url=endpoint.base_url,
                          error=failed[0].error))
    e2e_s = max((r.e2e_s for r in warm.results if r.ok), default=None)
    index, used = warm.requests_used, len(warm.results)
    done: list[LevelStats] = []
    stopped = t("every level was measured")
    for concurrency in levels:
        left_s = max_seconds - (time.monotonic() - started)
        need = min_requests_at(concurrency, min_requests)
        if max_requests - used < need:
            stopped = t("--max-requests leaves {left} requests, fewer than the {need} that "
                        "c={concurrency} needs", left=max_requests - used, need=need,
                        concurrency=concurrency)
            break
        if left_s < 1.0 or _too_long(concurrency, need, e2e_s, left_s):
            stopped = t("the {left:.0f} s left of --max-seconds cannot complete the {need} "
                        "requests that c={concurrency} needs", left=max(left_s, 0), need=need,
                        concurrency=concurrency)
            break
        if on_level:
            on_level("start", concurrency, None)
        def progress(partial, c=concurrency, need=need) -> None:
            if on_level:
                on_level("progress", c, level_stats(partial, need))

        run = run_level(endpoint, workload, concurrency, max_requests - used, left_s,
                        seed=seed, first_index=index, min_requests=need,
                        min_seconds=min(seconds_per_level, left_s), cut=True,
                        on_progress=progress)
        index += run.requests_used
        used += len(run.results)
        done.append(level_stats(run, need))
        if done[-1].e2e.p50_ms:
            e2e_s = done[-1].e2e.p50_ms / 1000
        if on_level:
            on_level("done", concurrency, done[-1])
        if find_knee(done).status == "found":
            stopped = t("the knee was confirmed")
            break
        if done[-1].completed == 0 and done[-1].errors:
            stopped = t("every request at c={concurrency} failed", concurrency=concurrency)
            break
    return Sweep(tuple(done), seed, warm.results, stopped)
