"""host.cpu_load: which processes take the CPU right now, sampled over a short window.

Samples per-process CPU time (utime+stime, via psutil from ``/proc/<pid>/stat``) and the
system's busy time (``/proc/stat``) twice, ``SAMPLE_S`` apart. A share of 1.0 is one core
busy for the whole window. Sampling cannot be replayed from files, so it goes through
``host.measure``. No root needed. Manual equivalent: ``top -b -n 2 -d 1 | head -20`` or
``pidstat 1 1``.

llm-doctor itself, its children and its ancestors (the shell that started it) are marked
``related``: they are the observer, not the contention.

A command line is kept whole (secrets masked) only for a serving engine; any other
process is kept as its program name, in the measurement, the record and every report:
its arguments may carry credentials (``--dsn postgres://app:PASSWORD@db``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from doctor.seam.host import Host, MeasurementError
from doctor.model import ScanOptions
from doctor.engines import engine_of
from doctor.redact import program_only, redact_cmdline
from doctor.display import number

SAMPLE_S = 0.5
TOP_N = 10


@dataclass(frozen=True, slots=True)
class ProcessCpu:
    pid: int
    comm: str
    cmdline: str  # an engine's, secrets masked; any other process's program name only
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
        start, end = before[pid], after[pid]
        if start is None or end is None:
            continue
        cores = (end - start) / elapsed
        if cores < 0.01:
            continue
        cmdline = kept_cmdline(" ".join(proc.info.get("cmdline") or []))
        rows.append({"pid": pid, "comm": proc.info.get("name") or "?", "cmdline": cmdline,
                     "cpu_cores": round(cores, 3), "related": pid in related})
    rows.sort(key=lambda r: r["cpu_cores"], reverse=True)
    return {
        "window_s": round(elapsed, 3),
        "logical_cpus": psutil.cpu_count() or 1,
        "busy_cores": round((busy(sys_after) - busy(sys_before)) / elapsed, 3),
        "top": rows[:TOP_N],
    }


def kept_cmdline(cmdline: str) -> str:
    """What may be kept of a command line: an engine's, masked and cut at 300 characters;
    any other process's program name. Applied again on replay, so that a recording made
    before this rule (or by hand) cannot put someone's arguments into a report."""
    if engine_of(cmdline) is None:
        return program_only(cmdline)
    return redact_cmdline(cmdline)[:300]


# Bounds that no real sample passes (pids, CPU counts; cores and seconds) and that keep a
# hand-written huge integer out of float() and int-to-text conversions.
MAX_INTEGER = 2**31
MAX_NUMBER = 1e6


def _valid(value: Any, kind: str) -> bool:
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int if kind == "integer" else (int, float)):
            return False
        return 0 <= value < (MAX_INTEGER if kind == "integer" else MAX_NUMBER)  # NaN fails too
    return isinstance(value, {"string": str, "boolean": bool, "list": list}[kind])


def _shown(value: Any) -> str:
    """A recorded value as an error message quotes it: short, and never too big to print."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"<an integer of {value.bit_length()} bits>"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an integer of thousands of digits inside it
        return f"<a {type(value).__name__} too large to show>"
    return text if len(text) <= 60 else text[:57] + "..."


def _field(where: str, row: dict, key: str, kind: str) -> Any:
    """``row[key]``, checked to be a ``kind``; a wrong recording is a clear error."""
    if key not in row:
        raise MeasurementError(f"measurement host.cpu_load: {where or 'the measurement'} "
                               f"has no {key!r}")
    if not _valid(row[key], kind):
        expected = {"number": f"a number from 0 to {MAX_NUMBER:g}",
                    "integer": "an integer from 0 to 2**31"}.get(kind, f"a {kind}")
        raise MeasurementError(f"measurement host.cpu_load: {where}{'.' if where else ''}{key} "
                               f"= {_shown(row[key])}: expected {expected}")
    return row[key]


def _row(i: int, row: Any) -> ProcessCpu:
    where = f"top[{i}]"
    if not isinstance(row, dict):
        raise MeasurementError(f"measurement host.cpu_load: top[{i}] = {_shown(row)}: "
                               "expected an object with pid, comm, cmdline, cpu_cores, related")
    cmdline = kept_cmdline(_field(where, row, "cmdline", "string"))
    return ProcessCpu(
        pid=_field(where, row, "pid", "integer"),
        comm=_field(where, row, "comm", "string"),
        cmdline=cmdline,
        cpu_cores=float(_field(where, row, "cpu_cores", "number")),
        engine=engine_of(cmdline),
        related=_field(where, row, "related", "boolean"),
        kernel_thread=not cmdline,
    )


def probe(host: Host, options: ScanOptions) -> CpuLoadRecord:
    data = host.measure("host.cpu_load", sample)
    if not isinstance(data, dict):
        raise MeasurementError(f"measurement host.cpu_load = {_shown(data)}: expected an object "
                               "with window_s, logical_cpus, busy_cores, top")
    rows = _field("", data, "top", "list")
    top = sorted((_row(i, r) for i, r in enumerate(rows)), key=lambda p: -p.cpu_cores)
    return CpuLoadRecord(
        window_s=float(_field("", data, "window_s", "number")),
        logical_cpus=_field("", data, "logical_cpus", "integer"),
        busy_cores=float(_field("", data, "busy_cores", "number")),
        top=tuple(top[:TOP_N]),  # a recording may hold more; the record promises TOP_N
    )


def summary(record: CpuLoadRecord) -> str:
    """One line for people: how busy the CPUs were and the three heaviest other processes."""
    others = [p for p in record.top if not p.related][:3]
    top = ", ".join(f"{p.comm}({p.pid}) {number(p.cpu_cores, '.2f')}" for p in others) or "nothing busy"
    return f"{number(record.busy_cores, '.2f')} of {record.logical_cpus} cores busy; top: {top}"
