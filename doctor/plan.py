"""Capacity plan: weights, KV cache and whether a model fits a card (../shared/domain.md §3).

The model's shape is read from the model itself: a Hugging Face ``config.json`` (the file,
or the directory holding it) or a GGUF file's metadata. The formulas are the articles':

* weights: params × bytes per param; in VRAM × 1.2 for activations and runtime overhead
  (000 §2.1, 004 §2.1: "actual use runs 20–50 % over the weights");
* KV cache bytes per token: layers × KV heads × head_dim × 2 (K and V) × bytes per element
  (000 §2.1); the cache: that × context × concurrent sequences.

Both files may be anyone's. Each is read bounded (doctor/tomlfile.read_text for the JSON,
doctor/gguf.py for the binary header: a FIFO or device is refused before any read, and
nothing is allocated from a length the file declares), and every value used is checked by
one accessor, ``Fields``: integers within what real decoders hold (``LIMITS``), never a
float, string or boolean, so the arithmetic can neither divide by zero nor overflow to
infinity. A bad value is a ModelFileError naming the file and the key.

Manual equivalent: the arithmetic above with the numbers from ``config.json``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from doctor.gguf import MAGIC, GGUFError, open_regular, read_header
from doctor.redact import safe_display
from doctor.tomlfile import read_text

WEIGHT_OVERHEAD = 1.2  # 000 §2.1, 004 §2.1
DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|B)?\s*$", re.I)
UNITS = {"": 1, "B": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
         "KI": 1 << 10, "MI": 1 << 20, "GI": 1 << 30, "TI": 1 << 40}
MAX_CONFIG_BYTES = 4 << 20  # a config.json is a few KB; the host seam reads 4 MiB too
# What real decoders hold, with room: Llama-3.1-405B has 126 layers, 128 heads, hidden 16,384;
# Llama 4 Scout a 10 M-token context (GGUF keeps it as a uint32). Outside these a figure is
# a damaged file, and sizing it would divide by zero or overflow.
LIMITS = {"layers": (1, 10_000), "heads": (1, 100_000), "head_dim": (1, 100_000),
          "hidden": (1, 1_000_000), "intermediate": (1, 10_000_000), "vocab": (0, 100_000_000),
          "context": (1, 1 << 32), "bits": (0, 64), "params": (0, 10**14), "bytes": (0, 1 << 50)}
MAX_CONCURRENCY = 1_000_000  # sequences
MAX_GPU_BYTES = 1 << 50  # 1 PiB: more than any node's cards together
NAME_CHARS = 200  # of a model's name shown


class PlanError(Exception):
    """A plan cannot be made; the message names the file or figure and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(safe_display(message))  # a path or name may hold any character


class ModelFileError(PlanError):
    """A model file cannot give its shape; the message names the file, the key and what to do."""


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


@dataclass(frozen=True, slots=True)
class _Huge:
    """A JSON integer too long to be a figure, kept as its length (never converted: Python
    refuses integers over 4,300 digits, and long ones cost quadratic time)."""

    digits: int


def _show(value: Any) -> str:
    """A value for a message: short, one line, never the whole of a container."""
    if isinstance(value, _Huge):
        return f"a {value.digits:,}-digit number"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"a {len(str(abs(value)))}-digit number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, tuple) and value[:1] == ("array",):
        return f"an array of {value[1]:,} values"
    if isinstance(value, list):
        return f"an array of {len(value)} values"
    if isinstance(value, str) and len(value) > 40:
        return repr(value[:40]) + "…"
    return repr(value)


REQUIRED = object()


class Fields:
    """The values of one model file (or a recorded shape), read key by key.

    Each read checks what it gets: ``integer`` an int (not a bool, float or string) within
    ``LIMITS[limit]``, ``text`` a string, ``flag`` a boolean, ``table`` an object. An absent
    key (or JSON null) gives the default; a required one missing, or any value of the wrong
    type or range, is a ModelFileError naming the file and the key, with ``hint`` after it.
    """

    def __init__(self, values: Mapping[str, Any], source: str, hint: str,
                 prefix: str = "") -> None:
        self.values, self.source, self.hint, self.prefix = values, source, hint, prefix

    def error(self, key: str, problem: str) -> ModelFileError:
        return ModelFileError(f"{self.source}: {self.prefix}{key} {problem}; {self.hint}")

    def _get(self, key: str, default: Any) -> Any:
        value = self.values.get(key)
        if value is None and default is REQUIRED:
            raise self.error(key, "is missing")
        return value

    def integer(self, key: str, limit: str, default: Any = None) -> Any:
        value = self._get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, _Huge)):
            raise self.error(key, f"= {_show(value)} is not an integer")
        low, high = LIMITS[limit]
        if isinstance(value, _Huge) or not low <= value <= high:
            raise self.error(key, f"= {_show(value)} is out of range (a real model's is "
                                  f"{low:,} to {high:,})")
        return value

    def text(self, key: str, default: Any = None) -> Any:
        value = self._get(key, default)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"= {_show(value)} is not a string")
        return value

    def flag(self, key: str) -> bool | None:
        value = self.values.get(key)
        if value is None or isinstance(value, bool):
            return value
        raise self.error(key, f"= {_show(value)} is not true or false")

    def table(self, key: str) -> Fields | None:
        value = self.values.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(key, f"= {_show(value)} is not an object")
        return Fields(value, self.source, self.hint, f"{self.prefix}{key}.")


