"""host.limits: resource limits of this process and of every serving-engine process.

Reads ``/proc/self/limits`` and ``/proc/<pid>/limits`` for each detected engine (world-
readable; no root needed). Counts, not bytes, except locked memory (bytes; None =
unlimited). Manual equivalent: ``ulimit -Sn; ulimit -Hn`` and ``cat /proc/<pid>/limits``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.host import Host
from doctor.model import ScanOptions
from probes.processes import engine_processes

# /proc/<pid>/limits row names for the limits we judge.
ROWS = {
    "Max open files": "nofile",
    "Max processes": "nproc",
    "Max locked memory": "memlock",
}


@dataclass(frozen=True, slots=True)
class ProcessLimits:
    pid: int | None  # None for this process as captured (/proc/self)
    comm: str
    engine: str | None
    role: str  # "engine", or "shell": llm-doctor itself, standing for what the shell hands on
    nofile_soft: int | None  # None = unlimited
    nofile_hard: int | None
    nproc_soft: int | None
    nproc_hard: int | None
    memlock_soft_bytes: int | None
    memlock_hard_bytes: int | None


@dataclass(frozen=True, slots=True)
class LimitsRecord:
    processes: tuple[ProcessLimits, ...]
    engine_count: int


def parse_limits(text: str) -> dict[str, int | None]:
    """``/proc/<pid>/limits`` → {"nofile_soft": 1024, ...}; unlimited is None."""
    values: dict[str, int | None] = {}
    for line in text.splitlines()[1:]:
        for row, key in ROWS.items():
            if line.startswith(row):
                soft, hard = line[len(row):].split()[:2]
                values[f"{key}_soft"] = None if soft == "unlimited" else int(soft)
                values[f"{key}_hard"] = None if hard == "unlimited" else int(hard)
    return values


def _limits(pid: int | None, comm: str, engine: str | None, text: str) -> ProcessLimits:
    v = parse_limits(text)
    return ProcessLimits(
        pid=pid,
        comm=comm,
        engine=engine,
        role="engine" if engine else "shell",
        nofile_soft=v.get("nofile_soft"),
        nofile_hard=v.get("nofile_hard"),
        nproc_soft=v.get("nproc_soft"),
        nproc_hard=v.get("nproc_hard"),
        memlock_soft_bytes=v.get("memlock_soft"),
        memlock_hard_bytes=v.get("memlock_hard"),
    )


def probe(host: Host, options: ScanOptions) -> LimitsRecord:
    rows = [_limits(None, "llm-doctor", None, host.read_text("/proc/self/limits"))]
    engines = engine_processes(host)
    for proc in engines:
        rows.append(_limits(proc.pid, proc.comm, proc.engine,
                            host.read_text(f"/proc/{proc.pid}/limits")))
    return LimitsRecord(processes=tuple(rows), engine_count=len(engines))


def summary(record: LimitsRecord) -> str:
    """One line for people: the shell's limits and how many engines were found."""
    me = record.processes[0]
    return (f"open files {me.nofile_soft}/{me.nofile_hard}, processes {me.nproc_soft}; "
            f"{record.engine_count} engine process(es)")
