"""Capacity plan: weights, KV cache and whether a model fits the memory it is given.

The model's shape is read from the model itself (doctor/workload/model_shape.py: a Hugging Face
``config.json`` or a GGUF file's header, every value checked there). The formulas are the
articles' (../shared/domain.md §3), with the engines' own KV allocation for windowed layers:

* weights: params × bytes per param; in memory × 1.2 for activations and runtime overhead
  (000 §2.1, 004 §2.1: "actual use runs 20–50 % over the weights");
* KV bytes of one layer for one token: KV heads × head_dim × 2 (K and V) × bytes per element
  (000 §2.1). A global layer keeps every token of a sequence's context; a sliding-window
  (local) layer keeps what the engine allocates for its window, per sequence:

  - llama.cpp (``llama_kv_cache_iswa::llama_kv_cache_iswa`` in src/llama-kv-cache-iswa.cpp,
    without ``--swa-full``, one stream a slot as ``kv_unified = false`` by default): the SWA
    cache holds ``GGML_PAD(min(n_ctx_seq, n_swa + n_ubatch), 256)`` cells a sequence, the
    window plus one micro-batch (``-ub``, 512 by default) in 256-cell steps: gemma-3-270m at
    ``-c 32768`` logs "size = 96.00 MiB (32768 cells, 3 layers)" and "size = 15.00 MiB (1024
    cells, 15 layers)". With ``--swa-full`` every layer is global.
  - vLLM (``SlidingWindowSpec`` in vllm/v1/kv_cache_interface.py): a decoding sequence keeps
    the blocks that cover its last ``sliding_window - 1`` tokens and the new one,
    ``cdiv(sliding_window, block_size) + 1`` blocks of 16 (``--block-size``). Its start-up
    check, ``max_memory_usage_bytes``, takes ``sliding_window - 1 + max_num_batched_tokens``
    for one request in chunked prefill; that batch is shared by all sequences, so it is not
    counted per sequence here.

  The cache: global layers × context + local layers × min(what the window takes, context),
  per sequence, × concurrent sequences. A GGUF file is planned for llama.cpp, a config.json
  for vLLM, unless ``engine`` says otherwise.

The longest context is the memory's, capped at the model's own maximum
(max_position_embeddings / <arch>.context_length), and the plan says which one capped it.
The memory is a GPU's or, for a CPU engine on a host without one, the host's (the caller
says which, and where the figure came from). The figures given here (the memory, context,
sequences, the engine's share) are checked too, so the arithmetic stays finite and a plan's
JSON never holds Infinity or NaN. Sizes are shown in binary units (GiB, MiB, KiB) only.

Manual equivalent: the arithmetic above with the numbers from ``config.json``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from doctor.i18n import t
from doctor.workload.model_shape import DTYPE_BYTES, LIMITS, ModelShape, shown
from doctor.redact import safe_display

WEIGHT_OVERHEAD = 1.2  # 000 §2.1, 004 §2.1
SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|B)?\s*$", re.I)
UNITS = {"": 1, "B": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
         "KI": 1 << 10, "MI": 1 << 20, "GI": 1 << 30, "TI": 1 << 40}
MAX_CONCURRENCY = 1_000_000  # sequences
MAX_GPU_BYTES = 1 << 50  # 1 PiB: more than any node's cards together
ENGINES = ("vllm", "llama.cpp")
ENGINE_NAMES = {"vllm": "vLLM", "llama.cpp": "llama.cpp"}
LLAMA_UBATCH = 512  # llama.cpp's default -ub / --ubatch-size (n_ubatch)
LLAMA_SWA_PAD = 256  # llama_kv_cache_iswa: "the SWA cache is always padded to 256"
VLLM_BLOCK = 16  # vLLM's default --block-size (tokens a KV block)


class PlanError(Exception):
    """A plan cannot be made from the figures given; the message names the figure."""

    def __init__(self, message: str) -> None:
        super().__init__(safe_display(message))


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    model: str
    source: str
    params_b: float  # billions
    dtype: str  # weights' dtype, or "gguf" for a GGUF file's own quantization
    weights_bytes: int
    weights_vram_bytes: int  # × WEIGHT_OVERHEAD
    engine: str  # whose KV allocation is planned: "vllm" or "llama.cpp"
    kv_dtype: str
    kv_bytes_per_layer_token: int  # one layer, one token: KV heads × head_dim × 2 × bytes
    global_layers: int
    local_layers: int
    sliding_window: int | None  # tokens; None: every layer global
    local_tokens: int  # tokens a local layer holds for one sequence at this context
    kv_bytes_per_token: int  # each further token of context: the global layers'
    context: int
    concurrency: int
    kv_cache_bytes: int
    kv_cache_all_global_bytes: int  # the same cache were every layer global
    need_bytes: int
    memory_kind: str  # "gpu" or "host"
    memory_source: str  # where memory_bytes came from, for people
    memory_bytes: int
    memory_utilization: float
    budget_bytes: int
    fits: bool
    max_concurrency: int  # at this context, 0 when even the weights do not fit
    max_context: int  # tokens per sequence at this concurrency, at most the model's maximum
    max_context_by_memory: int  # what the memory alone allows (up to LIMITS["context"])
    max_context_limit: str  # "model" (its own maximum) or "memory"
    notes: tuple[str, ...]


def parse_size(text: str) -> int:
    """"24GiB", "24 GB", "80G" → bytes (G = 10^9, GiB = 2^30), from 1 byte to 1 PiB."""
    m = SIZE.match(text)
    if not m:
        raise ValueError(t("{text} is not a size; write e.g. 24GiB, 24GB or 80G",
                           text=f"{text!r:.40}"))
    unit = (m.group(2) or "").upper().rstrip("B")
    size = float(m.group(1)) * UNITS[unit]  # a long run of digits is inf, not an error
    if not 1 <= size <= MAX_GPU_BYTES:
        raise ValueError(t("{text} is out of range: give from 1 byte to 1 PiB (e.g. 24GiB, "
                           "80GB)", text=f"{text!r:.40}"))
    return int(size)


def default_engine(shape: ModelShape) -> str:
    """llama.cpp serves a GGUF file; vLLM a Hugging Face directory."""
    return "llama.cpp" if shape.file_weights_bytes is not None else "vllm"


def kv_bytes_per_layer_token(shape: ModelShape, kv_dtype: str) -> int:
    """KV heads × head_dim × 2 (K and V) × bytes per element (000 §2.1)."""
    return int(shape.kv_heads * shape.head_dim * 2 * DTYPE_BYTES[kv_dtype])


def window_tokens(shape: ModelShape, engine: str) -> int | None:
    """Tokens the engine allocates a local layer for one sequence, before the context caps
    it (the module's docstring says where each engine does it); None without a window."""
    window = shape.sliding_window
    if window is None or not shape.local_layers:
        return None
    if engine == "llama.cpp":
        return -(-(window + LLAMA_UBATCH) // LLAMA_SWA_PAD) * LLAMA_SWA_PAD
    return (-(-window // VLLM_BLOCK) + 1) * VLLM_BLOCK


def sequence_kv_bytes(shape: ModelShape, layer_token: int, window: int | None,
                      context: int) -> int:
    """One sequence's KV cache at ``context`` tokens: global layers × context + local
    layers × min(window, context)."""
    local = shape.local_layers if window is not None else 0
    return layer_token * ((shape.layers - local) * context
                          + local * min(window or 0, context))


def make_plan(shape: ModelShape, gpu_memory_bytes: int, dtype: str | None = None,
              kv_dtype: str | None = None, context: int | None = None,
              concurrency: int = 1, gpu_memory_utilization: float = 0.9,
              engine: str | None = None, memory_kind: str = "gpu",
              memory_source: str = "given") -> CapacityPlan:
    """Weights + KV cache at ``context`` × ``concurrency`` against the memory's budget
    (``gpu_memory_bytes`` × ``gpu_memory_utilization``, a GPU's or the host's).

    PlanError when a figure given is out of range (an engine's flags are anyone's too).
    """
    notes: list[str] = []
    engine = engine or default_engine(shape)
    if engine not in ENGINES:
        raise PlanError(t("engine {engine} is not one of {engines}", engine=shown(engine),
                          engines=", ".join(ENGINES)))
    context = context or shape.max_context or 4096
    _check_inputs(gpu_memory_bytes, context, concurrency, gpu_memory_utilization)
    if dtype is None and shape.file_weights_bytes is not None:
        weights, dtype_name = shape.file_weights_bytes, "gguf"
    else:
        dtype_name = dtype or shape.native_dtype or "fp16"
        weights = int(shape.params * DTYPE_BYTES[dtype_name])
    kv_name = kv_dtype or (dtype_name if dtype_name in ("fp16", "bf16", "fp32") else "fp16")
    if shape.max_context and context > shape.max_context:
        notes.append(t("context {context:,} is above the model's own maximum {most:,} tokens",
                       context=context, most=shape.max_context))
    layer_token = kv_bytes_per_layer_token(shape, kv_name)
    window = window_tokens(shape, engine)
    local = shape.local_layers if window is not None else 0
    per_sequence = sequence_kv_bytes(shape, layer_token, window, context)
    kv_cache = per_sequence * concurrency
    weights_vram = int(weights * WEIGHT_OVERHEAD)
    budget = int(gpu_memory_bytes * gpu_memory_utilization)
    free_for_kv = budget - weights_vram
    if free_for_kv <= 0:
        notes.append(t("the weights alone do not fit: quantize (int8, int4), add GPUs "
                       "(tensor parallelism) or take a larger card"))
    if shape.window_pattern and window is None:
        notes.append(shape.window_pattern)  # a window the engine does not use: say so
    by_memory = _longest_context(shape, layer_token, window, free_for_kv, concurrency)
    cap = shape.max_context or LIMITS["context"][1]
    return CapacityPlan(
        model=shape.name, source=shape.source, params_b=round(shape.params / 1e9, 3),
        dtype=dtype_name, weights_bytes=weights, weights_vram_bytes=weights_vram,
        engine=engine, kv_dtype=kv_name, kv_bytes_per_layer_token=layer_token,
        global_layers=shape.layers - local, local_layers=local,
        sliding_window=shape.sliding_window if window is not None else None,
        local_tokens=min(window, context) if window is not None else 0,
        kv_bytes_per_token=layer_token * (shape.layers - local), context=context,
        concurrency=concurrency, kv_cache_bytes=kv_cache,
        kv_cache_all_global_bytes=layer_token * shape.layers * context * concurrency,
        need_bytes=weights_vram + kv_cache, memory_kind=memory_kind,
        memory_source=safe_display(memory_source), memory_bytes=gpu_memory_bytes,
        memory_utilization=gpu_memory_utilization, budget_bytes=budget,
        fits=weights_vram + kv_cache <= budget,
        max_concurrency=max(free_for_kv // per_sequence, 0) if per_sequence else 0,
        max_context=min(by_memory, cap), max_context_by_memory=by_memory,
        max_context_limit="model" if by_memory > cap else "memory",
        notes=tuple(notes))


def _longest_context(shape: ModelShape, layer_token: int, window: int | None, free: int,
                     concurrency: int) -> int:
    """The most tokens a sequence may hold with ``concurrency`` of them in ``free`` bytes:
    the cache grows with the context, so a bisection over 0 … LIMITS["context"] finds it."""
    low, high = 0, LIMITS["context"][1]
    if free <= 0 or not layer_token:
        return 0
    while low < high:  # at most 33 steps
        mid = (low + high + 1) // 2
        if sequence_kv_bytes(shape, layer_token, window, mid) * concurrency <= free:
            low = mid
        else:
            high = mid - 1
    return low


def _check_inputs(gpu_memory_bytes: int, context: int, concurrency: int,
                  utilization: float) -> None:
    """Integers within LIMITS and a finite share: the arithmetic then stays finite."""
    for name, value, (low, high) in ((t("GPU memory (bytes)"), gpu_memory_bytes, (1, MAX_GPU_BYTES)),
                                     (t("context (tokens)"), context, LIMITS["context"]),
                                     (t("concurrency (sequences)"), concurrency,
                                      (1, MAX_CONCURRENCY))):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise PlanError(t("{name} = {value} is out of range: give {low:,} to {high:,}",
                              name=name, value=shown(value), low=low, high=high))
    if not (isinstance(utilization, (int, float)) and math.isfinite(utilization)
            and 0 < utilization <= 1):
        raise PlanError(t("GPU memory utilization = {value} is out of range: give a share "
                          "above 0 and at most 1 (vLLM's default is 0.9)", value=shown(utilization)))


def binary_size(n: int | float) -> str:
    """Bytes in binary units, one family for every figure of a plan: 1.50 GiB, 96.0 MiB, 3.0 KiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:,.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{n:,.0f} bytes"


def _sequences(n: int) -> str:
    return f"{n:,} sequence" + ("" if n == 1 else "s")


def render(plan: CapacityPlan) -> str:
    """The plan for people, one figure a line, every size in binary units (GiB, MiB, KiB)."""
    verdict = "fits" if plan.fits else "does NOT fit"
    memory = ("GPU memory" if plan.memory_kind == "gpu" else "host memory")
    at = f"{plan.context:,} tokens x {_sequences(plan.concurrency)}"
    share = "all of" if plan.memory_utilization == 1 else f"{plan.memory_utilization:g} of"
    lines = [
        f"{plan.model}  ({plan.params_b:g} billion parameters, from {plan.source})",
        f"  engine: {ENGINE_NAMES[plan.engine]}; {memory}: {binary_size(plan.memory_bytes)} "
        f"({plan.memory_source})",
        f"  weights ({plan.dtype}): {binary_size(plan.weights_bytes)}; with runtime overhead "
        f"x{WEIGHT_OVERHEAD:g}: {binary_size(plan.weights_vram_bytes)}",
        f"  KV cache per token of context ({plan.kv_dtype}): "
        + (f"{binary_size(plan.kv_bytes_per_token)} ({plan.global_layers} global layers x "
           f"{binary_size(plan.kv_bytes_per_layer_token)})" if plan.global_layers else
           f"none past the window (every layer local, {binary_size(plan.kv_bytes_per_layer_token)}"
           " a layer and token)"),
    ]
    if plan.local_layers:
        lines.append(f"  sliding window: {plan.local_layers} of "
                     f"{plan.global_layers + plan.local_layers} layers keep the last "
                     f"{plan.sliding_window:,} tokens; {ENGINE_NAMES[plan.engine]} allocates each "
                     f"{plan.local_tokens:,} tokens a sequence")
    ratio = (f"; every layer global: {binary_size(plan.kv_cache_all_global_bytes)}, "
             f"{plan.kv_cache_all_global_bytes / plan.kv_cache_bytes:.2f}x as much"
             if plan.local_layers and plan.kv_cache_bytes else "")
    if plan.max_context_limit == "model":
        allowed = ("any" if plan.max_context_by_memory >= LIMITS["context"][1]
                   else f"{plan.max_context_by_memory:,}")
        longest = (f"{plan.max_context:,} tokens (the model's maximum; memory would allow "
                   f"{allowed})")
    else:
        longest = f"{plan.max_context:,} tokens (memory)"
    lines += [
        f"  KV cache at {at}: {binary_size(plan.kv_cache_bytes)}{ratio}",
        f"  needed {binary_size(plan.need_bytes)} of {binary_size(plan.budget_bytes)} "
        f"({share} {binary_size(plan.memory_bytes)} {memory}): "
        f"{verdict}",
        f"  largest concurrency at {plan.context:,} tokens: {plan.max_concurrency:,}; "
        f"longest context at {_sequences(plan.concurrency)}: {longest}",
    ]
    lines += [f"  note: {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"
