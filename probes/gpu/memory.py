"""gpu.memory: each GPU's memory in use, and the processes holding it, engine or not.

Source: NVML ``nvmlDeviceGetMemoryInfo_v2`` where the driver has it (R510 and later), else
``nvmlDeviceGetMemoryInfo``, and ``nvmlDeviceGetComputeRunningProcesses`` (bytes there, MiB
here). The first call counts the driver's own reservation as used (406 MiB "used" on an idle
RTX 2070 whose nvidia-smi says 1 MiB); the versioned one keeps it apart (``reserved``), and
its ``used`` is nvidia-smi's. ``memory_source`` says which answered; the process table (probes.helpers.processes) names each pid and says
whether it is a serving engine. No root needed to list the processes; a pid from another
PID namespace (a container) is not in our /proc and shows as "not visible". Manual
equivalent: ``nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from doctor.seam.host import Host
from doctor.model import ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.i18n import t
from probes.helpers.gpu_common import Reader, gpu_count, mib
from probes.helpers.processes import process_table

MPS_SERVER = "nvidia-cuda-mps-server"


@dataclass(frozen=True, slots=True)
class GpuProcess:
    gpu: int
    pid: int
    name: str  # comm from /proc, or "not visible" (another PID namespace)
    engine: str | None  # vllm, sglang, … when the process is a serving engine
    used_mib: int | None  # None when the driver does not say (WDDM, MIG without privileges)
    is_llm_doctor: bool  # one of this scan's own kernels
    # the MPS server (nvidia-cuda-mps-server): it holds the memory of its clients, engines
    # included, so what it holds is not another process's (gpu.sharing judges MPS itself)
    mps_server: bool = False


@dataclass(frozen=True, slots=True)
class GpuMemory:
    index: int
    total_mib: int | None
    used_mib: int | None  # as nvidia-smi prints it where memory_source is "v2"
    free_mib: int | None
    used_by_engines_mib: int
    used_by_others_mib: int  # by processes that are neither an engine nor llm-doctor
    missing: dict[str, str]
    # "v2": nvmlDeviceGetMemoryInfo_v2, reserved_mib apart from used_mib; "v1": the first
    # call, whose used_mib includes the driver's reservation; None: neither answered
    memory_source: str | None = None
    reserved_mib: int | None = None  # the driver's own reservation (v2 only)


@dataclass(frozen=True, slots=True)
class GpuMemoryRecord:
    gpus: tuple[GpuMemory, ...]
    processes: tuple[GpuProcess, ...]  # every process holding memory, on every GPU
    engine_count: int  # engine processes on this host (holding GPU memory or not)


def _processes(r: Reader, index: int, table: dict, own: int) -> list[GpuProcess]:
    out = []
    for entry in r.compute_processes(index):
        pid = entry["pid"]
        used = entry.get("usedGpuMemory")
        proc = table.get(pid)
        out.append(GpuProcess(
            gpu=index, pid=pid, name=proc.comm if proc else "not visible",
            engine=proc.engine if proc else None,
            used_mib=mib(used) if isinstance(used, int) and not isinstance(used, bool) else None,
            is_llm_doctor=pid == own,
            mps_server=proc is not None and proc.cmdline.split(" ", 1)[0].endswith(MPS_SERVER)))
    return out


def memory_info(r: Reader, index: int) -> tuple[dict | None, str | None]:
    """GPU ``index``'s memory answer and which call gave it: the versioned call where the
    driver has it, the first one otherwise (a driver before R510, an older recording)."""
    probe_r = Reader(r.host)
    info = probe_r.mapping("used_mib", "nvmlDeviceGetMemoryInfo_v2", index)
    if info is not None:
        return info, "v2"
    info = r.mapping("used_mib", "nvmlDeviceGetMemoryInfo", index)
    if info is None:
        r.missing.setdefault("memory_source", r.missing.get("used_mib", "not-found"))
        return None, None
    # why the versioned call did not answer (not-found: a driver before R510)
    r.missing["reserved_mib"] = probe_r.missing.get("used_mib", "not-found")
    return info, "v1"


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> GpuMemoryRecord:
    count = gpu_count(host)
    table = {p.pid: p for p in process_table(host)}
    own = os.getpid() if host.kind == "live" else -1
    gpus, processes = [], []
    for i in range(count):
        r = Reader(host)
        info, source = memory_info(r, i)
        procs = _processes(r, i, table, own)
        processes.extend(procs)
        gpus.append(GpuMemory(
            index=i,
            total_mib=mib(r.item("total_mib", info, "total")),
            used_mib=mib(r.item("used_mib", info, "used")),
            free_mib=mib(r.item("free_mib", info, "free")),
            memory_source=source,
            reserved_mib=mib(r.item("reserved_mib", info, "reserved")) if source == "v2" else None,
            used_by_engines_mib=sum(p.used_mib or 0 for p in procs if p.engine),
            used_by_others_mib=sum(p.used_mib or 0 for p in procs
                                   if not p.engine and not p.is_llm_doctor and not p.mps_server),
            missing=r.missing))
    return GpuMemoryRecord(gpus=tuple(gpus), processes=tuple(processes),
                           engine_count=sum(1 for p in table.values() if p.engine))


def summary(record: GpuMemoryRecord) -> str:
    parts = [t("GPU{index} {used}/{total} MiB", index=g.index,
               used=g.used_mib if g.used_mib is not None else "?",
               total=g.total_mib if g.total_mib is not None else "?") for g in record.gpus]
    others = [p for p in record.processes if not p.engine and not p.is_llm_doctor]
    if others:
        parts.append(t("{n} non-engine process(es) hold memory", n=len(others)))
    return t("; ").join(parts)
