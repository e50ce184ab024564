"""host.cpu_load: which processes take the CPU right now, sampled over a short window.

Samples per-process CPU time (utime+stime, via psutil from ``/proc/<pid>/stat``) and the
system's busy time (``/proc/stat``) twice, ``SAMPLE_S`` apart. A share of 1.0 is one core
busy for the whole window. Sampling cannot be replayed from files, so it goes through
``host.measure``. No root needed. Manual equivalent: ``top -b -n 2 -d 1 | head -20`` or
``pidstat 1 1``.

llm-doctor itself, its children and its ancestors (the shell that started it) are marked
``related``: they are the observer, not the contention.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from doctor.host import Host, MeasurementError
from doctor.model import ScanOptions
from probes.processes import engine_of, redact

SAMPLE_S = 0.5
TOP_N = 10


@dataclass(frozen=True, slots=True)
class ProcessCpu:
    pid: int
    comm: str
    cmdline: str
    cpu_cores: float  # CPU time / wall time over the window; 1.0 = one core
    engine: str | None
    related: bool  # llm-doctor, its children or its ancestors
    kernel_thread: bool  # no command line: kswapd, kworker... (memory pressure, not a hog)


@dataclass(frozen=True, slots=True)
class CpuLoadRecord:
    window_s: float
    logical_cpus: int
    busy_cores: float  # all CPUs' busy time / window, from /proc/stat
    top: tuple[ProcessCpu, ...]  # heaviest first, at most TOP_N


def _cpu_seconds(proc) -> float | None:
    import psutil

    try:
        t = proc.cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return t.user + t.system


def _related_pids() -> set[int]:
    import psutil

    me = psutil.Process(os.getpid())
    pids = {me.pid} | {p.pid for p in me.parents()}
    return pids | {p.pid for p in me.children(recursive=True)}


def sample(window_s: float = SAMPLE_S) -> dict:
    """Live measurement; returns plain data so that it can be recorded as JSON."""
    try:
        import psutil
    except ImportError:
        raise MeasurementError("psutil is not installed: pip install psutil") from None

    def busy(times) -> float:
        return sum(times) - times.idle - getattr(times, "iowait", 0.0)

    procs = {p.pid: p for p in psutil.process_iter(["name", "cmdline"])}
    before = {pid: _cpu_seconds(p) for pid, p in procs.items()}
    sys_before, t0 = psutil.cpu_times(), time.perf_counter()
    time.sleep(window_s)
    after = {pid: _cpu_seconds(p) for pid, p in procs.items()}
    sys_after, elapsed = psutil.cpu_times(), time.perf_counter() - t0
    related = _related_pids()
    rows = []
    for pid, proc in procs.items():
        if before[pid] is None or after[pid] is None:
            continue
        cores = (after[pid] - before[pid]) / elapsed
        if cores < 0.01:
            continue
        cmdline = redact(" ".join(proc.info.get("cmdline") or []))[:300]
        rows.append({"pid": pid, "comm": proc.info.get("name") or "?", "cmdline": cmdline,
                     "cpu_cores": round(cores, 3), "related": pid in related})
    rows.sort(key=lambda r: r["cpu_cores"], reverse=True)
    return {
        "window_s": round(elapsed, 3),
        "logical_cpus": psutil.cpu_count() or 1,
        "busy_cores": round((busy(sys_after) - busy(sys_before)) / elapsed, 3),
        "top": rows[:TOP_N],
    }


def probe(host: Host, options: ScanOptions) -> CpuLoadRecord:
    data = host.measure("host.cpu_load", sample)
    top = tuple(
        ProcessCpu(r["pid"], r["comm"], r["cmdline"], r["cpu_cores"],
                   engine_of(r["cmdline"]), r["related"], kernel_thread=not r["cmdline"])
        for r in data["top"]
    )
    return CpuLoadRecord(
        window_s=data["window_s"],
        logical_cpus=data["logical_cpus"],
        busy_cores=data["busy_cores"],
        top=top,
    )