def _name(text: str) -> str:
    """A model's name as shown: control characters escaped, at most NAME_CHARS."""
    return safe_display(text[:NAME_CHARS])


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


def read_shape(path: str) -> ModelShape:
    """The model's shape from a config.json (or its directory) or a .gguf file."""
    if os.path.isdir(path):
        return _from_directory(path)
    try:
        f, _ = open_regular(path)  # refuses a FIFO or device before reading
        with f:
            magic = f.read(4)
    except GGUFError as exc:
        raise ModelFileError(str(exc)) from None
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    # a .gguf name is a GGUF file, so an empty or damaged one says so rather than "not JSON"
    gguf = magic == MAGIC or path.endswith(".gguf")
    return _from_gguf(path) if gguf else _from_config(path)


def _from_directory(path: str) -> ModelShape:
    config = os.path.join(path, "config.json")
    if os.path.lexists(config):  # whatever it is: a FIFO or a dangling link is said so
        return _from_config(config)
    try:
        names = os.listdir(path)
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot list it ({exc.strerror or exc})") from None
    ggufs = sorted(f for f in names if f.endswith(".gguf"))
    if ggufs:  # the first shard of a split model comes first
        return _from_gguf(os.path.join(path, ggufs[0]))
    raise ModelFileError(f"{path}: holds neither config.json nor a .gguf file; pass the "
                         "model's directory, its config.json or its .gguf file")


def _from_config(path: str) -> ModelShape:
    text = read_text(Path(path), "model's config.json", ModelFileError, MAX_CONFIG_BYTES)
    return shape_from_config(parse_config(text, path), path)


def _int_or_huge(digits: str) -> int | _Huge:
    return int(digits) if len(digits) <= 30 else _Huge(len(digits.lstrip("-")))


def parse_config(text: str, path: str) -> Any:
    """A config.json's text parsed; bad JSON and absurd nesting name the file. Integers of
    more than 30 digits stay unconverted (``_Huge``): refused if used, ignored if not."""
    try:
        return json.loads(text, parse_int=_int_or_huge)
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg}); pass a "
                             "Hugging Face config.json or a .gguf file") from None
    except RecursionError:  # the parser recurses once per level of [[[...]]] or {"a": {...}}
        raise ModelFileError(f"{path}: not valid JSON for a config.json: arrays or objects "
                             "nested too deeply") from None
    except ValueError as exc:
        raise ModelFileError(f"{path}: not valid JSON ({exc})") from None


CONFIG_HINT = ("the file is damaged, or not a decoder's Hugging Face config.json (which holds "
               "num_hidden_layers, num_attention_heads and hidden_size as whole numbers)")


def shape_from_config(raw: object, path: str) -> ModelShape:
    """A decoder's shape from a parsed Hugging Face config.json (``path`` for messages).

    Parameters are a Llama-style decoder's (gated MLP, RMS norms): Llama-2-7B gives 6.74 B
    and Llama-2-13B 13.02 B, as their model cards say.
    """
    if not isinstance(raw, dict):
        raise ModelFileError(f"{path}: not a Hugging Face config.json (a JSON object)")
    top = Fields(raw, path, CONFIG_HINT)
    nested = raw.get("text_config")  # multimodal configs hold the decoder's shape here
    cfg = Fields(nested, path, CONFIG_HINT, "text_config.") if isinstance(nested, dict) else top
    layers = cfg.integer("num_hidden_layers", "layers", REQUIRED)
    heads = cfg.integer("num_attention_heads", "heads", REQUIRED)
    hidden = cfg.integer("hidden_size", "hidden", REQUIRED)
    kv_heads = cfg.integer("num_key_value_heads", "heads", heads)
    head_dim = (cfg.integer("head_dim", "head_dim")
                or _head_dim(cfg, "hidden_size", hidden, "num_attention_heads", heads))
    vocab = cfg.integer("vocab_size", "vocab", 0)
    inter = cfg.integer("intermediate_size", "intermediate", 4 * hidden)
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    per_layer = attention + 3 * hidden * inter + 2 * hidden  # gated MLP, two RMS norms
    embeddings = vocab * hidden * (1 if cfg.flag("tie_word_embeddings") else 2)
    params = layers * per_layer + embeddings + hidden
    if params > LIMITS["params"][1]:  # each figure in range, together beyond any model
        raise cfg.error("num_hidden_layers", f"= {layers} with hidden_size = {hidden} and "
                                             f"intermediate_size = {inter} gives {params:.3g} "
                                             "parameters, more than any model has")
    name = top.text("_name_or_path") or os.path.basename(os.path.dirname(path)) or path
    return ModelShape(
        name=_name(name), source=safe_display(path), layers=layers, attention_heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, params=params,
        native_dtype=_native_dtype(top, cfg), file_weights_bytes=None,
        max_context=cfg.integer("max_position_embeddings", "context"))


