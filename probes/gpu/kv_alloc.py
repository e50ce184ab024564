"""gpu.kv_alloc: how much of the KV cache each engine's allocation scheme wastes on a
request-length mix, and (level standard) what the GPU's caching allocator adds.

Source: the engines' command lines (probes.helpers.processes): vLLM ``--block-size`` (default 16),
SGLang ``--page-size`` (default 1), llama.cpp ``-c/--ctx-size`` split over ``-np/--parallel``
slots (one contiguous reservation per slot, unless ``--kv-unified``). The mix is
``probes.kernels.kv_alloc.reference_mix`` (chat-like, median ~540 tokens, tail to 8k) until
the engine's own length histogram is read. The model is pure arithmetic
(``probes.kernels.kv_alloc.simulate``); at level standard ``python -m probes.kernels.kv_alloc``
replays the mix through torch's allocator on GPU 0 (through ``host.measure``). No root.
Manual equivalent: vLLM's ``vllm:cache_config_info`` metric; llama-server's ``/slots``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host, MeasurementError
from doctor.model import Level, ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.i18n import t
from probes.helpers.gpu_common import gpu_count
from probes.helpers.kv_blocks import reference_mix, simulate, simulate_contiguous
from probes.helpers.processes import engine_processes, flag_value
from probes.helpers.kernel_child import run_kernel

BYTES_PER_TOKEN = 131072  # Llama-3-8B fp16 K+V across 32 layers; the fractions do not depend on it
BLOCK_SIZES = (8, 16, 32)


@dataclass(frozen=True, slots=True)
class BlockScenario:
    block_tokens: int
    waste_fraction: float  # the model: (reserved - used) / reserved
    allocator_overhead_fraction: float | None  # measured on the GPU (level standard)


@dataclass(frozen=True, slots=True)
class EngineKv:
    pid: int
    engine: str
    scheme: str  # paged | contiguous
    block_tokens: int | None  # paged: tokens per block
    reserve_tokens: int | None  # contiguous: tokens reserved per slot
    setting: str  # where the figures came from: "--block-size 16", "default 16", "-c 32768 -np 4"
    waste_fraction: float  # on the mix, with this engine's setting
    best_waste_fraction: float  # the paged scheme at 16 tokens per block, for comparison


@dataclass(frozen=True, slots=True)
class KvAllocRecord:
    mix: str  # which request-length mix
    mix_requests: int
    mix_median_tokens: int
    scenarios: tuple[BlockScenario, ...]
    engines: tuple[EngineKv, ...]
    allocator_reason: str | None  # why the allocator replay did not run


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def engine_kv(pid: int, engine: str, cmdline: str, mix: list[int]) -> EngineKv | None:
    """The engine's scheme and its waste on ``mix``; None for engines not modelled."""
    best = simulate(mix, 16, BYTES_PER_TOKEN)["waste_fraction"]
    if engine in ("vllm", "sglang"):
        flag = "--block-size" if engine == "vllm" else "--page-size"
        given = _int(flag_value(cmdline, flag))
        block = given or (16 if engine == "vllm" else 1)
        setting = f"{flag} {block}" if given else f"default {block}"
        waste = simulate(mix, block, BYTES_PER_TOKEN)["waste_fraction"]
        return EngineKv(pid, engine, "paged", block, None, setting, waste, best)
    if engine == "llama.cpp":
        if " --kv-unified" in f" {cmdline}" or " -kvu" in f" {cmdline}":
            return None  # one shared cache: no per-slot reservation to model
        ctx = _int(flag_value(cmdline, "-c", "--ctx-size")) or 4096
        slots = _int(flag_value(cmdline, "-np", "--parallel")) or 1
        reserve = max(ctx // slots, 1)
        waste = simulate_contiguous(mix, reserve, BYTES_PER_TOKEN)["waste_fraction"]
        return EngineKv(pid, engine, "contiguous", None, reserve, f"-c {ctx} -np {slots}", waste, best)
    return None


def _allocator(host: Host, options: ScanOptions) -> tuple[dict, str | None]:
    if options.level < Level.STANDARD:
        return {}, "level quick models the allocation only"

    def run() -> dict:
        return run_kernel("kv_alloc", "--device", "0", timeout_s=60)
    try:
        data = host.measure("gpu.kv_alloc.allocator", run)
    except MeasurementError as exc:
        return {}, str(exc)
    return (data, None) if isinstance(data, dict) else ({}, "the allocator replay holds no figures")


def _overhead(data: dict, block: int) -> float | None:
    entry = data.get(str(block))
    value = entry.get("allocator_overhead_fraction") if isinstance(entry, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> KvAllocRecord:
    gpu_count(host)  # the KV cache lives on the GPU: skipped without one
    mix = reference_mix()
    allocator, reason = _allocator(host, options)
    scenarios = tuple(BlockScenario(b, simulate(mix, b, BYTES_PER_TOKEN)["waste_fraction"],
                                    _overhead(allocator, b)) for b in BLOCK_SIZES)
    engines = tuple(kv for p in engine_processes(host)
                    if (kv := engine_kv(p.pid, p.engine or "", p.cmdline, mix)) is not None)
    return KvAllocRecord(mix="reference chat mix (log-normal)", mix_requests=len(mix),
                         mix_median_tokens=sorted(mix)[len(mix) // 2], scenarios=scenarios,
                         engines=engines, allocator_reason=reason)


def summary(record: KvAllocRecord) -> str:
    parts = [t("{engine} pid {pid} ({setting}) wastes {waste:.0%}", engine=e.engine, pid=e.pid,
               setting=e.setting, waste=e.waste_fraction)
             for e in record.engines]
    return t("; ").join(parts) or t("no engine with a modelled KV allocation")
