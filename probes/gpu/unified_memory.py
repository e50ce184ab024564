"""gpu.unified_memory: on a GPU that shares the host's memory (GB10 / DGX Spark), the
engine's memory target against what the host has left.

Source: NVML ``nvmlDeviceGetMemoryInfo`` (and ``_v2``): on GB10 both answer
NVML_ERROR_NOT_SUPPORTED, and ``nvidia-smi`` prints "Memory-Usage: Not Supported" (NVIDIA's
DGX Spark known issues, "nvidia-smi reports memory usage not supported"): the GPU has no
memory of its own, it allocates the host's LPDDR5X. gpu.memory's record says so (``after``;
else the call is made here). The budget is then ``/proc/meminfo``: MemTotal is what CUDA
reports as the device's total, MemAvailable what the kernel can still give. Each engine's
target is its memory fraction (vLLM ``--gpu-memory-utilization``, 0.9 when not given, vLLM's
EngineArgs default; SGLang ``--mem-fraction-static`` when given) times MemTotal; what it holds
now (``nvmlDeviceGetComputeRunningProcesses`` of it and its children, which GB10 does report)
is already out of MemAvailable, so the room it has is MemAvailable + held. A target above that
room makes the kernel reclaim and swap until the OOM killer runs, and the whole host (sshd
included) stops answering: the failure DGX Spark users report with vLLM's default 0.9.

GH200 and GB200 report their HBM through NVML (their fraction applies to it), so only GPUs
whose memory NVML does not support are judged here. No root needed. Manual equivalent:
``nvidia-smi --query-gpu=memory.total --format=csv`` ([N/A]), ``grep -E
'MemTotal|MemAvailable' /proc/meminfo``, ``nvidia-smi --query-compute-apps=pid,used_memory
--format=csv``, and the engine's command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers.engine_flags import from_process
from probes.helpers.gpu_common import Reader, gpu_count, mib, reason_of
from probes.helpers.lineage import lineage
from probes.helpers.meminfo import parse_meminfo, required
from probes.helpers.processes import engine_processes, flag_value, lasting_name

MEMORY = "gpu.memory"
MAX_GPUS = 64
MAX_ENGINES = 16
VLLM_DEFAULT_FRACTION = 0.9  # vllm/engine/arg_utils.py EngineArgs.gpu_memory_utilization


@runtime_checkable
class MemoryShape(Protocol):
    """What is read of gpu.memory's record (probes/gpu/memory.py)."""

    gpus: tuple


@dataclass(frozen=True, slots=True)
class EngineBudget:
    pid: int
    engine: str  # vllm, sglang
    name: str  # the engine's kind and sockets or model: lasts across restarts
    memory_fraction: float | None  # the fraction of the device's total it takes
    fraction_source: str | None  # "--gpu-memory-utilization", "vLLM default", …
    target_mib: int | None  # memory_fraction x MemTotal
    held_mib: int  # what NVML says it (and its children) holds now
    room_mib: int  # MemAvailable + held: what it can have without the host reclaiming
    left_mib: int | None  # room - target: what the host keeps once the engine has its target
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class UnifiedMemoryRecord:
    unified_gpus: tuple[int, ...]  # GPUs whose memory NVML does not support (GB10)
    gpu_names: tuple[str, ...]
    mem_total_mib: int  # /proc/meminfo MemTotal
    mem_available_mib: int  # /proc/meminfo MemAvailable
    engines: tuple[EngineBudget, ...]
    missing: dict[str, str]


def _unsupported(host: Host, inputs: Inputs, count: int) -> list[int]:
    """The GPUs whose memory NVML answers not-supported: gpu.memory's, else asked here."""
    record = inputs.get(MEMORY, MemoryShape)  # type: ignore[type-abstract]
    if record is not None:
        return [g.index for g in record.gpus[:MAX_GPUS]
                if getattr(g, "total_mib", 0) is None
                and (getattr(g, "missing", None) or {}).get("used_mib") == "not-supported"]
    out = []
    for i in range(min(count, MAX_GPUS)):
        try:
            host.nvml("nvmlDeviceGetMemoryInfo", i)
        except HostReadError as exc:
            if reason_of(exc) == "not-supported":
                out.append(i)
    return out


