"""A model's shape (layers, heads, head_dim, parameters) from its config.json or GGUF header.

The shape is read from the model itself: a Hugging Face ``config.json`` (the file, or the
directory holding it) or a GGUF file's metadata and tensor table (doctor/workload/gguf.py).

Both files may be anyone's. Each is read bounded (doctor/tomlfile.read_text for the JSON,
doctor/workload/gguf.py for the binary header: a FIFO or device is refused before any read, and
nothing is allocated from a length the file declares), and every value used is checked by
one accessor, ``Fields``: integers within what real decoders hold (``LIMITS``), never a
float, string or boolean, so doctor/workload/plan.py's arithmetic can neither divide by zero nor
overflow to infinity. A bad value is a ModelFileError naming the file and the key. A
recorded shape (probes/engine/capacity.py replays one) is checked by the same accessor.

Sliding-window layers (``local_layers`` of ``layers``, each keeping the last ``sliding_window``
tokens; the others attend to the whole context) are read as the engines read them:

* config.json (transformers' ``configuration_<model>.py``, which vLLM reads): ``layer_types``
  (one ``"sliding_attention"`` or ``"full_attention"`` a layer) where given; else
  ``sliding_window_pattern`` N (every Nth layer global, the rest local: gemma-3's 6 gives 5
  local : 1 global); else the model type's fixed pattern (``HF_PATTERNS``: gemma-3 6,
  gemma-2 2); else Qwen2's ``use_sliding_window`` with ``max_window_layers`` (layers from that
  index on are local); else a ``sliding_window`` alone applies to every layer (Mistral-7B-v0.1).
  ``sliding_window`` null, or ``use_sliding_window`` false, is no window.
* GGUF (llama.cpp's ``llama_model::load_hparams`` in src/llama-model.cpp): the window is
  ``<arch>.attention.sliding_window``; the layers are ``<arch>.attention.sliding_window_pattern``
  where the file carries it (a period N, or one boolean a layer), else the architecture's
  fixed pattern as llama.cpp sets it (``GGUF_PATTERNS``: gemma3 ``set_swa_pattern(6)``,
  gemma2 ``set_swa_pattern(2)``). An architecture llama.cpp gives no pattern runs every
  layer global, whatever window the file declares (llama.cpp turns Phi-3's off), and is
  sized so, with ``window_pattern`` saying why.

Manual equivalent: the keys above in ``config.json``; a GGUF header as doctor/workload/gguf.py says.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from doctor.i18n import lazy, t, translated
from doctor.workload.gguf import MAGIC, GGUFError, open_regular, read_header
from doctor.redact import safe_display
from doctor.tomlfile import read_text

# Weights' and KV cache's precisions, in bytes per element.
DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
MAX_CONFIG_BYTES = 4 << 20  # a config.json is a few KB; the host seam reads 4 MiB too
# What real decoders hold, with room: Llama-3.1-405B has 126 layers, 128 heads, hidden 16,384;
# Llama 4 Scout a 10 M-token context (GGUF keeps it as a uint32). Outside these a figure is
# a damaged file, and sizing it would divide by zero or overflow.
LIMITS = {"layers": (1, 10_000), "heads": (1, 100_000), "head_dim": (1, 100_000),
          "hidden": (1, 1_000_000), "intermediate": (1, 10_000_000), "vocab": (0, 100_000_000),
          "context": (1, 1 << 32), "bits": (0, 64), "params": (0, 10**14), "bytes": (0, 1 << 50),
          "window": (1, 1 << 32), "local_layers": (0, 10_000), "pattern": (1, 10_000)}
# Every Nth layer global, the rest local, where the file names no layout of its own:
# transformers' Gemma3TextConfig (sliding_window_pattern = 6) and Gemma2Config (alternating);
# llama.cpp's llama_model::load_hparams (LLM_ARCH_GEMMA3: set_swa_pattern(6), LLM_ARCH_GEMMA2:
# set_swa_pattern(2), which makes layer i local when i % N < N - 1).
HF_PATTERNS = {"gemma3": 6, "gemma3_text": 6, "gemma2": 2}
GGUF_PATTERNS = {"gemma3": 6, "gemma2": 2}
GEMMA2_WINDOW = 4096  # llama.cpp's default n_swa for gemma2 when the file gives none
NAME_CHARS = 200  # of a model's name shown


class ModelFileError(Exception):
    """A model file cannot give its shape; the message names the file, the key and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(safe_display(message))  # a path or name may hold any character


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
    sliding_window: int | None  # tokens a local layer keeps; None: no layer has a window
    local_layers: int  # layers with that window (0 to layers); the others are global
    window_pattern: str | None  # where the local layers were read from, for people