def _head_dim(got: Fields, hidden_key: str, hidden: int, heads_key: str, heads: int) -> int:
    """head_dim where the file gives none: the hidden size over the attention heads."""
    if hidden // heads < 1:
        raise got.error(hidden_key, f"= {hidden} over {heads_key} = {heads} gives a head_dim "
                                    "of 0")
    return hidden // heads


def _native_dtype(top: Fields, cfg: Fields) -> str | None:
    """The weights' dtype: a quantization_config's bits (AWQ/GPTQ 4, 8; fp8), else torch_dtype."""
    quant = top.table("quantization_config")
    if quant is not None:
        if (quant.text("quant_method") or "").lower() == "fp8":
            return "fp8"
        bits = quant.integer("bits", "bits") or quant.integer("w_bit", "bits")
        if bits in (4, 8):
            return {4: "int4", 8: "int8"}[bits]
    return TORCH_DTYPES.get(top.text("torch_dtype") or cfg.text("torch_dtype") or "")


GGUF_HINT = "the file is damaged, or not a decoder model llm-doctor can size"


def _from_gguf(path: str) -> ModelShape:
    try:
        header = read_header(path)
    except GGUFError as exc:
        raise ModelFileError(str(exc)) from None
    if header.file_bytes > LIMITS["bytes"][1]:
        raise ModelFileError(f"{path}: {header.file_bytes:,} bytes; no model file is that "
                             "large, the file is damaged or sparse")
    meta = Fields(header.metadata, path, GGUF_HINT)
    arch = meta.text("general.architecture", REQUIRED)
    if not arch or len(arch) > 64:
        raise meta.error("general.architecture", f"= {_show(arch)} is no architecture's name")
    layers = meta.integer(f"{arch}.block_count", "layers", REQUIRED)
    heads = meta.integer(f"{arch}.attention.head_count", "heads", REQUIRED)
    hidden = meta.integer(f"{arch}.embedding_length", "hidden", REQUIRED)
    head_dim = (meta.integer(f"{arch}.attention.key_length", "head_dim")
                or _head_dim(meta, f"{arch}.embedding_length", hidden,
                             f"{arch}.attention.head_count", heads))
    return ModelShape(
        name=_name(meta.text("general.name") or os.path.basename(path)),
        source=safe_display(path),
        layers=layers, attention_heads=heads,
        kv_heads=meta.integer(f"{arch}.attention.head_count_kv", "heads", heads),
        head_dim=head_dim, params=header.param_count, native_dtype=None,
        file_weights_bytes=header.file_bytes,
        max_context=meta.integer(f"{arch}.context_length", "context"))


# A recorded shape's fields (probes/engine_capacity.py replays them), by LIMITS.
SHAPE_LIMITS = {"layers": "layers", "attention_heads": "heads", "kv_heads": "heads",
                "head_dim": "head_dim", "params": "params", "file_weights_bytes": "bytes",
                "max_context": "context"}
REQUIRED_FIELDS = ("layers", "attention_heads", "kv_heads", "head_dim", "params")


def shape_from_values(values: object, source: str, hint: str) -> ModelShape:
    """A ModelShape from plain values (a recording's), each field checked as a file's are."""
    if not isinstance(values, dict):
        raise ModelFileError(f"{source}: expected the model's shape (an object), got "
                             f"{type(values).__name__}; {hint}")
    got = Fields(values, source, hint)
    shape: dict[str, Any] = {f: got.integer(f, limit, REQUIRED if f in REQUIRED_FIELDS else None)
                             for f, limit in SHAPE_LIMITS.items()}
    shape["name"], shape["source"] = got.text("name", REQUIRED), got.text("source", REQUIRED)
    dtype = got.text("native_dtype")
    if dtype is not None and dtype not in DTYPE_BYTES:
        raise got.error("native_dtype", f"= {_show(dtype)} is not one of "
                                        f"{', '.join(sorted(DTYPE_BYTES))}")
    shape["native_dtype"] = dtype
    assert set(shape) == {f.name for f in fields(ModelShape)}  # a new field needs a check
    return ModelShape(**shape)


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
            raise PlanError(f"{name} = {_show(value)} is out of range: give {low:,} to {high:,}")
    if not (isinstance(utilization, (int, float)) and math.isfinite(utilization)
            and 0 < utilization <= 1):
        raise PlanError(f"GPU memory utilization = {_show(utilization)} is out of range: give "
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

