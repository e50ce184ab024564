"""Two scrapes of one engine's /metrics → one normalised record, whatever the engine.

Gauges are read from the second scrape; counters become rates over the interval between
the scrapes; latency percentiles come from the histograms' buckets as Prometheus'
``histogram_quantile`` computes them: over the observations made between the scrapes when
there were any, else over everything since the engine started (``latency_window`` says
which). A figure the engine does not export is None, and ``absent`` says why; so is a
figure the page holds but that is no figure (NaN or infinite samples, a negative count, a
share outside 0-1): every figure passes doctor/values.py's checks before it is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from probes.helpers.promtext import Page, bucket_delta, observed, quantile
from doctor.values import fraction, non_negative
from probes.helpers import engine_names as N
from probes.helpers.engine_features import FeatureFigures, features
from probes.helpers.engine_kv import KvFigures, kv as kv_figures

QUANTILES = (0.5, 0.95, 0.99)
# vllm:cache_config_info labels worth a report (the rest are allocator internals).
CACHE_CONFIG_KEPT = ("block_size", "cache_dtype", "gpu_memory_utilization", "enable_prefix_caching",
                     "num_gpu_blocks", "num_cpu_blocks", "kv_cache_size_tokens",
                     "kv_cache_max_concurrency", "sliding_window", "kv_cache_layout")
LENGTH_POINTS = tuple((i + 0.5) / 40 for i in range(40))  # the request-length mix, 40 points


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    endpoint: str  # the /metrics URL (credentials removed)
    kind: str  # vllm, sglang, tgi, llama.cpp, triton, tensorrt-llm
    interval_s: float  # between the two scrapes
    kv_cache_use: float | None  # 0-1, share of the KV cache in use
    requests_running: float | None
    requests_waiting: float | None
    preemptions_total: float | None  # since start (SGLang: retractions)
    preemptions_in_window: float | None  # between the scrapes
    preemptions_per_s: float | None
    prefix_cache_hit_rate: float | None  # 0-1
    prompt_tokens_per_s: float | None
    generation_tokens_per_s: float | None
    latency_window: str | None  # "between scrapes" | "since start"
    latency_requests: float | None  # requests the TTFT (else e2e) percentiles cover
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p95_s: float | None
    itl_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p95_s: float | None
    e2e_p99_s: float | None
    request_tokens_p99: float | None  # prompt + generated tokens of a request, p99
    request_tokens_mix: tuple[float, ...]  # 40 quantiles of the request length, tokens
    iteration_tokens_p95: float | None  # tokens per engine step (vLLM), p95
    cache_config: dict[str, str]  # vllm:cache_config_info labels (block_size, num_gpu_blocks…)
    absent: tuple[str, ...]  # "figure: reason" for each figure the engine does not export
    # the first scrape's gauges: a count held the same over the window is pinned at a cap
    requests_running_before: float | None = None
    requests_waiting_before: float | None = None
    # work done between the scrapes: requests finished (vLLM, SGLang, TGI counters), and
    # prompt + generated tokens (every engine; llama.cpp counts no requests)
    requests_in_window: float | None = None
    tokens_in_window: float | None = None
    # speculative decoding, LoRA and structured output series (probes/helpers/engine_features.py),
    # judged by engine.features; None when the page holds none of them
    features: FeatureFigures | None = None
    # NIXL KV-transfer and KV-offload series (probes/helpers/engine_kv.py), judged by
    # engine.kv; None when the page holds none of them
    kv: KvFigures | None = None
    # Means (a histogram's _sum over its _count) over the same window as ``means_window``:
    # the time to first token and its parts (vLLM: queue wait, prefill; SGLang: queue wait),
    # the gap between tokens, and a request's prompt and generated tokens (vLLM)
    ttft_mean_s: float | None = None
    queue_mean_s: float | None = None
    prefill_mean_s: float | None = None
    itl_mean_s: float | None = None
    prompt_tokens_mean: float | None = None
    generation_tokens_mean: float | None = None
    means_window: str | None = None  # "between scrapes" | "since start" (TTFT's, else ITL's)
    # engine steps between the scrapes: llama.cpp's llama_decode() calls (llamacpp:n_decode_total),
    # vLLM's steps (vllm:iteration_tokens_total's _count); None where the page lacks them
    steps_in_window: float | None = None


def _pick(table: dict[str, tuple[str, ...]], kind: str, page: Page, suffix: str = "") -> str | None:
    for name in table.get(N.family(kind), ()):
        if page.has(name + suffix):
            return name
    return None


class _Reader:
    """Reads figures for one engine from two pages, collecting reasons for absent ones."""

    def __init__(self, kind: str, first: Page, second: Page, interval_s: float) -> None:
        self.kind, self.first, self.second, self.interval_s = kind, first, second, interval_s
        self.absent: list[str] = []

    def missing(self, figure: str, what: str) -> None:
        self.absent.append(f"{figure}: {N.absent_reason(self.kind, what)}")

    def gauge(self, figure: str, table: dict, what: str, mean: bool = False) -> float | None:
        name = _pick(table, self.kind, self.second)
        if name is None:
            self.missing(figure, what)
            return None
        values = self.second.values(name)
        if not values:
            self.absent.append(f"{figure}: {name} holds no finite value (NaN or infinite)")
            return None
        return sum(values) / len(values) if mean else sum(values)

    def counter(self, figure: str, table: dict, what: str) -> tuple[float | None, float | None]:
        """(total, increase between the scrapes); increase None after a restart."""
        name = _pick(table, self.kind, self.second)
        if name is None:
            self.missing(figure, what)
            return None, None
        after, before = self.second.total(name), self.first.total(name)
        if after is None or before is None:
            self.absent.append(f"{figure}: {name} holds no finite value (NaN or infinite) "
                               f"in the {'second' if after is None else 'first'} scrape")
            return after, None
        if after < before:  # a counter never goes down but when its engine restarts
            self.absent.append(f"{figure}: {name} went from {before:g} to {after:g} between "
                               "the scrapes (the engine restarted): no rate over them")
            return after, None
        return after, after - before

    def rate(self, figure: str, table: dict, what: str) -> float | None:
        _, increase = self.counter(figure, table, what)
        return increase / self.interval_s if increase is not None and self.interval_s > 0 else None

    def histogram(self, figure: str, table: dict, what: str):
        """(buckets, window) for a histogram: the delta when it moved, else cumulative."""
        name = _pick(table, self.kind, self.second, "_bucket")
        if name is None:
            self.missing(figure, what)
            return (), None
        after = self.second.buckets(name)
        delta = bucket_delta(self.first.buckets(name), after)
        if observed(delta) > 0:
            return delta, "between scrapes"
        return after, ("since start" if observed(after) > 0 else None)


def _percentiles(buckets) -> tuple[float | None, float | None, float | None]:
    p50, p95, p99 = (quantile(q, buckets) for q in QUANTILES)
    return p50, p95, p99


def normalise(kind: str, endpoint: str, first: Page, second: Page,
              interval_s: float) -> EngineMetrics:
    """One record from the pages scraped ``interval_s`` apart (first, then second)."""
    r = _Reader(kind, first, second, interval_s)
    kv = _kv_use(r)
    preempt_total, preempt_window = r.counter("preemptions", N.PREEMPTIONS,
                                              "preemption or retraction counter")
    ttft, ttft_window = r.histogram("ttft", N.TTFT, "time-to-first-token histogram")
    itl, _ = r.histogram("inter_token", N.INTER_TOKEN, "inter-token latency histogram")
    e2e, e2e_window = r.histogram("e2e", N.E2E, "end-to-end latency histogram")
    lengths = _lengths(r)
    iteration, _ = r.histogram("iteration_tokens", N.ITERATION_TOKENS, "tokens-per-step histogram")
    window_buckets = ttft if observed(ttft) else e2e
    means = _means(r)  # before absent is read: it adds to it
    return _judgeable(EngineMetrics(
        endpoint=endpoint, kind=kind, interval_s=round(interval_s, 3), kv_cache_use=kv,
        requests_running=_requests(r, "running", "active", N.RUNNING),
        requests_waiting=_requests(r, "waiting", "waiting", N.WAITING),
        requests_running_before=_before(r, N.RUNNING),
        requests_waiting_before=_before(r, N.WAITING),
        requests_in_window=_increase(r, "requests_done", N.REQUESTS_DONE, "finished-requests counter"),
        tokens_in_window=_tokens_in_window(r),
        steps_in_window=_steps(r),
        preemptions_total=preempt_total, preemptions_in_window=preempt_window,
        preemptions_per_s=(preempt_window / interval_s
                           if preempt_window is not None and interval_s > 0 else None),
        prefix_cache_hit_rate=_prefix_hit_rate(r),
        prompt_tokens_per_s=r.rate("prompt_tokens", N.PROMPT_TOKENS, "prompt-token counter"),
        generation_tokens_per_s=r.rate("generation_tokens", N.GENERATION_TOKENS,
                                       "generated-token counter"),
        latency_window=ttft_window or e2e_window,
        latency_requests=observed(window_buckets) or None,
        **_named("ttft", _percentiles(ttft)), **_named("itl", _percentiles(itl)),
        **_named("e2e", _percentiles(e2e)),
        request_tokens_p99=lengths[-1] if lengths else None,
        request_tokens_mix=lengths,
        iteration_tokens_p95=quantile(0.95, iteration) if iteration else None,
        # vLLM writes a setting it leaves unset as Python's "None": absent, so left out
        cache_config={k: v for k, v in (second.first_labels("vllm:cache_config_info") or {}).items()
                      if k in CACHE_CONFIG_KEPT and v != "None"},
        features=features(first, second), kv=kv_figures(first, second),
        **means, absent=tuple(r.absent)))


SHARES = ("kv_cache_use", "prefix_cache_hit_rate")  # 0-1; every other figure is >= 0


def _judgeable(m: EngineMetrics) -> EngineMetrics:
    """The record with every figure that is no figure (NaN, infinite, a negative count, a
    share outside 0-1) made None, and ``absent`` saying what the page held instead."""
    changes: dict = {}
    absent = list(m.absent)
    for f in fields(m):
        value = getattr(m, f.name)
        if f.name in ("interval_s", "request_tokens_mix") or not isinstance(value, float):
            continue
        kept = fraction(value) if f.name in SHARES else non_negative(value)
        if kept is None:
            changes[f.name] = None
            absent.append(f"{f.name}: the page gives {value:g}, not "
                          + ("a share from 0 to 1" if f.name in SHARES else "a figure >= 0"))
    mix = m.request_tokens_mix
    if any(non_negative(v) is None for v in mix):
        changes.update(request_tokens_mix=(), request_tokens_p99=None)
        absent.append("request_tokens_mix: the length histograms give no finite lengths")
    return replace(m, **changes, absent=tuple(absent)) if changes else m


def _named(prefix: str, values: tuple) -> dict[str, Any]:
    # Any: unpacked into EngineMetrics, whose str fields mypy cannot tell from these keys
    return {f"{prefix}_p{p}_s": None if v is None else round(v, 6)
            for p, v in zip((50, 95, 99), values)}


def _requests(r: _Reader, figure: str, trt_type: str, table: dict) -> float | None:
    if r.kind == "tensorrt-llm":  # one gauge family, the figure in a label
        value = r.second.total("nv_trt_llm_request_metrics", request_type=trt_type)
        if value is not None:
            return value
    return r.gauge(figure, table, f"{figure}-requests gauge")


def _before(r: _Reader, table: dict) -> float | None:
    """A requests gauge in the first scrape (absent there: None, said for the second)."""
    name = _pick(table, r.kind, r.first)
    values = r.first.values(name) if name is not None else []
    return sum(values) if values else None


def _mean(r: _Reader, table: dict, figure: str = "", what: str = "") -> tuple[float | None, str | None]:
    """(a histogram's mean, its window): ``_sum`` over ``_count`` between the scrapes when
    requests were observed there, else since the engine started; (None, None) with no
    observation. ``what`` names the histogram where an absent one must be said (the
    percentiles' histograms said it already)."""
    name = _pick(table, r.kind, r.second, "_count")
    if name is None:
        if what:
            r.missing(figure, what)
        return None, None
    total, count = r.second.total(f"{name}_sum"), r.second.total(f"{name}_count")
    before, before_count = r.first.total(f"{name}_sum"), r.first.total(f"{name}_count")
    if total is None or count is None:
        return None, None
    if before is not None and before_count is not None and count > before_count and total >= before:
        return (total - before) / (count - before_count), "between scrapes"
    return (total / count, "since start") if count > 0 else (None, None)


def _means(r: _Reader) -> dict:
    ttft, window = _mean(r, N.TTFT)
    itl, itl_window = _mean(r, N.INTER_TOKEN)
    queue, _ = _mean(r, N.QUEUE_TIME, "queue_time", "queue-time histogram")
    prefill, _ = _mean(r, N.PREFILL_TIME, "prefill_time", "prefill-time histogram")
    prompt, _ = _mean(r, N.PROMPT_LENGTH)
    generated, _ = _mean(r, N.GENERATION_LENGTH)
    rounded = {k: None if v is None else round(v, 6) for k, v in (
        ("ttft_mean_s", ttft), ("queue_mean_s", queue), ("prefill_mean_s", prefill),
        ("itl_mean_s", itl))}
    return {**rounded, "prompt_tokens_mean": None if prompt is None else round(prompt, 1),
            "generation_tokens_mean": None if generated is None else round(generated, 1),
            "means_window": window or itl_window}


def _increase(r: _Reader, figure: str, table: dict, what: str) -> float | None:
    return r.counter(figure, table, what)[1]


def _tokens_in_window(r: _Reader) -> float | None:
    """Prompt + generated tokens between the scrapes, from the counters the engine has
    (read again, quietly: rate() said why one is absent); None when it has neither."""
    quiet = _Reader(r.kind, r.first, r.second, r.interval_s)
    found = [quiet.counter("prompt_tokens", N.PROMPT_TOKENS, "")[1],
             quiet.counter("generation_tokens", N.GENERATION_TOKENS, "")[1]]
    known = [n for n in found if n is not None]
    return sum(known) if known else None


def _steps(r: _Reader) -> float | None:
    """The engine's steps between the scrapes (read quietly: most engines have no such
    counter, and an absent one is said by the probe that judges it)."""
    if N.family(r.kind) not in N.STEPS:
        return None
    return _Reader(r.kind, r.first, r.second, r.interval_s).counter("steps", N.STEPS, "")[1]


def _kv_use(r: _Reader) -> float | None:
    page, kind = r.second, N.family(r.kind)
    if kind == "tgi":  # the batch's reserved tokens against the KV budget (engine-facts.md)
        used, total = page.total("tgi_batch_current_max_tokens"), page.total("tgi_batch_max_total_tokens")
        if used is not None and total:
            return used / total
    if kind == "triton":
        fraction = page.total("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="fraction")
        if fraction is not None:
            return fraction
    if _pick(N.KV_USE, r.kind, page) is None:
        what = "KV-cache usage gauge" + ("; /slots has per-slot state" if kind == "llama.cpp" else "")
        r.missing("kv_cache_use", what)
        return None
    return r.gauge("kv_cache_use", N.KV_USE, "KV-cache usage gauge", mean=True)


def _prefix_hit_rate(r: _Reader) -> float | None:
    page = r.second
    if page.has("vllm:prefix_cache_queries_total"):  # V1: tokens hit / tokens queried
        hits = r.counter("prefix_cache", {"vllm": ("vllm:prefix_cache_hits_total",)}, "")
        queries = r.counter("prefix_cache", {"vllm": ("vllm:prefix_cache_queries_total",)}, "")
        if hits[1] is not None and queries[1]:
            return hits[1] / queries[1]
        return hits[0] / queries[0] if hits[0] is not None and queries[0] else None
    for name in ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"):
        value = page.total(name)
        if value is not None:
            return value if value >= 0 else None  # V0 reports -1 when prefix caching is off
    r.missing("prefix_cache_hit_rate", "prefix-cache hit metric")
    return None


def _lengths(r: _Reader) -> tuple[float, ...]:
    """The request-length mix: prompt + generated tokens at 40 quantiles.

    The two histograms are separate, so a request's total is taken as the sum of the same
    quantile of each (long prompts paired with long outputs): an upper bound on the spread.
    """
    prompt, _ = r.histogram("request_length", N.PROMPT_LENGTH, "request-length histogram")
    if not observed(prompt):
        return ()
    generation, _ = r.histogram("request_length", N.GENERATION_LENGTH, "generated-length histogram")
    mix = []
    for q in LENGTH_POINTS + (0.99,):
        p = quantile(q, prompt) or 0.0
        g = quantile(q, generation) or 0.0 if observed(generation) else 0.0
        mix.append(round(p + g, 1))
    return tuple(mix)