@dataclass(frozen=True, slots=True)
class _Huge:
    """A JSON integer too long to be a figure, kept as its length (never converted: Python
    refuses integers over 4,300 digits, and long ones cost quadratic time)."""

    digits: int


def shown(value: Any) -> str:
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
        return ModelFileError(t("{source}: {key} {problem}; {hint}", source=self.source,
                                key=f"{self.prefix}{key}", problem=problem,
                                hint=translated(self.hint)))

    def _get(self, key: str, default: Any) -> Any:
        value = self.values.get(key)
        if value is None and default is REQUIRED:
            raise self.error(key, t("is missing"))
        return value

    def integer(self, key: str, limit: str, default: Any = None) -> Any:
        value = self._get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, _Huge)):
            raise self.error(key, t("= {value} is not an integer", value=shown(value)))
        low, high = LIMITS[limit]
        if isinstance(value, _Huge) or not low <= value <= high:
            raise self.error(key, t("= {value} is out of range (a real model's is {low:,} to "
                                    "{high:,})", value=shown(value), low=low, high=high))
        return value

    def text(self, key: str, default: Any = None) -> Any:
        value = self._get(key, default)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(key, t("= {value} is not a string", value=shown(value)))
        return value

    def flag(self, key: str) -> bool | None:
        value = self.values.get(key)
        if value is None or isinstance(value, bool):
            return value
        raise self.error(key, t("= {value} is not true or false", value=shown(value)))

    def table(self, key: str) -> Fields | None:
        value = self.values.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(key, t("= {value} is not an object", value=shown(value)))
        return Fields(value, self.source, self.hint, f"{self.prefix}{key}.")


def _name(text: str) -> str:
    """A model's name as shown: control characters escaped, at most NAME_CHARS."""
    return safe_display(text[:NAME_CHARS])


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
        raise ModelFileError(t("{path}: cannot read it ({error})", path=path,
                               error=exc.strerror or exc)) from None
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
        raise ModelFileError(t("{path}: cannot list it ({error})", path=path,
                               error=exc.strerror or exc)) from None
    ggufs = sorted(f for f in names if f.endswith(".gguf"))
    if ggufs:  # the first shard of a split model comes first
        return _from_gguf(os.path.join(path, ggufs[0]))
    raise ModelFileError(t("{path}: holds neither config.json nor a .gguf file; pass the "
                           "model's directory, its config.json or its .gguf file", path=path))


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
        raise ModelFileError(t("{path}: line {line}: not valid JSON ({error}); pass a Hugging "
                               "Face config.json or a .gguf file", path=path, line=exc.lineno,
                               error=exc.msg)) from None
    except RecursionError:  # the parser recurses once per level of [[[...]]] or {"a": {...}}
        raise ModelFileError(t("{path}: not valid JSON for a config.json: arrays or objects "
                               "nested too deeply", path=path)) from None
    except ValueError as exc:
        raise ModelFileError(t("{path}: not valid JSON ({error})", path=path, error=exc)) from None


CONFIG_HINT = lazy("the file is damaged, or not a decoder's Hugging Face config.json (which holds "
               "num_hidden_layers, num_attention_heads and hidden_size as whole numbers)")


