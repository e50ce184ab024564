"""engine.capacity: does each engine's model, at its configured context, fit its GPUs?

Sources: the engine's model directory (``<model_path>/config.json``, read through the host
so a capture replays it) or, for llama.cpp, its ``.gguf`` file's header (layers, heads, the
file's quantized size: read live, kept by a capture as the measurement
``engine.capacity.gguf:<path>``), its configuration (probes.engine.discovery: max_model_len,
gpu_memory_utilization, tensor_parallel_size, KV-cache dtype) and the memory it has, as
``llm-doctor plan`` reads it (doctor/workload/memory_budget.py): the GPU's (NVML
``nvmlDeviceGetMemoryInfo`` of GPU 0, bytes), or on a host with no GPU the host's available
memory (``MemAvailable``), all of it for a CPU engine such as llama.cpp. The arithmetic is ``llm-doctor plan``'s
(doctor/workload/plan.py, ../shared/domain.md §3) for one sequence at the full context: the least
vLLM needs to start ("To serve at least one request with the model's max seq len …").
The record keeps the sha256 of config.json's text as read (its first 16 hex digits; UTF-8,
so a JSON file's own bytes), for ``llm-doctor diff``: the same path with another config is
another model. No privilege needed. Manual equivalent:
``llm-doctor plan --model <path> --gpu-memory <total> --context <max_model_len>``,
``sha256sum <model_path>/config.json | cut -c1-16``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor.i18n import t
from doctor.seam.host import (Host, HostReadError, MeasurementError, read_error_text,
                              reason_text)
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.workload.model_shape import (ModelFileError, ModelShape)
from doctor.workload.memory_budget import NO_GPU, MemoryBudget, MemoryFigureError, host_memory
from doctor.workload.plan import PlanError, make_plan
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_reach import label_text
from probes.helpers.engine_flags import Engine
from probes.helpers.meminfo import parse_meminfo
from probes.helpers.model_files import model_config
from probes.helpers.model_files import model_shape as model_shape

KV_DTYPES = {"auto": None, "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
             "bf16": "bf16", "fp16": "fp16", "float16": "fp16", "bfloat16": "bf16",
             "q8_0": "int8", "q4_0": "int4"}
MAX_GPUS = 1024  # tensor-parallel GPUs of one engine


@dataclass(frozen=True, slots=True)
class EngineCapacity:
    engine: str  # "vllm at http://127.0.0.1:8000 pid 4242"
    model: str
    params_b: float
    dtype: str
    weights_gb: float  # params × bytes per param
    need_gb: float  # weights × 1.2 + the KV reserved at start (`sequences` at `context`)
    kv_gb_per_sequence: float
    budget_gb: float  # GPU memory × gpu_memory_utilization × tensor-parallel GPUs
    gpu_memory_gb: float  # one GPU's total
    gpus: int
    context: int
    sequences: int  # whose KV is reserved at start: 1 (vLLM, SGLang), llama.cpp's slots
    fits: bool
    max_concurrency: int  # full-context sequences that fit beside the weights
    model_path: str  # the engine's --model: a directory, or a .gguf file
    config_sha256: str | None  # <model_path>/config.json's sha256, 16 hex digits; None: a .gguf
    memory_kind: str = "gpu"  # "gpu", or "host": no GPU, sized against MemAvailable


@dataclass(frozen=True, slots=True)
class CapacityRecord:
    engines: tuple[EngineCapacity, ...]
    not_sized: tuple[str, ...]  # engines left out, each with why


def _gpu_total_bytes(host: Host) -> int:
    info = host.nvml("nvmlDeviceGetMemoryInfo", 0)
    total = info.get("total") if isinstance(info, dict) else None
    if not isinstance(total, int) or total <= 0:
        raise HostReadError("nvml nvmlDeviceGetMemoryInfo(0)", "failed",
                            f"expected {{'total': bytes}}, got {info!r}")
    return total


def _label(e: Engine) -> str:
    return f"{e.kind} at {e.base_url}" + (f" pid {e.pid}" if e.pid else "")


def _reserved(engine: Engine) -> tuple[int | None, int]:
    """(context, sequences) whose KV cache the engine must hold to start.

    vLLM and SGLang need one sequence at max_model_len. llama.cpp allocates its whole cache
    (``-c``) at start, shared by its slots: from its flags max_model_len is that ``-c``; from
    /props it is ``n_ctx`` per slot, so the cache is that times the slots.
    """
    if engine.kind == "llama.cpp" and "/props" in engine.config_from and engine.max_num_seqs:
        return engine.max_model_len, engine.max_num_seqs
    return engine.max_model_len, 1


def size(engine: Engine, shape: ModelShape, gpu_total: int,
         config_sha256: str | None = None,
         budget: MemoryBudget | None = None) -> EngineCapacity:
    """PlanError when the engine's own figures are out of range (make_plan checks them).
    ``budget``: where ``gpu_total`` came from (a GPU's, or the host's for a CPU engine)."""
    on_host = budget is not None and budget.kind == "host"
    gpus = 1 if on_host else engine.tensor_parallel_size or 1
    if not 1 <= gpus <= MAX_GPUS:
        raise PlanError(f"tensor_parallel_size = {gpus!r:.40} is out of range (1 to {MAX_GPUS})")
    context, sequences = _reserved(engine)
    share = engine.gpu_memory_utilization or (budget.share if budget else 0.9)
    plan = make_plan(shape, gpu_total * gpus, kv_dtype=KV_DTYPES.get(engine.kv_cache_dtype or "auto"),
                     context=context, concurrency=sequences, gpu_memory_utilization=share,
                     **({"memory_kind": "host", "memory_source": budget.source}
                        if on_host and budget else {}))
    return EngineCapacity(
        engine=_label(engine), model=plan.model, params_b=plan.params_b, dtype=plan.dtype,
        weights_gb=round(plan.weights_bytes / 1e9, 2), need_gb=round(plan.need_bytes / 1e9, 2),
        kv_gb_per_sequence=round(plan.kv_cache_bytes / sequences / 1e9, 2),
        budget_gb=round(plan.budget_bytes / 1e9, 2), gpu_memory_gb=round(gpu_total / 1e9, 2),
        gpus=gpus, context=plan.context, sequences=sequences, fits=plan.fits,
        max_concurrency=plan.max_concurrency, model_path=engine.model_path or "",
        config_sha256=config_sha256, memory_kind="host" if on_host else "gpu")


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> CapacityRecord:
    engines = [e for e in found_engines(host, options, inputs).engines if e.model_path]
    if not engines:
        raise Skip(t("no engine with a local model path (its config.json or .gguf file gives "
                     "the model's shape)"))
    budget = None
    try:
        gpu_total = _gpu_total_bytes(host)
    except HostReadError as exc:  # the engine is here, the card's size is absent: say so
        reason = getattr(exc.reason, "value", exc.reason)  # the detail differs live and replayed
        if reason not in NO_GPU:  # a GPU that will not answer is not a host without one
            return CapacityRecord((), tuple(
                f"{_label(e)}: no GPU memory figure from NVML ({reason})" for e in engines))
        try:  # no GPU at all: a CPU engine, sized against MemAvailable as plan sizes it
            budget = host_memory(host, parse_meminfo, t("size it with llm-doctor plan --gpu-memory SIZE"))
        except MemoryFigureError as why:
            return CapacityRecord((), tuple(f"{_label(e)}: {why}" for e in engines))
        gpu_total = budget.total_bytes
    sized, left_out = [], []
    for engine in engines:
        try:
            shape, digest = model_config(host, engine.model_path or "")
            sized.append(size(engine, shape, gpu_total, digest, budget))
        except (HostReadError, ModelFileError, PlanError, MeasurementError) as exc:  # named, each
            left_out.append(f"{_label(engine)}: {exc}")
    return CapacityRecord(tuple(sized), tuple(left_out))


def summary(record: CapacityRecord) -> str:
    return t("; ").join([(t("{model}: needs {need} GB of {budget} GB (fits)", model=c.model,
                          need=c.need_gb, budget=c.budget_gb) if c.fits else
                        t("{model}: needs {need} GB of {budget} GB (does not fit)",
                          model=c.model, need=c.need_gb, budget=c.budget_gb))
                       for c in record.engines]
                      + [t("not sized: {why}", why=_why_text(why)) for why in record.not_sized])


def _why_text(why: str) -> str:
    """A not_sized entry ("LABEL: why", kept in English in the record) for people."""
    found = re.fullmatch(r"(\S+ at \S+(?: pid \d+)?): (.*)", why, re.S)
    if found is None:
        return why
    label, rest = label_text(found[1]), found[2]
    nvml = re.fullmatch(r"no GPU memory figure from NVML \(([a-z-]+)\)", rest)
    rest = (t("no GPU memory figure from NVML ({reason})", reason=reason_text(nvml[1])) if nvml
            else read_error_text(rest))
    return t("{label}: {why}", label=label, why=rest)
