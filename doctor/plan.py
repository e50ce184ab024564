"""Capacity plan: weights, KV cache and whether a model fits a card (../shared/domain.md §3).

The model's shape is read from the model itself: a Hugging Face ``config.json`` (the file,
or the directory holding it) or a GGUF file's metadata. The formulas are the articles':

* weights: params × bytes per param; in VRAM × 1.2 for activations and runtime overhead
  (000 §2.1, 004 §2.1: "actual use runs 20–50 % over the weights");
* KV cache bytes per token: layers × KV heads × head_dim × 2 (K and V) × bytes per element
  (000 §2.1); the cache: that × context × concurrent sequences.

Manual equivalent: the arithmetic above with the numbers from ``config.json``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from doctor.gguf import GGUFError, read_header

WEIGHT_OVERHEAD = 1.2  # 000 §2.1, 004 §2.1
DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|B)?\s*$", re.I)
UNITS = {"": 1, "B": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
         "KI": 1 << 10, "MI": 1 << 20, "GI": 1 << 30, "TI": 1 << 40}


class ModelFileError(Exception):
    """A model file cannot give its shape; the message names the file and what to do."""


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    source: str  # the file the shape was read from
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    params: int
    native_dtype: str | None  # fp16/bf16/fp32 from config.json; None for GGUF (quantized)
    file_weights_bytes: int | None  # GGUF: the file's size (its quantized weights)
    max_context: int | None  # max_position_embeddings / <arch>.context_length


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
    """"24GiB", "24 GB", "80G" → bytes (G = 10^9, GiB = 2^30)."""
    m = SIZE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a size; write e.g. 24GiB, 24GB or 80G")
    unit = (m.group(2) or "").upper().rstrip("B")
    return int(float(m.group(1)) * UNITS[unit])


def read_shape(path: str) -> ModelShape:
    """The model's shape from a config.json (or its directory) or a .gguf file."""
    if os.path.isdir(path):
        config = os.path.join(path, "config.json")
        if os.path.isfile(config):
            return _from_config(config)
        ggufs = sorted(f for f in os.listdir(path) if f.endswith(".gguf"))
        if ggufs:
            return _from_gguf(os.path.join(path, ggufs[0]))
        raise ModelFileError(f"{path}: holds neither config.json nor a .gguf file; pass the "
                             "model's directory, its config.json or its .gguf file")
    if not os.path.isfile(path):
        if os.path.exists(path):  # a FIFO would block the open; a device is no model either
            raise ModelFileError(f"{path}: not a regular file (a FIFO, device or socket); pass "
                                 "the model's directory, its config.json or its .gguf file")
        raise ModelFileError(f"{path}: no such file or directory")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    # a .gguf name is a GGUF file, so an empty or damaged one says so rather than "not JSON"
    gguf = magic == b"GGUF" or path.endswith(".gguf")
    return _from_gguf(path) if gguf else _from_config(path)


def _from_config(path: str) -> ModelShape:
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{path}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg}); pass a "
                             "Hugging Face config.json or a .gguf file") from None
    return shape_from_config(raw, path)


def shape_from_config(raw: object, path: str) -> ModelShape:
    """A decoder's shape from a parsed Hugging Face config.json (``path`` for messages)."""
    if not isinstance(raw, dict):
        raise ModelFileError(f"{path}: not a Hugging Face config.json (a JSON object)")
    nested = raw.get("text_config")  # multimodal configs hold the decoder's shape here
    cfg: dict = nested if isinstance(nested, dict) else raw
    try:
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFileError(f"{path}: missing or bad {exc} (a decoder's config.json has "
                             "num_hidden_layers, num_attention_heads, hidden_size)") from None
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    return ModelShape(
        name=str(raw.get("_name_or_path") or os.path.basename(os.path.dirname(path)) or path),
        source=path, layers=layers, attention_heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, params=_params_of(cfg, layers, heads, kv_heads, head_dim, hidden),
        native_dtype=_native_dtype(raw, cfg), file_weights_bytes=None,
        max_context=cfg.get("max_position_embeddings"))


def _native_dtype(raw: dict, cfg: dict) -> str | None:
    """The weights' dtype: a quantization_config's bits (AWQ/GPTQ 4, 8; fp8), else torch_dtype."""
    quant = raw.get("quantization_config")
    if isinstance(quant, dict):
        if str(quant.get("quant_method", "")).lower() == "fp8":
            return "fp8"
        bits = {4: "int4", 8: "int8"}.get(int(quant.get("bits") or quant.get("w_bit") or 0))
        if bits:
            return bits
    return TORCH_DTYPES.get(str(raw.get("torch_dtype") or cfg.get("torch_dtype") or ""))


def _params_of(cfg: dict, layers: int, heads: int, kv_heads: int, head_dim: int,
               hidden: int) -> int:
    """Parameters of a Llama-style decoder from its config (gated MLP, RMS norms).

    Llama-2-7B gives 6.74 B and Llama-2-13B 13.02 B, as their model cards say.
    """
    vocab = int(cfg.get("vocab_size") or 0)
    inter = int(cfg.get("intermediate_size") or 4 * hidden)
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * inter
    per_layer = attention + mlp + 2 * hidden
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return layers * per_layer + embeddings + hidden


def _from_gguf(path: str) -> ModelShape:
    try:
        header = read_header(path)
    except GGUFError as exc:
        raise ModelFileError(str(exc)) from None
    meta = header.metadata
    arch = meta.get("general.architecture")
    try:
        layers = int(meta[f"{arch}.block_count"])
        heads = int(meta[f"{arch}.attention.head_count"])
        hidden = int(meta[f"{arch}.embedding_length"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFileError(f"{path}: GGUF metadata lacks {exc} for architecture {arch!r}; "
                             "it is not a decoder model llm-doctor can size") from None
    kv_heads = int(meta.get(f"{arch}.attention.head_count_kv") or heads)
    head_dim = int(meta.get(f"{arch}.attention.key_length") or hidden // heads)
    return ModelShape(
        name=str(meta.get("general.name") or os.path.basename(path)), source=path,
        layers=layers, attention_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        params=header.param_count, native_dtype=None, file_weights_bytes=header.file_bytes,
        max_context=meta.get(f"{arch}.context_length"))


def kv_bytes_per_token(shape: ModelShape, kv_dtype: str) -> int:
    """layers × KV heads × head_dim × 2 (K and V) × bytes per element (000 §2.1)."""
    return int(shape.layers * shape.kv_heads * shape.head_dim * 2 * DTYPE_BYTES[kv_dtype])


def make_plan(shape: ModelShape, gpu_memory_bytes: int, dtype: str | None = None,
              kv_dtype: str | None = None, context: int | None = None,
              concurrency: int = 1, gpu_memory_utilization: float = 0.9) -> Plan:
    """Weights + KV cache at ``context`` × ``concurrency`` against the card's budget."""
    notes: list[str] = []
    if dtype is None and shape.file_weights_bytes is not None:
        weights, dtype_name = shape.file_weights_bytes, "gguf"
    else:
        dtype_name = dtype or shape.native_dtype or "fp16"
        weights = int(shape.params * DTYPE_BYTES[dtype_name])
    kv_name = kv_dtype or (dtype_name if dtype_name in ("fp16", "bf16", "fp32") else "fp16")
    context = context or shape.max_context or 4096
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