def shape_from_config(raw: object, path: str) -> ModelShape:
    """A decoder's shape from a parsed Hugging Face config.json (``path`` for messages).

    Parameters are a Llama-style decoder's (gated MLP, RMS norms): Llama-2-7B gives 6.74 B
    and Llama-2-13B 13.02 B, as their model cards say.
    """
    if not isinstance(raw, dict):
        raise ModelFileError(t("{path}: not a Hugging Face config.json (a JSON object)",
                               path=path))
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
    window, local, pattern = _config_windows(top, cfg, layers)
    return ModelShape(
        name=_name(name), source=safe_display(path), layers=layers, attention_heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, params=params,
        native_dtype=_native_dtype(top, cfg), file_weights_bytes=None,
        max_context=cfg.integer("max_position_embeddings", "context"),
        sliding_window=window, local_layers=local, window_pattern=pattern)


def _every_nth_global(layers: int, period: int) -> int:
    """Local layers when every ``period``-th is global (layer i local when i % N < N - 1)."""
    return layers - layers // period


def _config_windows(top: Fields, cfg: Fields, layers: int) -> tuple[int | None, int, str | None]:
    """(window, local layers, where from) of a config.json, as the module's docstring says."""
    window = cfg.integer("sliding_window", "window")
    if window is None:
        return None, 0, None
    if cfg.flag("use_sliding_window") is False:  # Qwen2: the window is declared, not used
        return None, 0, (f"sliding_window = {window:,} unused (use_sliding_window is false): "
                         "every layer global")
    types = cfg.values.get("layer_types")
    if types is not None:
        if (not isinstance(types, list) or len(types) != layers
                or not all(isinstance(t, str) for t in types)):
            raise cfg.error("layer_types", f"= {shown(types)} is not one attention type (a "
                                           f"string) for each of the {layers} layers")
        local = sum(t == "sliding_attention" for t in types)
        return window, local, f"layer_types: {local} of {layers} sliding_attention"
    period = cfg.integer("sliding_window_pattern", "pattern")
    if period is not None:
        return (window, _every_nth_global(layers, period),
                f"sliding_window_pattern {period}: every {_ordinal(period)} layer global")
    model_type = cfg.text("model_type") or top.text("model_type") or ""
    if model_type in HF_PATTERNS:
        period = HF_PATTERNS[model_type]
        return (window, _every_nth_global(layers, period),
                f"{model_type}'s fixed pattern: every {_ordinal(period)} layer global")
    if cfg.flag("use_sliding_window"):  # Qwen2: layers from max_window_layers on are local
        first = cfg.integer("max_window_layers", "local_layers", 0)
        local = max(layers - first, 0)
        return window, local, f"use_sliding_window from layer max_window_layers = {first}"
    return window, layers, "sliding_window for every layer (no layer_types)"