def _held(host: Host, gpus: list[int], pid: int, missing: dict[str, str]) -> int:
    """MiB NVML says ``pid`` and its children hold on ``gpus``."""
    held = 0
    for index in gpus:
        r = Reader(host)
        for entry in r.compute_processes(index):
            used = entry.get("usedGpuMemory")
            if isinstance(used, int) and not isinstance(used, bool) and pid in lineage(host, entry["pid"]):
                held += mib(used) or 0
        if "processes" in r.missing:
            missing["held_mib"] = r.missing["processes"]
    return held


def _budget(host: Host, proc, gpus: list[int], total: int, available: int) -> EngineBudget:
    missing: dict[str, str] = {}
    fraction = from_process(proc).gpu_memory_utilization
    source = None
    if fraction is not None:
        source = "--gpu-memory-utilization" if proc.engine == "vllm" else "--mem-fraction-static"
    elif flag_value(proc.cmdline, "--gpu-memory-utilization", "--mem-fraction-static") is not None:
        missing["memory_fraction"] = "on the command line, but not a fraction between 0 and 1"
    elif proc.engine == "vllm":
        fraction, source = VLLM_DEFAULT_FRACTION, "vLLM default"
    else:
        missing["memory_fraction"] = "not on the command line (the engine sizes itself)"
    held = _held(host, gpus, proc.pid, missing)
    target = round(fraction * total) if fraction is not None and 0 < fraction <= 1 else None
    if fraction is not None and target is None:
        missing["target_mib"] = f"a fraction outside (0, 1]: {fraction}"
    room = available + held
    return EngineBudget(pid=proc.pid, engine=proc.engine, name=lasting_name(proc),
                        memory_fraction=fraction, fraction_source=source, target_mib=target,
                        held_mib=held, room_mib=room,
                        left_mib=None if target is None else room - target, missing=missing)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> UnifiedMemoryRecord:
    count = gpu_count(host)
    gpus = _unsupported(host, inputs, count)
    if not gpus:
        raise Skip(t("NVML reports each GPU's own memory: no GPU shares the host's"))
    r = Reader(host)
    names = tuple(r.text("gpu_names", "nvmlDeviceGetName", i) or "?" for i in gpus)
    values = parse_meminfo(host.read_text("/proc/meminfo"))
    total = required("/proc/meminfo", values, "MemTotal") // 1024
    available = required("/proc/meminfo", values, "MemAvailable") // 1024
    engines = [p for p in engine_processes(host) if p.engine in ("vllm", "sglang")]
    pids = {p.pid for p in engines}
    # a child engine process (a worker with the engine's command line) is its parent's
    top = [p for p in engines if not (lineage(host, p.pid) - {p.pid}) & pids][:MAX_ENGINES]
    return UnifiedMemoryRecord(
        unified_gpus=tuple(gpus), gpu_names=names, mem_total_mib=total,
        mem_available_mib=available,
        engines=tuple(_budget(host, p, gpus, total, available) for p in top),
        missing=r.missing)


def summary(record: UnifiedMemoryRecord) -> str:
    parts = [t("{names} share the host's memory: {available} of {total} MiB available",
               names=t(" / ").join(record.gpu_names), available=record.mem_available_mib,
               total=record.mem_total_mib)]
    for e in record.engines:
        if e.target_mib is not None:
            parts.append(t("{engine} pid {pid} targets {target} MiB, room {room} MiB",
                           engine=e.engine, pid=e.pid, target=e.target_mib, room=e.room_mib))
    return t("; ").join(parts)
