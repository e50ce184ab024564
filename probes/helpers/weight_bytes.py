"""The bytes a generated token reads, and where they live: an engine's weights split between
GPU and host memory, and its KV cache at a context. What engine.roofline divides a
bandwidth by.

Sources: the model's files (probes/helpers/model_files.py: a GGUF's size, which is its
quantised tensors, or config.json's parameters x its dtype's bytes) and the engine's flags
(``/proc/<pid>/cmdline``): llama.cpp ``-ngl`` layers on the GPU (``auto``/``all``/unset: all,
as engine.offload judges them), vLLM/SGLang ``--cpu-offload-gb`` GiB per GPU in host memory,
``--tensor-parallel-size`` GPUs sharing the rest; the KV cache's element size from
``--kv-cache-dtype`` / ``-ctk`` (llama.cpp's default f16, the model's dtype elsewhere).

Decode reads every weight once a token (gemma ties its output layer to the token
embeddings, so its whole file is read; a model with a separate output layer reads one row of
its embeddings, which this counts whole: a few per cent high for 8B models). The KV cache
read is 2 (K, V) x KV heads x head size x element bytes a layer per context token, a local
(sliding-window) layer's context capped at its window.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import lazy
from doctor.seam.host import Host, HostReadError, MeasurementError
from doctor.values import count, number
from doctor.workload.model_shape import DTYPE_BYTES, ModelFileError, ModelShape
from probes.helpers.engine_flags import Engine, flag
from probes.helpers.engine_reads import argv_of
from probes.helpers.model_files import model_shape

GIB = 1 << 30
NGL_FLAGS = ("-ngl", "--gpu-layers", "--n-gpu-layers")
NGL_ALL = ("all", "auto")
MAX_OFFLOAD_GIB = 1 << 20
# Bytes of one cached K or V element: llama.cpp's -ctk types (ggml block sizes: q8_0 keeps
# 32 values in 34 bytes, q4_0 in 18), vLLM/SGLang --kv-cache-dtype fp8*.
KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32,
            "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}


@dataclass(frozen=True, slots=True)
class Placement:
    """An engine's weights: how many bytes, how many of them in host memory, over how many
    GPUs the rest is split; None with the reason in ``missing``."""

    model: str | None
    weights_bytes: int | None
    host_bytes: int | None  # of them in host memory (all of them on a host without a GPU)
    gpus: int  # sharing the GPU part (tensor parallel), 1 at least
    placed_from: str  # "-ngl 20", "--cpu-offload-gb 8", "no GPU: all in host memory"
    shape: ModelShape | None
    kv_element_bytes: float
    missing: dict[str, str]


def _shape(host: Host, engine: Engine) -> tuple[ModelShape | None, str | None]:
    if not engine.model_path:
        return None, lazy("no local model path on its command line")
    try:
        return model_shape(host, engine.model_path), None
    except (HostReadError, ModelFileError, MeasurementError) as exc:
        return None, str(exc)


def _kv_bytes(engine: Engine, argv: list[str], shape: ModelShape | None) -> float:
    named = (engine.kv_cache_dtype or "").lower()
    if engine.kind == "llama.cpp":
        named = (flag(argv, "-ctk", "--cache-type-k") or "f16").lower()
    if named.startswith("fp8"):
        return 1.0
    if named in KV_BYTES:
        return KV_BYTES[named]
    native = shape.native_dtype if shape else None
    return DTYPE_BYTES.get(native or "fp16", 2.0)


def placement(host: Host, engine: Engine, gpu_present: bool) -> Placement:
    """Where ``engine``'s weights live (``gpu_present``: this host has a GPU to hold them)."""
    argv = argv_of(host, engine.pid)
    shape, why = _shape(host, engine)
    missing = {"weights_bytes": why} if why else {}
    kv = _kv_bytes(engine, argv, shape)
    name = shape.name if shape else engine.model
    if engine.kind == "llama.cpp":
        total = shape.file_weights_bytes if shape else None
        if not gpu_present:
            return Placement(name, total, total, 1, "no GPU: all in host memory", shape, kv, missing)
        value = flag(argv, *NGL_FLAGS)
        layers = shape.layers + 1 if shape else None  # llama.cpp counts the output layer too
        if value is None or value.lower() in NGL_ALL:
            return Placement(name, total, 0 if total is not None else None, 1,
                             f"-ngl {value or 'unset (auto)'}", shape, kv, missing)
        n = count(value)
        if n is None:
            missing["weights_host_bytes"] = f"-ngl {value[:40]!r} is not a count, 'all' or 'auto'"
            return Placement(name, total, None, 1, f"-ngl {value[:40]!r}", shape, kv, missing)
        host_bytes = (round(total * (layers - min(n, layers)) / layers)
                      if total is not None and layers else None)
        return Placement(name, total, host_bytes, 1, f"-ngl {n}", shape, kv, missing)
    # vLLM, SGLang: config.json's parameters at the checkpoint's dtype
    total = int(shape.params * DTYPE_BYTES.get(shape.native_dtype or "fp16", 2.0)) if shape else None
    gpus = max(engine.tensor_parallel_size or 1, 1)
    if not gpu_present:
        return Placement(name, total, total, 1, "no GPU: all in host memory", shape, kv, missing)
    value = flag(argv, "--cpu-offload-gb")
    gib = number(value) if value is not None else 0.0
    if gib is None or not 0 <= gib <= MAX_OFFLOAD_GIB:
        missing["weights_host_bytes"] = f"--cpu-offload-gb {str(value)[:40]!r} is not a size in GiB"
        return Placement(name, total, None, gpus, f"--cpu-offload-gb {str(value)[:40]!r}", shape, kv, missing)
    host_bytes = int(gib * GIB * gpus)  # per GPU, vLLM's help says
    host_bytes = min(host_bytes, total) if total is not None else host_bytes
    return Placement(name, total, host_bytes, gpus, f"--cpu-offload-gb {value or 0}", shape, kv, missing)


def kv_read_bytes(shape: ModelShape, context: float, element_bytes: float) -> int:
    """K and V of every layer over ``context`` tokens: what one generated token reads of the
    cache (a local layer reads at most its window)."""
    per_layer_token = 2 * shape.kv_heads * shape.head_dim * element_bytes
    local = shape.local_layers if shape.sliding_window else 0
    window = min(context, shape.sliding_window) if shape.sliding_window else context
    return round(per_layer_token * ((shape.layers - local) * context + local * window))