def _ordinal(n: int) -> str:
    return {1: "", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


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


GGUF_HINT = lazy("the file is damaged, or not a decoder model llm-doctor can size")


def _from_gguf(path: str) -> ModelShape:
    try:
        header = read_header(path)
    except GGUFError as exc:
        raise ModelFileError(str(exc)) from None
    if header.file_bytes > LIMITS["bytes"][1]:
        raise ModelFileError(t("{path}: {size:,} bytes; no model file is that large, the file "
                               "is damaged or sparse", path=path, size=header.file_bytes))
    meta = Fields(header.metadata, path, GGUF_HINT)
    arch = meta.text("general.architecture", REQUIRED)
    if not arch or len(arch) > 64:
        raise meta.error("general.architecture", f"= {shown(arch)} is no architecture's name")
    layers = meta.integer(f"{arch}.block_count", "layers", REQUIRED)
    heads = meta.integer(f"{arch}.attention.head_count", "heads", REQUIRED)
    hidden = meta.integer(f"{arch}.embedding_length", "hidden", REQUIRED)
    head_dim = (meta.integer(f"{arch}.attention.key_length", "head_dim")
                or _head_dim(meta, f"{arch}.embedding_length", hidden,
                             f"{arch}.attention.head_count", heads))
    window, local, pattern = _gguf_windows(meta, arch, layers)
    return ModelShape(
        name=_name(meta.text("general.name") or os.path.basename(path)),
        source=safe_display(path),
        layers=layers, attention_heads=heads,
        kv_heads=meta.integer(f"{arch}.attention.head_count_kv", "heads", heads),
        head_dim=head_dim, params=header.param_count, native_dtype=None,
        file_weights_bytes=header.file_bytes,
        max_context=meta.integer(f"{arch}.context_length", "context"),
        sliding_window=window, local_layers=local, window_pattern=pattern)


def _gguf_windows(meta: Fields, arch: str, layers: int) -> tuple[int | None, int, str | None]:
    """(window, local layers, where from) of a GGUF header, as llama.cpp's load_hparams sets
    them (the module's docstring)."""
    key, pattern_key = f"{arch}.attention.sliding_window", f"{arch}.attention.sliding_window_pattern"
    window = meta.integer(key, "window")
    raw = meta.values.get(pattern_key)
    if raw is None and arch not in GGUF_PATTERNS:
        if window is None:
            return None, 0, None
        return None, 0, (f"{key} = {window:,} unused: llama.cpp gives {arch} no "
                         "sliding-window layers")
    if window is None and arch == "gemma2":
        window = GEMMA2_WINDOW
    if window is None:
        raise meta.error(key, f"is missing, which llama.cpp needs for {pattern_key if raw is not None else arch}")
    if raw is None:
        period = GGUF_PATTERNS[arch]
        return (window, _every_nth_global(layers, period),
                f"llama.cpp's fixed {arch} pattern: every {_ordinal(period)} layer global")
    if isinstance(raw, list):
        if len(raw) != layers or not all(isinstance(v, bool) for v in raw):
            raise meta.error(pattern_key, f"= {shown(raw)} is not one true or false for "
                                          f"each of the {layers} layers")
        return window, sum(raw), f"{pattern_key}: {sum(raw)} of {layers} layers"
    period = meta.integer(pattern_key, "pattern")
    return (window, _every_nth_global(layers, period),
            f"{pattern_key} {period}: every {_ordinal(period)} layer global")


# A recorded shape's fields (probes/engine/capacity.py replays them), by LIMITS.
SHAPE_LIMITS = {"layers": "layers", "attention_heads": "heads", "kv_heads": "heads",
                "head_dim": "head_dim", "params": "params", "file_weights_bytes": "bytes",
                "max_context": "context", "sliding_window": "window",
                "local_layers": "local_layers"}
REQUIRED_FIELDS = ("layers", "attention_heads", "kv_heads", "head_dim", "params")


def shape_from_values(values: object, source: str, hint: str) -> ModelShape:
    """A ModelShape from plain values (a recording's), each field checked as a file's are."""
    if not isinstance(values, dict):
        raise ModelFileError(t("{source}: expected the model's shape (an object), got "
                               "{kind}; {hint}", source=source, kind=type(values).__name__,
                               hint=translated(hint)))
    got = Fields(values, source, hint)
    shape: dict[str, Any] = {f: got.integer(f, limit, REQUIRED if f in REQUIRED_FIELDS else None)
                             for f, limit in SHAPE_LIMITS.items()}
    shape["name"], shape["source"] = got.text("name", REQUIRED), got.text("source", REQUIRED)
    dtype = got.text("native_dtype")
    if dtype is not None and dtype not in DTYPE_BYTES:
        raise got.error("native_dtype", f"= {shown(dtype)} is not one of "
                                        f"{', '.join(sorted(DTYPE_BYTES))}")
    shape["native_dtype"] = dtype
    shape["local_layers"] = shape["local_layers"] or 0  # a capture from before windows: none
    if shape["local_layers"] > shape["layers"]:
        raise got.error("local_layers", f"= {shape['local_layers']} is more than layers = "
                                        f"{shape['layers']}")
    if shape["local_layers"] and shape["sliding_window"] is None:
        raise got.error("sliding_window", t("is missing beside local_layers"))
    shape["window_pattern"] = got.text("window_pattern")
    assert set(shape) == {f.name for f in fields(ModelShape)}  # a new field needs a check
    return ModelShape(**shape)
