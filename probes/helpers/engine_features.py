"""The serving features' own series on an engine's two /metrics scrapes: speculative
decoding, LoRA adapters, structured output. engine.metrics keeps them (``features``);
engine.features judges them against the engine's command line.

Sources (names and labels as the engines' code writes them):

* vLLM 0.33.0 ``vllm/v1/spec_decode/metrics.py`` SpecDecodingProm: counters
  ``vllm:spec_decode_num_drafts_total``, ``…_num_draft_tokens_total``,
  ``…_num_accepted_tokens_total`` and ``…_num_accepted_tokens_per_pos_total{position}``, one
  series per position 0..k-1 (k = ``num_speculative_tokens``). Mean acceptance length =
  1 + accepted / drafts, as its docstring's PromQL computes it.
* vLLM 0.33.0 ``vllm/v1/metrics/loggers.py``: the gauge ``vllm:lora_requests_info{max_lora,
  waiting_lora_adapters, running_lora_adapters}`` (adapter names joined by commas), set to
  the current time for each new label set: the series with the newest value is the state
  now, older ones stay on the page.
* SGLang 0.5.23 ``sglang/srt/observability/metrics_collector.py``: ``sglang:spec_accept_length``
  (gauge, mean acceptance length of its last log), ``sglang:num_so_requests_total`` beside
  ``sglang:num_requests_total`` (both at a request's end), ``sglang:num_grammar_queue_reqs``
  (requests waiting for their grammar), ``sglang:grammar_compilation_time_seconds``
  (histogram), ``sglang:num_grammar_timeout_total``.

Counters are read over the window between the scrapes when they moved in it, else as
totals since the engine started (``spec_window`` says which). NaN, infinite or negative
samples, and labels that are no count, are absent with a reason: never judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from doctor.values import count, non_negative
from probes.helpers.counter_span import span
from probes.helpers.promtext import Page, bucket_delta, observed, quantile

SPEC = "vllm:spec_decode_num_"
LORA = "vllm:lora_requests_info"
MAX_ADAPTERS = 256  # names kept from one label: a page may be hostile
MAX_POSITIONS = 64  # of the per-position series


@dataclass(frozen=True, slots=True)
class FeatureFigures:
    spec_window: str | None  # "between scrapes" | "since start": what the spec counts cover
    spec_drafts: float | None  # drafts proposed (vLLM)
    spec_draft_tokens: float | None
    spec_accepted_tokens: float | None
    spec_positions: int | None  # per-position series on the page: vLLM's num_speculative_tokens
    spec_accepted_per_pos: tuple[float, ...]  # share of drafts accepted at position 0, 1, …
    spec_accept_length_gauge: float | None  # SGLang's sglang:spec_accept_length
    lora_max: int | None  # max_lora label (--max-loras)
    lora_running: tuple[str, ...] | None  # adapters running now (newest series)
    lora_waiting: tuple[str, ...] | None  # adapters of waiting requests now
    lora_running_before: tuple[str, ...] | None  # the same in the first scrape
    lora_waiting_before: tuple[str, ...] | None
    lora_updated_in_window: bool | None  # the newest series' time moved between the scrapes
    so_requests: float | None  # structured-output requests finished (SGLang), spec_window's way
    so_of_requests: float | None  # all requests finished over the same span
    grammar_queue: float | None  # requests waiting for their grammar (SGLang), second scrape
    grammar_queue_before: float | None
    grammar_compile_p95_s: float | None
    grammar_timeouts: float | None  # grammar timeouts between the scrapes (0 when none)
    absent: tuple[str, ...]  # "figure: why"


def _span(first: Page, second: Page, name: str, absent: list[str],
          **match: str) -> tuple[float | None, str | None]:
    """(count, window) of a counter: its increase when it moved, else its total."""
    return span(first, second, name, absent, still_is_window=False, **match)


def _spec(first: Page, second: Page, absent: list[str]) -> dict:
    drafts, window = _span(first, second, SPEC + "drafts_total", absent)
    tokens, w2 = _span(first, second, SPEC + "draft_tokens_total", absent)
    accepted, w3 = _span(first, second, SPEC + "accepted_tokens_total", absent)
    if len({w for w in (window, w2, w3) if w}) > 1:  # mixed spans: no ratio between them
        drafts, tokens, accepted = second.total(SPEC + "drafts_total"), \
            second.total(SPEC + "draft_tokens_total"), second.total(SPEC + "accepted_tokens_total")
        window = "since start"
    per_pos = _per_position(first, second, drafts, window)
    gauge = second.values("sglang:spec_accept_length")
    length = non_negative(sum(gauge) / len(gauge)) if gauge else None
    return dict(spec_window=window if drafts is not None else None, spec_drafts=drafts,
                spec_draft_tokens=tokens, spec_accepted_tokens=accepted,
                spec_positions=len(per_pos[0]) or None, spec_accepted_per_pos=per_pos[1],
                spec_accept_length_gauge=length)


def _per_position(first: Page, second: Page, drafts: float | None,
                  window: str | None) -> tuple[tuple[str, ...], tuple[float, ...]]:
    name = SPEC + "accepted_tokens_per_pos_total"
    positions = sorted({dict(labels).get("position", "") for labels, _ in second.samples.get(name, ())},
                       key=lambda p: (len(p), p))[:MAX_POSITIONS]
    positions = [p for p in positions if count(p) is not None]
    shares = []
    for p in positions:
        after, before = second.total(name, position=p), first.total(name, position=p)
        n = after - before if window == "between scrapes" and after is not None and before is not None else after
        share = n / drafts if n is not None and drafts else None
        if share is None or not 0 <= share <= 1:
            return tuple(positions), ()
        shares.append(round(share, 4))
    return tuple(positions), tuple(shares)


def _adapters(text: str) -> tuple[str, ...]:
    return tuple(a for a in text.split(",") if a)[:MAX_ADAPTERS]


def _lora_state(page: Page) -> tuple[int | None, tuple[str, ...], tuple[str, ...], float] | None:
    """(max_lora, running, waiting, time) of the newest lora_requests_info series."""
    newest: tuple[dict[str, str], float] | None = None
    for series, value in page.samples.get(LORA, ()):
        if math.isfinite(value) and (newest is None or value > newest[1]):
            newest = (dict(series), value)
    if newest is None:
        return None
    labels, at = newest
    return (count(labels.get("max_lora"), minimum=1),
            _adapters(labels.get("running_lora_adapters", "")),
            _adapters(labels.get("waiting_lora_adapters", "")), at)


def _lora(first: Page, second: Page, absent: list[str]) -> dict:
    now, before = _lora_state(second), _lora_state(first)
    if now is None:
        if second.has(LORA):
            absent.append(f"{LORA}: no finite value")
        return dict(lora_max=None, lora_running=None, lora_waiting=None, lora_running_before=None,
                    lora_waiting_before=None, lora_updated_in_window=None)
    if now[0] is None:
        absent.append(f"{LORA}: its max_lora label is no count >= 1")
    return dict(lora_max=now[0], lora_running=now[1], lora_waiting=now[2],
                lora_running_before=before[1] if before else None,
                lora_waiting_before=before[2] if before else None,
                lora_updated_in_window=before is not None and now[3] > before[3])


def _structured(first: Page, second: Page, absent: list[str]) -> dict:
    so, window = _span(first, second, "sglang:num_so_requests_total", absent)
    everything = None
    if so is not None:
        after, before = second.total("sglang:num_requests_total"), first.total("sglang:num_requests_total")
        everything = (after - before if window == "between scrapes" and after is not None
                      and before is not None else after)
        everything = non_negative(everything) if everything is not None else None
    timeouts, span = _span(first, second, "sglang:num_grammar_timeout_total", absent)
    if span != "between scrapes":  # a timeout long ago is no bottleneck now
        timeouts = 0.0 if span else None
    name = "sglang:grammar_compilation_time_seconds"
    after_b = second.buckets(name)
    delta = bucket_delta(first.buckets(name), after_b)
    buckets = delta if observed(delta) > 0 else after_b
    p95 = quantile(0.95, buckets) if observed(buckets) > 0 else None
    queue = second.values("sglang:num_grammar_queue_reqs")
    queue_before = first.values("sglang:num_grammar_queue_reqs")
    return dict(so_requests=so, so_of_requests=everything,
                grammar_queue=non_negative(sum(queue)) if queue else None,
                grammar_queue_before=non_negative(sum(queue_before)) if queue_before else None,
                grammar_compile_p95_s=non_negative(p95) if p95 is not None else None,
                grammar_timeouts=timeouts)


def features(first: Page, second: Page) -> FeatureFigures | None:
    """The feature series of two scrapes; None when the page holds none of them."""
    if not any(n.startswith((SPEC, LORA, "sglang:spec_accept", "sglang:num_so_", "sglang:num_grammar",
                             "sglang:grammar_")) for n in second.names()):
        return None
    absent: list[str] = []
    return FeatureFigures(**_spec(first, second, absent), **_lora(first, second, absent),
                          **_structured(first, second, absent), absent=tuple(absent))
