"""engine.kv_cache: KV-cache pressure, preemption and block-size waste of each engine.

Sources: the engine's /metrics (two scrapes: engine.metrics' record), its configuration
(engine.discovery's record: flags, ``vllm:cache_config_info``, /v1/models, /server_info…).
Fragmentation is the paged allocator's internal waste: a request of L tokens holds
ceil(L / block) blocks, so the last block is partly empty; over the request-length mix
the engine's own histograms record, that waste is a share of the allocated cache.
A page size of 1 (SGLang's default: KV allocated token by token) wastes nothing and has
no block size to recommend. Units: fractions 0-1, tokens, requests per second. No privilege needed.
Manual equivalent: ``curl -s :8000/metrics | grep -E 'kv_cache_usage|waiting|preempt'``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from doctor.i18n import t
from doctor.seam.host import Host
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.display import number, text
from doctor.values import count
from probes.helpers.engine_discovery import DiscoveryRecord, found
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_normalise import EngineMetrics
from probes.helpers.engine_scrape import MetricsRecord, scraped, with_metrics
from probes.helpers.kv_blocks import simulate

BLOCK_SIZES = (8, 16, 32, 64, 128)  # vLLM --block-size choices on CUDA (8-32) and others
DEFAULT_BLOCK = 16  # 000 §4.2: block_size 16, 32 for long context
LONG_CONTEXT_TOKENS = 4096  # a median request this long counts as long context
LONG_BLOCK_MAX_WASTE = 0.02  # move to 32 only when it wastes under 2 % of the cache


@dataclass(frozen=True, slots=True)
class EngineKV:
    endpoint: str
    kind: str
    model: str | None
    kv_cache_use: float | None  # 0-1
    requests_running: float | None
    requests_waiting: float | None
    preemptions_total: float | None
    preemptions_in_window: float | None
    preemptions_per_s: float | None
    interval_s: float
    block_size: int | None  # tokens per KV block (vLLM --block-size, SGLang page size)
    num_gpu_blocks: int | None
    block_waste_fraction: float | None  # share of allocated KV tokens left empty by the mix
    recommended_block_size: int | None
    waste_at_recommended: float | None
    request_tokens_p50: float | None
    request_tokens_p99: float | None
    max_model_len: int | None
    max_num_batched_tokens: int | None
    iteration_tokens_p95: float | None
    max_num_seqs: int | None
    # the first scrape's counts (SCRAPE_INTERVAL_S before): a running count held with
    # requests waiting through the window is pinned at a cap, whether or not the cap is known
    requests_running_before: float | None = None
    requests_waiting_before: float | None = None


@dataclass(frozen=True, slots=True)
class KVRecord:
    engines: tuple[EngineKV, ...]


def waste_fraction(lengths: Iterable[float], block_tokens: int) -> float:
    """Share of the allocated KV tokens a paged cache leaves empty for this mix
    (probes/helpers/kv_blocks.simulate, the GPU helper's model, in tokens)."""
    mix = [max(math.ceil(n), 1) for n in lengths]
    return simulate(mix, block_tokens, 1)["waste_fraction"] if mix else 0.0


def recommend_block(lengths: tuple[float, ...]) -> tuple[int, float]:
    """(block size, its waste fraction) for a request-length mix (000 §4.2)."""
    waste = {b: waste_fraction(lengths, b) for b in BLOCK_SIZES}
    median = sorted(lengths)[len(lengths) // 2]
    if median >= LONG_CONTEXT_TOKENS and waste[32] <= LONG_BLOCK_MAX_WASTE:
        return 32, waste[32]
    return DEFAULT_BLOCK, waste[DEFAULT_BLOCK]


def view(engine: Engine | None, m: EngineMetrics) -> EngineKV:
    """One engine's KV figures from its metrics and configuration."""
    # labels are text: "16"; "0", "-1", "nan" or "1e999" are no block size
    block = count(m.cache_config.get("block_size"), minimum=1) or (engine.block_size if engine else None)
    lengths = m.request_tokens_mix[:-1]  # the last point is the p99, kept apart
    waste = recommended = waste_rec = None
    if block == 1:  # token-granular (SGLang's default page size): no last block to leave empty
        waste = 0.0
    elif lengths and block:
        waste = round(waste_fraction(lengths, block), 4)
        recommended, waste_rec = recommend_block(lengths)
        waste_rec = round(waste_rec, 4)
    return EngineKV(
        endpoint=m.endpoint, kind=m.kind, model=engine.model if engine else None,
        kv_cache_use=m.kv_cache_use, requests_running=m.requests_running,
        requests_waiting=m.requests_waiting, preemptions_total=m.preemptions_total,
        preemptions_in_window=m.preemptions_in_window, preemptions_per_s=m.preemptions_per_s,
        interval_s=m.interval_s, block_size=block,
        num_gpu_blocks=count(m.cache_config.get("num_gpu_blocks")),
        block_waste_fraction=waste, recommended_block_size=recommended,
        waste_at_recommended=waste_rec,
        request_tokens_p50=lengths[len(lengths) // 2] if lengths else None,
        request_tokens_p99=m.request_tokens_p99,
        max_model_len=engine.max_model_len if engine else None,
        max_num_batched_tokens=engine.max_num_batched_tokens if engine else None,
        iteration_tokens_p95=m.iteration_tokens_p95,
        max_num_seqs=engine.max_num_seqs if engine else None,
        requests_running_before=m.requests_running_before,
        requests_waiting_before=m.requests_waiting_before)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> KVRecord:
    """The records of engine.discovery and engine.metrics (its needs), judged by ``judge``."""
    inputs = with_metrics(host, options, inputs)  # handed over, else read here once
    engines = found(host, options, inputs).engines
    return judge(DiscoveryRecord(engines, len(engines)), scraped(host, options, inputs))


def judge(discovery: DiscoveryRecord, metrics: MetricsRecord) -> KVRecord:
    """Each scraped engine's KV figures, from the two records alone (no host)."""
    if not metrics.engines:
        raise Skip(t("no engine's /metrics page could be read (see engine.metrics)"))
    engines = {e.base_url: e for e in discovery.engines}
    return KVRecord(tuple(view(engines.get(_base(m.endpoint)), m) for m in metrics.engines))


def _base(metrics_url: str) -> str:
    return metrics_url.rsplit("/metrics", 1)[0]


def summary(record: KVRecord) -> str:
    parts = []
    for e in record.engines:
        use = t("n/a") if e.kv_cache_use is None else number(e.kv_cache_use, ".0%")
        parts.append(t("{kind} KV {use}, waiting {waiting}, preemptions/s {preemptions}",
                       kind=e.kind, use=use, waiting=text(e.requests_waiting, spec='g'),
                       preemptions=text(e.preemptions_per_s, t("not exported"), 'g')))
    return t("; ").join(parts)
