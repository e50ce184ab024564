"""engine.features: speculative decoding, LoRA adapters and structured output on each engine,
from its own series against its command line.

Sources: engine.metrics' record (its two scrapes; the series are read by
probes/helpers/engine_features.py, which names the engines' files they come from) and
engine.discovery's engines and their command lines (``/proc/<pid>/cmdline`` split at its NULs,
probes/helpers/engine_argv.py, so a JSON argument with spaces stays one):

* vLLM ``--speculative-config '{"method": "ngram", "num_speculative_tokens": 4}'`` (or
  ``--speculative-config.num_speculative_tokens 4``): k, the tokens drafted a step; without
  it, the per-position series on the page (SpecDecodingProm writes one per position);
  SGLang ``--speculative-num-steps`` (its longest accepted run is steps + 1).
* vLLM ``--structured-outputs-config`` (``backend``), older ``--guided-decoding-backend``;
  SGLang ``--grammar-backend``: the grammar backend, for the report.

Mean acceptance length L = 1 + accepted / drafts (vLLM's PromQL); its share of what was
drafted is (L - 1) / k. Units: tokens, shares 0-1, seconds, requests. No privilege for one's
own engines. Manual equivalent: ``curl -s :8000/metrics | grep -E 'spec_decode|lora_requests'``
and ``tr '\\0' ' ' < /proc/PID/cmdline``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host
from doctor.values import count, page_json
from probes.helpers.engine_argv import engine_argv
from probes.helpers.engine_discovery import DiscoveryRecord, found
from probes.helpers.engine_features import FeatureFigures
from probes.helpers.engine_flags import Engine, flag
from probes.helpers.engine_normalise import EngineMetrics
from probes.helpers.engine_scrape import scraped, with_metrics

MAX_K = 64  # no engine drafts more tokens a step: a larger figure is no k
BACKEND_FLAGS = ("--guided-decoding-backend", "--grammar-backend",
                 "--structured-outputs-config.backend")


@dataclass(frozen=True, slots=True)
class EngineFeatures:
    endpoint: str
    kind: str
    model: str | None
    spec_method: str | None  # "ngram", "eagle3", "EAGLE"… from the command line
    spec_k: int | None  # tokens drafted a step
    spec_k_from: str | None  # "--speculative-config", "--speculative-num-steps", "the page's positions"
    spec_window: str | None  # "between scrapes" | "since start"
    spec_drafts: float | None
    spec_accept_length: float | None  # mean tokens a step: 1 + accepted / drafts
    spec_acceptance_rate: float | None  # (L - 1) / k: share of the drafted tokens accepted
    spec_accepted_per_pos: tuple[float, ...]  # share of drafts accepted at each position
    lora_max: int | None
    lora_running: int | None  # adapters running now
    lora_waiting_outside: int | None  # adapters of waiting requests that are not running
    lora_waiting_adapters: str | None  # their names, for the report
    lora_waiting_outside_before: int | None  # the same at the first scrape
    lora_running_before: int | None
    lora_live: bool | None  # the engine updated its LoRA state between the scrapes
    so_backend: str | None
    so_share: float | None  # structured-output requests of all finished, 0-1 (SGLang)
    so_requests: float | None
    grammar_queue: float | None  # requests waiting for their grammar (SGLang)
    grammar_queue_before: float | None
    grammar_compile_p95_s: float | None
    grammar_timeouts: float | None
    missing: dict[str, str]  # figure -> why it is None


@dataclass(frozen=True, slots=True)
class FeaturesRecord:
    engines: tuple[EngineFeatures, ...]


def _dotted(argv: list[str], key: str, name: str) -> str | None:
    """A key of a JSON config argument (``--x '{"k": 4}'``) or its dotted form (``--x.k 4``)."""
    value = flag(argv, f"{name}.{key}")
    if value is not None:
        return value
    raw = flag(argv, name)
    try:
        config = page_json(raw) if raw and len(raw) < 65536 else None  # depth bounded
    except ValueError:
        return None
    found = config.get(key) if isinstance(config, dict) else None
    return None if found is None or isinstance(found, (dict, list)) else str(found)[:64]


def spec_config(kind: str, argv: list[str], positions: int | None) -> tuple[str | None, int | None, str | None]:
    """(method, k, where k came from)."""
    if kind == "sglang":
        steps = count(flag(argv, "--speculative-num-steps"), minimum=1)
        return (flag(argv, "--speculative-algorithm"), steps if steps and steps <= MAX_K else None,
                "--speculative-num-steps" if steps else None)
    method = _dotted(argv, "method", "--speculative-config")
    k = count(_dotted(argv, "num_speculative_tokens", "--speculative-config"), minimum=1)
    if k is not None and k <= MAX_K:
        return method, k, "--speculative-config"
    if positions is not None and positions <= MAX_K:
        return method, positions, "the page's per-position series"
    return method, None, None


def _backend(argv: list[str]) -> str | None:
    return flag(argv, *BACKEND_FLAGS) or _dotted(argv, "backend", "--structured-outputs-config")


def _spec(m: EngineMetrics, f: FeatureFigures, argv: list[str], missing: dict[str, str]) -> dict:
    method, k, k_from = spec_config(m.kind, argv, f.spec_positions)
    length = (1 + f.spec_accepted_tokens / f.spec_drafts
              if f.spec_drafts and f.spec_accepted_tokens is not None else f.spec_accept_length_gauge)
    if length is None:
        missing["spec_accept_length"] = ("no speculative-decoding drafts on the page"
                                         if f.spec_drafts is None else "no drafts counted yet")
    if k is None:
        missing["spec_k"] = "no --speculative-config num_speculative_tokens and no per-position series"
    rate = (length - 1) / k if length is not None and k else None
    if rate is not None and not 0 <= rate <= 1:  # more accepted than drafted: no figure
        missing["spec_acceptance_rate"] = f"1 + accepted/drafts = {length:g} with k = {k}: not a share"
        rate = length = None
    return dict(spec_method=method, spec_k=k, spec_k_from=k_from, spec_window=f.spec_window,
                spec_drafts=f.spec_drafts,
                spec_accept_length=round(length, 3) if length is not None else None,
                spec_acceptance_rate=round(rate, 3) if rate is not None else None,
                spec_accepted_per_pos=f.spec_accepted_per_pos)


def _outside(running: tuple[str, ...] | None, waiting: tuple[str, ...] | None) -> int | None:
    return None if running is None or waiting is None else len(set(waiting) - set(running))


def _lora(f: FeatureFigures, missing: dict[str, str]) -> dict:
    if f.lora_running is None:
        missing["lora_running"] = "no vllm:lora_requests_info on the page (LoRA off, or not vLLM)"
    waiting = sorted(set(f.lora_waiting or ()) - set(f.lora_running or ()))
    return dict(lora_max=f.lora_max,
                lora_running=len(f.lora_running) if f.lora_running is not None else None,
                lora_waiting_outside=_outside(f.lora_running, f.lora_waiting),
                lora_waiting_adapters=",".join(waiting)[:512] or None,
                lora_waiting_outside_before=_outside(f.lora_running_before, f.lora_waiting_before),
                lora_running_before=(len(f.lora_running_before)
                                     if f.lora_running_before is not None else None),
                lora_live=f.lora_updated_in_window)


def _structured(f: FeatureFigures, argv: list[str]) -> dict:
    share = (f.so_requests / f.so_of_requests if f.so_requests is not None and f.so_of_requests
             else None)
    return dict(so_backend=_backend(argv), so_share=round(share, 3) if share is not None and share <= 1 else None,
                so_requests=f.so_requests, grammar_queue=f.grammar_queue,
                grammar_queue_before=f.grammar_queue_before,
                grammar_compile_p95_s=f.grammar_compile_p95_s, grammar_timeouts=f.grammar_timeouts)


def view(engine: Engine | None, m: EngineMetrics, argv: list[str]) -> EngineFeatures | None:
    """One engine's feature figures; None when its page holds no feature series."""
    f = m.features
    if f is None:
        return None
    missing = dict(a.split(": ", 1) for a in f.absent if ": " in a)
    return EngineFeatures(endpoint=m.endpoint, kind=m.kind, model=engine.model if engine else None,
                          **_spec(m, f, argv, missing), **_lora(f, missing),
                          **_structured(f, argv), missing=missing)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> FeaturesRecord:
    inputs = with_metrics(host, options, inputs)  # handed over, else read here once
    engines = {e.base_url: e for e in found(host, options, inputs).engines}
    record = inputs.get("engine.discovery", DiscoveryRecord)  # its read of each cmdline
    argvs = {a.pid: a.argv for a in record.argv} if record is not None else {}
    metrics = scraped(host, options, inputs)
    if not metrics.engines:
        raise Skip(t("no engine's /metrics page could be read (see engine.metrics)"))
    items = []
    for m in metrics.engines:
        if m.features is None:  # no feature series: nothing to read its command line for
            continue
        engine = engines.get(m.endpoint.rsplit("/metrics", 1)[0])
        pid = engine.pid if engine else None
        argv = list(argvs[pid] if pid in argvs else engine_argv(host, pid).argv if pid else ())
        item = view(engine, m, argv)
        if item is not None:
            items.append(item)
    if not items:
        raise Skip(t("no engine exports speculative-decoding, LoRA or structured-output series"))
    return FeaturesRecord(tuple(items))


def summary(record: FeaturesRecord) -> str:
    parts = []
    for e in record.engines:
        bits = []
        if e.spec_accept_length is not None:
            bits.append(t("speculative: {length:g} tokens a step of k={k}", length=e.spec_accept_length,
                          k=e.spec_k if e.spec_k is not None else "?"))
        if e.lora_running is not None:
            bits.append(t("LoRA: {running} running of {max}, {waiting} waiting", running=e.lora_running,
                          max=e.lora_max if e.lora_max is not None else "?",
                          waiting=e.lora_waiting_outside))
        if e.so_share is not None:
            bits.append(t("structured output: {share:.0%} of requests", share=e.so_share))
        parts.append(f"{e.kind}: " + (t(", ").join(bits) or t("no feature figures")))
    return t("; ").join(parts)

