"""gpu.sharing: how the GPUs are shared out: MIG mode, compute mode, the MPS daemon, and
which engine holds which GPU.

Sources: NVML ``nvmlDeviceGetMigMode`` (current, pending), ``nvmlDeviceGetComputeMode``
(nvmlComputeMode_t: DEFAULT 0, EXCLUSIVE_THREAD 1 (deprecated), PROHIBITED 2,
EXCLUSIVE_PROCESS 3), ``nvmlDeviceGetComputeRunningProcesses`` (which pids hold a context,
and on a MIG GPU in which GPU instance: ``gpuInstanceId`` 0xFFFFFFFF means none); the process
table for the MPS daemons (``nvidia-cuda-mps-control``, ``nvidia-cuda-mps-server``) and the
engines' ``--tensor-parallel-size``; ``/proc/<pid>/stat`` for parents (an engine's workers).

Why each matters: with MIG on, a CUDA process enumerates one MIG device (NVIDIA MIG user
guide, "CUDA device enumeration"), so an engine started for whole GPUs (tensor parallelism
over N cards) cannot start, and one whose whole-GPU index names a MIG-enabled card finds no
device. PROHIBITED refuses every context; EXCLUSIVE_PROCESS lets one process hold the GPU,
so an engine's second process (a TP worker, a profiler, llm-doctor's own kernels) fails
with "all CUDA-capable devices are busy or unavailable", unless the one process is the MPS
server (NVIDIA's MPS guide recommends that pairing). An MPS control daemon makes every
CUDA process of its user a client of the MPS server, with MPS's limits (memory and SM
shares, a client's fault taking all clients down), whether the engine expects it or not.
No root needed. Manual equivalent: ``nvidia-smi -q -d COMPUTE``, ``nvidia-smi mig -lgi``,
``pgrep -a nvidia-cuda-mps``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.model import ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host
from doctor.i18n import t
from probes.helpers.gpu_topology import tensor_parallel
from probes.helpers.lineage import lineage
from probes.helpers.gpu_common import COMPUTE_MODES, Reader, gpu_count
from probes.helpers.processes import engine_processes, process_table

MPS_PROGRAMS = ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
MPS_SERVER = "nvidia-cuda-mps-server"
NO_INSTANCE = 0xFFFFFFFF  # a process entry's gpuInstanceId on a GPU without MIG


@dataclass(frozen=True, slots=True)
class GpuShare:
    index: int
    mig_enabled: bool | None  # nvmlDeviceGetMigMode current (None: the GPU has no MIG)
    mig_pending: bool | None  # the mode after the next GPU reset
    compute_mode: str | None  # default | exclusive-thread | prohibited | exclusive-process
    engine_pids: tuple[int, ...]  # engines whose process (or a worker) holds a context here
    on_mig_instance: bool  # some context here sits in a MIG GPU instance
    mps_server: bool  # the MPS server holds a context here (its clients' work runs in it)
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class EngineShare:
    pid: int
    engine: str  # vllm, sglang, llama.cpp, …
    tensor_parallel: int  # --tensor-parallel-size and its aliases; 1 when not given
    gpus: tuple[int, ...]  # GPUs where it or a worker holds a context (NVML's process list)


@dataclass(frozen=True, slots=True)
class SharingRecord:
    gpus: tuple[GpuShare, ...]
    engines: tuple[EngineShare, ...]
    mps_daemons: tuple[str, ...]  # "nvidia-cuda-mps-control pid 2210"
    processes_listed: bool  # every GPU's process list was read (an engine on none is real)
    all_mig: bool  # every GPU has MIG on


def _program(cmdline: str) -> str:
    return cmdline.split(" ", 1)[0].rsplit("/", 1)[-1]


def _instance(entry: dict) -> int | None:
    """The MIG GPU instance a process entry sits in, or None (no MIG, or not said)."""
    gi = entry.get("gpuInstanceId")
    ok = isinstance(gi, int) and not isinstance(gi, bool) and gi != NO_INSTANCE
    return gi if ok else None


def _flag(value: int | None) -> bool | None:
    return None if value is None else bool(value)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> SharingRecord:
    count = gpu_count(host)
    table = process_table(host)
    mps = [p for p in table if _program(p.cmdline) in MPS_PROGRAMS
           or p.comm.startswith("nvidia-cuda-mps")]  # comm is cut at 15 characters
    mps_servers = {p.pid for p in mps if _program(p.cmdline) == MPS_SERVER}
    engines = engine_processes(host)
    gpus: list[GpuShare] = []
    listed = True
    for i in range(count):
        r = Reader(host)
        mig = r.mapping("mig_enabled", "nvmlDeviceGetMigMode", i)
        mode = r.integer("compute_mode", "nvmlDeviceGetComputeMode", i)
        entries = r.compute_processes(i)
        listed = listed and "processes" not in r.missing
        pids = {e["pid"] for e in entries}
        lines = [lineage(host, pid) for pid in pids]
        on_engine = tuple(sorted(p.pid for p in engines if any(p.pid in ln for ln in lines)))
        gpus.append(GpuShare(
            index=i, mig_enabled=_flag(r.item("mig_enabled", mig, "current")),
            mig_pending=_flag(r.item("mig_pending", mig, "pending")),
            compute_mode=None if mode is None else COMPUTE_MODES.get(mode, f"mode {mode}"),
            engine_pids=on_engine,
            on_mig_instance=any(_instance(e) is not None for e in entries),
            mps_server=bool(pids & mps_servers), missing=r.missing))
    shares = tuple(EngineShare(p.pid, p.engine or "?", tensor_parallel(p.cmdline) or 1,
                               tuple(g.index for g in gpus if p.pid in g.engine_pids))
                   for p in engines)
    return SharingRecord(gpus=tuple(gpus), engines=shares,
                         mps_daemons=tuple(f"{_program(p.cmdline) or p.comm} pid {p.pid}" for p in mps),
                         processes_listed=listed,
                         all_mig=all(g.mig_enabled for g in gpus))


def summary(record: SharingRecord) -> str:
    mig = [g.index for g in record.gpus if g.mig_enabled]
    modes = sorted({g.compute_mode or "?" for g in record.gpus})
    return ((t("MIG on GPU {gpus}", gpus=mig) if mig else t("MIG off"))
            + t("; compute mode {modes}; ", modes="/".join(modes))
            + (f"MPS: {', '.join(record.mps_daemons)}" if record.mps_daemons else t("no MPS daemon")))
