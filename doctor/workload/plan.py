"""Capacity plan: weights, KV cache and whether a model fits a card (../shared/domain.md §3).

The model's shape is read from the model itself (doctor/workload/model_shape.py: a Hugging Face
``config.json`` or a GGUF file's header, every value checked there). The formulas are the
articles':

* weights: params × bytes per param; in VRAM × 1.2 for activations and runtime overhead
  (000 §2.1, 004 §2.1: "actual use runs 20–50 % over the weights");
* KV cache bytes per token: layers × KV heads × head_dim × 2 (K and V) × bytes per element
  (000 §2.1); the cache: that × context × concurrent sequences.

The figures given here (the card's memory, context, sequences, the engine's share) are
checked too, so the arithmetic stays finite and a plan's JSON never holds Infinity or NaN.

Manual equivalent: the arithmetic above with the numbers from ``config.json``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from doctor.workload.model_shape import DTYPE_BYTES, LIMITS, ModelShape, shown
from doctor.redact import safe_display

WEIGHT_OVERHEAD = 1.2  # 000 §2.1, 004 §2.1
SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|B)?\s*$", re.I)
UNITS = {"": 1, "B": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
         "KI": 1 << 10, "MI": 1 << 20, "GI": 1 << 30, "TI": 1 << 40}
MAX_CONCURRENCY = 1_000_000  # sequences
MAX_GPU_BYTES = 1 << 50  # 1 PiB: more than any node's cards together


class PlanError(Exception):
    """A plan cannot be made from the figures given; the message names the figure."""

    def __init__(self, message: str) -> None:
        super().__init__(safe_display(message))


@dataclass(frozen=True, slots=True)
class Plan:
    model: str
    source: str
    params_b: float  # billions
    dtype: str  # weights' dtype, or "gguf" for a GGUF file's own quantization
    weights_bytes: int
    weights_vram_bytes: int  # × WEIGHT_OVERHEAD
    kv_dtype: str
    kv_bytes_per_token: int
    context: int
    concurrency: int
    kv_cache_bytes: int
    need_bytes: int
    gpu_memory_bytes: int
    gpu_memory_utilization: float
    budget_bytes: int
    fits: bool
    max_concurrency: int  # at this context, 0 when even the weights do not fit
    max_context: int  # tokens per sequence at this concurrency
    notes: tuple[str, ...]


def parse_size(text: str) -> int:
    """"24GiB", "24 GB", "80G" → bytes (G = 10^9, GiB = 2^30), from 1 byte to 1 PiB."""
    m = SIZE.match(text)
    if not m:
        raise ValueError(f"{text!r:.40} is not a size; write e.g. 24GiB, 24GB or 80G")
    unit = (m.group(2) or "").upper().rstrip("B")
    size = float(m.group(1)) * UNITS[unit]  # a long run of digits is inf, not an error
    if not 1 <= size <= MAX_GPU_BYTES:
        raise ValueError(f"{text!r:.40} is out of range: give from 1 byte to 1 PiB "
                         "(e.g. 24GiB, 80GB)")
    return int(size)


def kv_bytes_per_token(shape: ModelShape, kv_dtype: str) -> int:
    """layers × KV heads × head_dim × 2 (K and V) × bytes per element (000 §2.1)."""
    return int(shape.layers * shape.kv_heads * shape.head_dim * 2 * DTYPE_BYTES[kv_dtype])


def make_plan(shape: ModelShape, gpu_memory_bytes: int, dtype: str | None = None,
              kv_dtype: str | None = None, context: int | None = None,
              concurrency: int = 1, gpu_memory_utilization: float = 0.9) -> Plan:
    """Weights + KV cache at ``context`` × ``concurrency`` against the card's budget.

    PlanError when a figure given is out of range (an engine's flags are anyone's too).
    """
    notes: list[str] = []
    context = context or shape.max_context or 4096
    _check_inputs(gpu_memory_bytes, context, concurrency, gpu_memory_utilization)
    if dtype is None and shape.file_weights_bytes is not None:
        weights, dtype_name = shape.file_weights_bytes, "gguf"
    else:
        dtype_name = dtype or shape.native_dtype or "fp16"
        weights = int(shape.params * DTYPE_BYTES[dtype_name])
    kv_name = kv_dtype or (dtype_name if dtype_name in ("fp16", "bf16", "fp32") else "fp16")
    if shape.max_context and context > shape.max_context:
        notes.append(f"context {context} is above the model's own maximum {shape.max_context}")
    per_token = kv_bytes_per_token(shape, kv_name)
    kv_cache = per_token * context * concurrency
    weights_vram = int(weights * WEIGHT_OVERHEAD)
    budget = int(gpu_memory_bytes * gpu_memory_utilization)
    free_for_kv = budget - weights_vram
    if free_for_kv <= 0:
        notes.append("the weights alone do not fit: quantize (int8, int4), add GPUs "
                     "(tensor parallelism) or take a larger card")
    return Plan(
        model=shape.name, source=shape.source, params_b=round(shape.params / 1e9, 3),
        dtype=dtype_name, weights_bytes=weights, weights_vram_bytes=weights_vram,
        kv_dtype=kv_name, kv_bytes_per_token=per_token, context=context,
        concurrency=concurrency, kv_cache_bytes=kv_cache, need_bytes=weights_vram + kv_cache,
        gpu_memory_bytes=gpu_memory_bytes, gpu_memory_utilization=gpu_memory_utilization,
        budget_bytes=budget, fits=weights_vram + kv_cache <= budget,
        max_concurrency=max(free_for_kv // (per_token * context), 0) if per_token else 0,
        max_context=max(free_for_kv // (per_token * concurrency), 0) if per_token else 0,
        notes=tuple(notes))


def _check_inputs(gpu_memory_bytes: int, context: int, concurrency: int,
                  utilization: float) -> None:
    """Integers within LIMITS and a finite share: the arithmetic then stays finite."""
    for name, value, (low, high) in (("GPU memory (bytes)", gpu_memory_bytes, (1, MAX_GPU_BYTES)),
                                     ("context (tokens)", context, LIMITS["context"]),
                                     ("concurrency (sequences)", concurrency,
                                      (1, MAX_CONCURRENCY))):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise PlanError(f"{name} = {shown(value)} is out of range: give {low:,} to {high:,}")
    if not (isinstance(utilization, (int, float)) and math.isfinite(utilization)
            and 0 < utilization <= 1):
        raise PlanError(f"GPU memory utilization = {shown(utilization)} is out of range: give "
                        "a share above 0 and at most 1 (vLLM's default is 0.9)")


def gb(n: int | float) -> str:
    return f"{n / 1e9:.1f} GB"


def render(plan: Plan) -> str:
    """The plan for people, one figure a line."""
    verdict = "fits" if plan.fits else "does NOT fit"
    lines = [
        f"{plan.model}  ({plan.params_b:g} B params, from {plan.source})",
        f"  weights ({plan.dtype}):        {gb(plan.weights_bytes)}; with runtime overhead "
        f"x{WEIGHT_OVERHEAD:g}: {gb(plan.weights_vram_bytes)}",
        f"  KV cache per token ({plan.kv_dtype}): {plan.kv_bytes_per_token / 2**20:.3f} MiB",
        f"  KV cache at {plan.context} tokens x {plan.concurrency} sequences: "
        f"{gb(plan.kv_cache_bytes)}",
        f"  needed {gb(plan.need_bytes)} of {gb(plan.budget_bytes)} "
        f"({plan.gpu_memory_utilization:g} of {gb(plan.gpu_memory_bytes)}): {verdict}",
        f"  largest concurrency at {plan.context} tokens: {plan.max_concurrency}; "
        f"longest context at {plan.concurrency} sequences: {plan.max_context} tokens",
    ]
    lines += [f"  note: {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"

