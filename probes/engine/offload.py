"""engine.offload: how much of each engine's model sits in host memory instead of on the GPU.

Sources, per engine:

* llama.cpp: ``-ngl`` / ``--gpu-layers`` / ``--n-gpu-layers`` from ``/proc/<pid>/cmdline``
  (a count, ``all``, or ``auto``: recent builds' default, which places as many layers as
  fit; judged as all, since the flags cannot say more) against the GGUF header's
  ``block_count`` (the layers) and the file's size (its weights), read as engine.capacity
  reads them (kept by a capture as ``engine.capacity.gguf:<path>``);
* Ollama: ``GET /api/ps``, each loaded model's ``size`` and ``size_vram`` (bytes; the share
  on the CPU is 1 - size_vram / size; ``ollama ps`` prints it as ``41%/59% CPU/GPU``);
* vLLM and SGLang: ``--cpu-offload-gb`` (GiB of weights per GPU kept in host memory) against
  the weights' bytes from ``<model_path>/config.json`` (parameters x the dtype's bytes).

What it costs is an ESTIMATE, from memory bandwidths alone: decode reads every weight once
per token, so ``time/token ~= gpu_bytes / gpu_bw + cpu_bytes / cpu_bw`` and tokens/s is its
inverse (one sequence; batching, compute and the KV cache left out). ``gpu_bw`` is GPU 0's
memory ceiling from NVML (max memory clock x 2 x bus width / 8, probes.gpu.bandwidth);
``cpu_bw`` is host.memory_bandwidth's measured STREAM figure of this scan (level standard),
and for vLLM/SGLang, whose offloaded weights cross PCIe to the GPU every step, the lower of
that and the GPU's PCIe link ceiling (``nvmlDeviceGetMaxPcieLinkGeneration/Width``). The
same model all on the GPU gives ``total_bytes / gpu_bw``.

On a host without a GPU nothing can be offloaded to: every layer runs on the CPU by design,
the record says so (``gpu_absent``) and the rule does not judge it.

Units: layers, bytes, GB/s, tokens/s. No privilege for the pages; another user's cmdline is
readable. Manual equivalent: ``ollama ps``; ``curl -s :11434/api/ps | jq '.models[] |
{name, size, size_vram}'``; the llama.cpp log line ``offloaded 20/33 layers to GPU``;
``ps -o args= -p <pid> | grep -oE -- '(-ngl|--n-gpu-layers|--cpu-offload-gb)[ =][^ ]+'``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from doctor.i18n import lazy, t
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host, HostReadError, MeasurementError, detail_text
from doctor.values import count, field as json_field, number, page_json
from doctor.workload.model_shape import DTYPE_BYTES, ModelFileError, ModelShape
from probes.helpers.model_files import model_shape
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_reach import label_text
from probes.helpers.link_ceilings import link_ceiling_gbps, memory_ceiling_gbps
from probes.helpers.engine_flags import Engine, flag
from probes.helpers.engine_reads import argv_of
from probes.helpers.gpu_common import Reader, gpu_count
from probes.helpers.stream_record import MemoryBandwidthRecord

TIMEOUT_S = 5.0
PAGE_MAX_BYTES = 4 << 20
MAX_MODELS = 64  # of one Ollama's /api/ps
MAX_OFFLOAD_GIB = 1 << 20  # a PiB of host memory: beyond it the flag is no size
GIB = 1 << 30
NGL_FLAGS = ("-ngl", "--gpu-layers", "--n-gpu-layers")
NGL_ALL = ("all", "auto")  # llama-server --help: "an exact number, 'auto', or 'all' (default: auto)"
OFFLOAD_KINDS = ("vllm", "sglang")  # --cpu-offload-gb
KINDS = ("llama.cpp", "ollama", *OFFLOAD_KINDS)


@dataclass(frozen=True, slots=True)
class GpuSide:
    """What the GPU offers the estimate; ``absent`` says why there is no GPU at all."""

    absent: str | None
    name: str | None = None
    memory_gbps: float | None = None  # GPU 0's memory ceiling (NVML clock x bus width)
    pcie_gbps: float | None = None  # GPU 0's PCIe link ceiling, one direction
    missing: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EngineOffload:
    engine: str  # "llama.cpp at http://127.0.0.1:8080 pid 4242"
    kind: str
    model: str | None
    offload_from: str  # "-ngl 20", "/api/ps size_vram", "--cpu-offload-gb 8", "-ngl unset (auto)"
    layers: int | None  # llama.cpp's count of the model's layers: GGUF block_count + 1 (output)
    layers_gpu: int | None  # of them on the GPU
    total_bytes: int | None  # the weights (Ollama: what it loaded, its KV cache included)
    cpu_bytes: int | None  # of them in host memory
    cpu_share: float | None  # of the layers or bytes on the CPU, 0 to 1
    gpu_absent: str | None  # no GPU on this host: why (nothing to offload to, not judged)
    gpu_name: str | None
    gpu_bandwidth_gbps: float | None
    cpu_bandwidth_gbps: float | None  # host memory (and for vLLM/SGLang PCIe), the lower
    tokens_per_s: float | None  # the estimate as it runs
    tokens_per_s_on_gpu: float | None  # ... with every weight on the GPU
    slowdown: float | None  # tokens_per_s_on_gpu / tokens_per_s
    missing: dict[str, str]  # field -> why it is None


@dataclass(frozen=True, slots=True)
class OffloadRecord:
    engines: tuple[EngineOffload, ...]
    not_read: tuple[str, ...]  # engines left out, each with why


def _label(e: Engine) -> str:
    return f"{e.kind} at {e.base_url}" + (f" pid {e.pid}" if e.pid else "")


def gpu_side(host: Host) -> GpuSide:
    try:
        gpu_count(host)
    except Skip as exc:
        return GpuSide(absent=str(exc))
    except HostReadError as exc:
        return GpuSide(absent=None, missing={"gpu_bandwidth_gbps": f"no GPU count: {exc}"})
    r = Reader(host)
    name = r.text("name", "nvmlDeviceGetName", 0)
    memory, how = memory_ceiling_gbps(
        name, r.integer("mem_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", 0, 2),
        r.integer("bus_width", "nvmlDeviceGetMemoryBusWidth", 0))
    pcie = link_ceiling_gbps(r.integer("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", 0),
                             r.integer("width_max", "nvmlDeviceGetMaxPcieLinkWidth", 0))
    missing = {} if memory else {"gpu_bandwidth_gbps": f"GPU 0: {how}"}
    if pcie is None:
        missing["pcie_gbps"] = "GPU 0: no PCIe link generation or width from NVML"
    return GpuSide(None, name, memory, pcie, missing)


def host_bandwidth(inputs: Inputs) -> tuple[float | None, str | None]:
    """(GB/s, why absent) of host.memory_bandwidth's STREAM run in this scan, if it ran: its
    record, handed over by the runner (``after``)."""
    record = inputs.get("host.memory_bandwidth", MemoryBandwidthRecord)
    if record is None or record.stream_gbps is None:
        return None, ("host memory bandwidth not measured in this scan "
                      "(host.memory_bandwidth runs at `--level standard`)")
    best = record.stream_gbps
    gbps = number(best)
    return (gbps, None) if gbps and gbps > 0 else (None, f"host.memory_bandwidth gave {best!r:.40}")


def estimate(total: int | None, cpu: int | None, gpu: GpuSide, cpu_gbps: float | None,
              missing: dict[str, str]) -> tuple[float | None, float | None, float | None]:
    """(tokens/s now, tokens/s all on the GPU, their ratio): time/token ~= gpu_bytes/gpu_bw
    + cpu_bytes/cpu_bw, every weight read once per token (an estimate: see the docstring)."""
    why = (gpu.missing.get("gpu_bandwidth_gbps") if not gpu.memory_gbps
           else missing.get("cpu_bandwidth_gbps") if cpu and not cpu_gbps
           else lazy("the model's bytes are not known") if not total or cpu is None else None)
    if why or not gpu.memory_gbps or not total or cpu is None or (cpu and not cpu_gbps):
        for name in ("tokens_per_s", "tokens_per_s_on_gpu", "slowdown"):
            missing[name] = why or "not estimated"
        return None, None, None
    host_s = cpu / 1e9 / cpu_gbps if cpu and cpu_gbps else 0.0
    seconds = (total - cpu) / 1e9 / gpu.memory_gbps + host_s
    on_gpu = total / 1e9 / gpu.memory_gbps
    return round(1 / seconds, 1), round(1 / on_gpu, 1), round(seconds / on_gpu, 1)


def _item(engine: Engine, model: str | None, source: str, gpu: GpuSide, cpu_gbps: float | None,
          cpu_why: str | None, *, layers: int | None = None, layers_gpu: int | None = None,
          total: int | None = None, cpu: int | None = None,
          missing: dict[str, str] | None = None) -> EngineOffload:
    missing = dict(missing or {})
    if layers and layers_gpu is not None:
        share: float | None = round((layers - layers_gpu) / layers, 3)
        cpu = cpu if cpu is not None else (round(total * (layers - layers_gpu) / layers)
                                           if total else None)
    else:
        share = round(cpu / total, 3) if total and cpu is not None else None
    if share is None:
        missing.setdefault("cpu_share", lazy("neither the layers nor the bytes on each side are known"))
    if gpu.absent:
        for name in ("tokens_per_s", "tokens_per_s_on_gpu", "slowdown", "gpu_bandwidth_gbps"):
            missing[name] = f"no GPU on this host ({gpu.absent})"
        return EngineOffload(_label(engine), engine.kind, model, source, layers, layers_gpu,
                             total, cpu, share, gpu.absent, None, None, cpu_gbps, None, None,
                             None, missing)
    if cpu_why:
        missing["cpu_bandwidth_gbps"] = cpu_why
    missing.update({k: v for k, v in gpu.missing.items() if k == "gpu_bandwidth_gbps"})
    now, on_gpu, ratio = estimate(total, cpu, gpu, cpu_gbps, missing)
    return EngineOffload(_label(engine), engine.kind, model, source, layers, layers_gpu, total,
                         cpu, share, None, gpu.name, gpu.memory_gbps, cpu_gbps, now, on_gpu,
                         ratio, missing)


def _shape(host: Host, engine: Engine) -> tuple[ModelShape | None, str | None]:
    if not engine.model_path:
        return None, lazy("no local model path on its command line")
    try:
        return model_shape(host, engine.model_path), None
    except (HostReadError, ModelFileError, MeasurementError) as exc:
        return None, str(exc)


def _llama(host: Host, engine: Engine, gpu: GpuSide, cpu_gbps, cpu_why) -> EngineOffload:
    value = flag(argv_of(host, engine.pid), *NGL_FLAGS)
    shape, why = _shape(host, engine)
    missing = {"layers": why} if why else {}
    # llama.cpp counts the output layer as one more: "offloaded 33/33 layers to GPU" for
    # Llama-3-8B's 32 blocks, and -ngl 32 leaves that last one on the CPU
    layers = shape.layers + 1 if shape else None
    total = shape.file_weights_bytes if shape else None
    if value is None or value.lower() in NGL_ALL:
        source = f"-ngl {value}" if value else "-ngl unset (auto: as many layers as fit)"
        on_gpu = layers
    elif (n := count(value)) is not None:
        source, on_gpu = f"-ngl {n}", min(n, layers) if layers is not None else None
    else:
        source, on_gpu = f"-ngl {value[:40]!r}", None
        missing["layers_gpu"] = f"-ngl {value[:40]!r} is not a count, 'all' or 'auto'"
    return _item(engine, shape.name if shape else engine.model, source, gpu, cpu_gbps, cpu_why,
                 layers=layers, layers_gpu=on_gpu, total=total,
                 missing=missing)


def _vllm(host: Host, engine: Engine, gpu: GpuSide, cpu_gbps, cpu_why) -> EngineOffload:
    value = flag(argv_of(host, engine.pid), "--cpu-offload-gb")
    gib = number(value) if value is not None else 0.0
    missing: dict[str, str] = {}
    shape, why = _shape(host, engine)
    total = None
    if shape is not None:
        total = int(shape.params * DTYPE_BYTES.get(shape.native_dtype or "fp16", 2.0))
    elif why:
        missing["total_bytes"] = why
    cpu = None
    if gib is None or not 0 <= gib <= MAX_OFFLOAD_GIB:
        missing["cpu_bytes"] = f"--cpu-offload-gb {str(value)[:40]!r} is not a size in GiB (0 to {MAX_OFFLOAD_GIB})"
    else:
        # per GPU (vLLM's help: "The space in GiB to offload to CPU, per GPU"), at most all
        cpu = int(gib * GIB * (engine.tensor_parallel_size or 1))
        cpu = min(cpu, total) if total is not None else cpu
    if cpu_gbps and gpu.pcie_gbps:  # the offloaded weights cross PCIe every forward pass
        cpu_gbps = min(cpu_gbps, gpu.pcie_gbps)
    source = f"--cpu-offload-gb {value}" if value is not None else "--cpu-offload-gb unset (0)"
    return _item(engine, shape.name if shape else engine.model, source, gpu, cpu_gbps, cpu_why,
                 total=total, cpu=cpu, missing=missing)


def _ollama(host: Host, engine: Engine, gpu: GpuSide, cpu_gbps, cpu_why) -> list[EngineOffload]:
    url = f"{engine.base_url}/api/ps"
    try:
        page = host.http_get(url, TIMEOUT_S, PAGE_MAX_BYTES)
        if page.status != 200:
            raise ValueError(f"HTTP {page.status}")
        models = json_field(page_json(page.body), "models")
    except (HostReadError, ValueError) as exc:
        raise _NotRead(f"{_label(engine)}: {url}: {exc}") from None
    if not isinstance(models, list):
        raise _NotRead(f"{_label(engine)}: {url}: no list of models")
    found = []
    for entry in models[:MAX_MODELS]:
        size, vram = count(json_field(entry, "size"), 1), count(json_field(entry, "size_vram"))
        name = json_field(entry, "name")
        missing = {}
        if size is None or vram is None:
            missing["cpu_bytes"] = f"{url}: size or size_vram is not a byte count"
        cpu = max(size - vram, 0) if size is not None and vram is not None else None
        found.append(_item(engine, str(name)[:200] if name else None, "/api/ps size_vram", gpu,
                           cpu_gbps, cpu_why, total=size, cpu=cpu, missing=missing))
    return found


class _NotRead(Exception):
    pass


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> OffloadRecord:
    """Each llama.cpp, Ollama, vLLM and SGLang engine's share of its model on the CPU."""
    found = [e for e in found_engines(host, options, inputs).engines if e.kind in KINDS]
    if not found:
        raise Skip(t("no llama.cpp, Ollama, vLLM or SGLang engine: only they offload layers or "
                     "weights to the CPU"))
    gpu = gpu_side(host)
    cpu_gbps, cpu_why = host_bandwidth(inputs)
    items: list[EngineOffload] = []
    not_read: list[str] = []
    for engine in found:
        try:
            if engine.kind == "llama.cpp":
                items.append(_llama(host, engine, gpu, cpu_gbps, cpu_why))
            elif engine.kind == "ollama" and engine.base_url:
                items += _ollama(host, engine, gpu, cpu_gbps, cpu_why)
            elif engine.kind in OFFLOAD_KINDS:
                items.append(_vllm(host, engine, gpu, cpu_gbps, cpu_why))
        except _NotRead as exc:
            not_read.append(str(exc))
    return OffloadRecord(tuple(items), tuple(not_read))


def summary(record: OffloadRecord) -> str:
    parts = []
    for e in record.engines:
        where = (t("no GPU ({why})", why=detail_text(e.gpu_absent)) if e.gpu_absent else
                 t("{share:.0%} on the CPU", share=e.cpu_share) if e.cpu_share is not None
                 else t("share unknown"))
        parts.append(t("{engine}: {source}, {where}", engine=label_text(e.engine),
                       source=_source_text(e.offload_from), where=where))
    return t("; ").join(parts + [t("not read: {why}", why=why) for why in record.not_read])


def _source_text(source: str) -> str:
    """Where the offload figure came from (kept in English in the record) for people."""
    return {"-ngl unset (auto: as many layers as fit)": t("-ngl unset (auto: as many layers as fit)"),
            "--cpu-offload-gb unset (0)": t("--cpu-offload-gb unset (0)")}.get(source, source)
