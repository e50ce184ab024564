"""engine.speed: one engine's decode speed and time to first token at concurrency 1, measured.

Source: two streamed requests to the engine's ``/v1/completions``, one at a time: a short
warm-up (16 prompt, 8 output tokens), then the measured one (``PROMPT_TOKENS`` fresh prompt
tokens, ``OUTPUT_TOKENS`` output tokens with ``ignore_eos``), both within ``BUDGET_S`` shared
by all endpoints (``COST``, stated before the first request; ``--no-requests`` sends none).
Timed on the client (time to first token; inter-token latency = (end - first token) /
(tokens - 1)), and by llama.cpp itself where it says: the stream's last event carries
``timings`` (``prompt_ms`` for the prompt's prefill, ``predicted_per_second`` for its decode).
Not sent to an engine serving requests unless ``--busy-ok`` (probes/helpers/engine_requests.py):
the figures are one sequence's, as engine.roofline's ceiling is. No privilege needed. Manual
equivalent: ``curl -s HOST:PORT/v1/completions -d '{"prompt": "...", "max_tokens": 48,
"ignore_eos": true}' | jq .timings``.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from functools import partial

from doctor.i18n import t, translated
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import RequestCost, ScanOptions, Skip
from doctor.seam.host import Host, MeasurementError
from doctor.values import count, number
from doctor.workload.loadgen import LoadError, RequestResult, RequestTarget, Workload, run_requests
from probes.helpers.engine_requests import clear_to_send
from probes.helpers.engine_targets import active_targets
from probes.helpers.speed_record import SpeedEndpoint, SpeedRecord

WARM_PROMPT, WARM_OUTPUT = 16, 8
PROMPT_TOKENS = 64
OUTPUT_TOKENS = 48  # enough gaps that one slow token moves the mean by ~2 %
BUDGET_S = 30.0
# Prompt tokens beyond the words (a BOS, a first word in pieces): engine.warmup's margin
PROMPT_MARGIN = 3
COST = RequestCost(requests=2, prompt_tokens=WARM_PROMPT + PROMPT_TOKENS + 2 * PROMPT_MARGIN,
                   output_tokens=WARM_OUTPUT + OUTPUT_TOKENS, seconds=BUDGET_S)


def _one(endpoint: RequestTarget, prompt: int, output: int, left_s: float) -> RequestResult | None:
    done = run_requests(endpoint, Workload(prompt_tokens=prompt, output_tokens=output,
                                           timeout_s=left_s), 1, 1, left_s)
    return done[0] if done else None


def measure(endpoint: RequestTarget, kind: str | None, budget_s: float) -> SpeedEndpoint:
    """The warm-up, then the measured request, within ``budget_s``."""
    started = time.monotonic()
    warm = _one(endpoint, WARM_PROMPT, WARM_OUTPUT, budget_s / 3)
    left = budget_s - (time.monotonic() - started)
    result = _one(endpoint, PROMPT_TOKENS, OUTPUT_TOKENS, left) if left > 1.0 else None
    sent = [r for r in (warm, result) if r is not None]
    timings = dict(result.engine_timings) if result is not None else {}
    itl = result.mean_itl_s if result is not None else None
    error = (t("no time left for the measured request") if result is None
             else result.error or (t("cut at the budget") if result.cut else None))
    return SpeedEndpoint(
        base_url=endpoint.base_url, kind=kind, requests=len(sent), error=error,
        prompt_tokens=result.prompt_tokens if result else None,
        output_tokens=result.output_tokens if result else None,
        ttft_s=None if result is None or result.ttft_s is None else round(result.ttft_s, 6),
        itl_mean_s=None if itl is None else round(itl, 6),
        engine_prompt_ms=_positive(timings.get("prompt_ms")),
        engine_prompt_n=count(timings.get("prompt_n")) if "prompt_n" in timings else None,
        engine_predicted_per_second=_positive(timings.get("predicted_per_second")),
        engine_predicted_n=count(timings.get("predicted_n")) if "predicted_n" in timings else None,
        prompt_tokens_sent=sum(r.prompt_tokens if r.prompt_tokens is not None else n
                               for r, n in zip(sent, (WARM_PROMPT, PROMPT_TOKENS))),
        output_tokens_received=sum(r.output_tokens for r in sent),
        sending_s=round(time.monotonic() - started, 3))


def _positive(value: object) -> float | None:
    found = number(value) if isinstance(value, float) else None
    return round(found, 3) if found is not None and found > 0 else None


def _measured(endpoint: RequestTarget, kind: str | None, budget_s: float) -> dict:
    return asdict(measure(endpoint, kind, budget_s))


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> SpeedRecord:
    """One warm-up and one measured request to every engine not serving requests now."""
    found, not_sent = clear_to_send(host, options, "engine.speed", COST,
                                    active_targets(host, options, inputs))
    out = []
    for target in found:
        try:
            data = host.measure(f"engine.speed {target.base_url}",
                                partial(_measured, target.endpoint(), target.kind,
                                        BUDGET_S / len(found)))
        except LoadError as exc:
            raise Skip(str(exc)) from None
        out.append(checked(data, target.base_url))
    return SpeedRecord(tuple(out), not_sent)


COUNTS = ("requests", "prompt_tokens", "output_tokens", "engine_prompt_n", "engine_predicted_n",
          "prompt_tokens_sent", "output_tokens_received")
FIGURES = ("ttft_s", "itl_mean_s", "engine_prompt_ms", "engine_predicted_per_second", "sending_s")


def checked(data: object, url: str) -> SpeedEndpoint:
    """The measurement (live, or a capture's, which can be edited) as a record: every field
    of its kind or the measurement refused in one line."""
    names = {f for f in SpeedEndpoint.__dataclass_fields__}
    if not isinstance(data, dict) or set(data) != names:
        raise MeasurementError(f"engine.speed {url}: the measurement does not hold engine.speed's "
                               f"fields ({', '.join(sorted(names))})")
    values = dict(data)
    for name in COUNTS + FIGURES:
        value = values[name]
        kept = count(value) if name in COUNTS else number(value)
        if value is not None and (kept is None or kept < 0):
            raise MeasurementError(f"engine.speed {url}: {name} is {str(value)[:40]!r}, not a "
                                   "figure >= 0")
        values[name] = kept
    for name in ("base_url", "kind", "error"):
        if values[name] is not None and not isinstance(values[name], str):
            raise MeasurementError(f"engine.speed {url}: {name} is not text")
    values["error"] = values["error"] and values["error"][:200]
    for name in ("requests", "prompt_tokens_sent", "output_tokens_received", "sending_s"):
        if values[name] is None:
            raise MeasurementError(f"engine.speed {url}: {name} is missing")
    return SpeedEndpoint(**values)


def summary(record: SpeedRecord) -> str:
    parts = []
    for e in record.endpoints:
        if e.error:
            parts.append(t("{url}: {error}", url=e.base_url, error=translated(e.error)))
            continue
        speed = e.engine_predicted_per_second or (1 / e.itl_mean_s if e.itl_mean_s else None)
        parts.append(t("{url}: decode {speed} tokens/s, first token {ttft} ms at concurrency 1",
                       url=e.base_url, speed="?" if speed is None else f"{speed:.1f}",
                       ttft="?" if e.ttft_s is None else f"{e.ttft_s * 1000:.0f}"))
    return t("; ").join([*parts, *(s.text() for s in record.sent()), *record.not_sent])
