"""Which processes take the CPU, sampled over a short window: host.cpu_load's work.

probes/host/cpu_load.py says what is sampled and how (per-process CPU time via psutil from
``/proc/<pid>/stat``, the system's busy time from ``/proc/stat``, twice, ``SAMPLE_S``
apart; the CPU left to each engine). The sample goes through ``host.measure`` (it cannot be
replayed from files) and is taken once a scan: engine.frontend is handed host.cpu_load's
record (in the daemon too), and samples for itself only when run without it. A command line is kept whole
(secrets masked) only for a serving engine; any other process is kept as its program name.
Manual equivalent: ``top -b -n 2 -d 1 | head -20``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from doctor.i18n import lazy
from doctor.seam.host import Host, MeasurementError
from doctor.inputs import Inputs
from doctor.engines import engine_of
from doctor.redact import program_only, redact_cmdline
from probes.helpers.engine_flags import flag

NAME = "host.cpu_load"  # the probe whose record this is, and its measurement
SAMPLE_S = 0.5
TOP_N = 10
MIN_CORES = 0.01  # a process under this in the window is idle (it is not in ``top``)


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
class EngineCpu:
    """One serving engine's share of the CPUs: what it used, what its threads could use, and
    what the other work leaves it. None where a recording did not keep the figure."""

    pid: int  # the tree's root: the engine process whose parent is no engine of its kind
    comm: str
    engine: str  # vllm, sglang, llama.cpp, ...
    processes: int  # processes in the tree (API server, EngineCore, workers)
    cpu_cores: float  # the tree's CPU time over the window, in cores
    threads: int | None  # /proc/<pid>/status Threads, summed over the tree
    compute_threads: int | None  # llama.cpp's -t/--threads: the threads that compute tokens
    allowed_cpus: int | None  # /proc/<pid>/status Cpus_allowed_list, counted
    usable_cpus: int  # allowed_cpus, else every logical CPU
    cores_wanted: float | None  # what its threads could use: min(compute_threads or threads, usable_cpus)
    other_busy_cores: float | None  # its CPUs' busy time less the engines' and llm-doctor's, in cores
    cores_left: float | None  # usable_cpus - other_busy_cores: the CPU the other work leaves it
    missing: dict[str, str] = field(default_factory=dict)  # field -> why it is None


@dataclass(frozen=True, slots=True)
class CpuLoadRecord:
    window_s: float
    logical_cpus: int
    busy_cores: float  # all CPUs' busy time / window, from /proc/stat
    top: tuple[ProcessCpu, ...]  # heaviest first, at most TOP_N
    # all CPUs' busy time less the engines' and llm-doctor's (every other process summed,
    # kernel threads and processes that exited inside the window included), in cores
    other_busy_cores: float | None = None
    other_processes: int | None = None  # processes other than engines and llm-doctor using >= MIN_CORES
    engines: tuple[EngineCpu, ...] = ()


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


def _busy(times) -> float:
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _engine_facts(proc) -> dict:
    """Threads and allowed CPUs of one process (``/proc/<pid>/status``); None when it is gone
    or not ours to read."""
    import psutil

    try:
        return {"threads": proc.num_threads(), "allowed": sorted(proc.cpu_affinity())}
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return {"threads": None, "allowed": None}


def _engine_rows(procs: dict, cores: dict[int, float], cmdlines: dict[int, str],
                 per_cpu_busy: list[float], related_cores: float, logical: int) -> list[dict]:
    """One row per engine tree, every engine whether busy or idle."""
    import psutil

    found = {pid: engine_of(cmdlines[pid]) for pid in procs}
    kinds = {pid: kind for pid, kind in found.items() if kind is not None}
    trees: dict[int, list[int]] = {}
    for pid, kind in kinds.items():
        root = pid
        for _ in range(64):  # a process table is a tree; the bound is against a changing one
            try:
                parent = procs[root].ppid()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                break
            if kinds.get(parent) != kind:
                break
            root = parent
        trees.setdefault(root, [root]).append(pid)  # the root is a member even when a walk stopped short
    engine_cores = sum(cores.get(pid, 0.0) for pid in kinds)
    rows = []
    for root, listed in trees.items():
        members = set(listed)
        facts = {pid: _engine_facts(procs[pid]) for pid in members}
        allowed = facts[root]["allowed"]
        threads = [f["threads"] for f in facts.values()]
        busy_allowed = None
        if allowed is not None and all(0 <= cpu < len(per_cpu_busy) for cpu in allowed):
            busy_allowed = sum(per_cpu_busy[cpu] for cpu in allowed)
            # llm-doctor runs anywhere: its share of these CPUs, in proportion
            busy_allowed -= related_cores * len(allowed) / max(1, logical)
        rows.append({
            "pid": root, "comm": procs[root].info.get("name") or "?",
            "cmdline": kept_cmdline(cmdlines[root]), "processes": len(members),
            "cpu_cores": round(sum(cores.get(pid, 0.0) for pid in members), 3),
            "threads": sum(threads) if None not in threads else None,
            "allowed_cpus": len(allowed) if allowed is not None else None,
            "allowed_busy_cores": (round(max(0.0, busy_allowed - engine_cores), 3)
                                   if busy_allowed is not None else None),
        })
    return rows


def sample(window_s: float = SAMPLE_S) -> dict:
    """Live measurement; returns plain data so that it can be recorded as JSON."""
    try:
        import psutil
    except ImportError:
        raise MeasurementError("psutil is not installed: pip install psutil") from None

    procs = {p.pid: p for p in psutil.process_iter(["name", "cmdline"])}
    before = {pid: _cpu_seconds(p) for pid, p in procs.items()}
    sys_before, t0 = psutil.cpu_times(percpu=True), time.perf_counter()
    time.sleep(window_s)
    after = {pid: _cpu_seconds(p) for pid, p in procs.items()}
    sys_after, elapsed = psutil.cpu_times(percpu=True), time.perf_counter() - t0
    related = _related_pids()
    cmdlines = {pid: " ".join(p.info.get("cmdline") or []) for pid, p in procs.items()}
    cores = {pid: (end - start) / elapsed for pid, start in before.items()
             if start is not None and (end := after[pid]) is not None}
    per_cpu = [(_busy(b) - _busy(a)) / elapsed for a, b in zip(sys_before, sys_after)]
    rows = []
    for pid, used in cores.items():
        if used < MIN_CORES:
            continue
        rows.append({"pid": pid, "comm": procs[pid].info.get("name") or "?",
                     "cmdline": kept_cmdline(cmdlines[pid]), "cpu_cores": round(used, 3),
                     "related": pid in related})
    rows.sort(key=lambda r: r["cpu_cores"], reverse=True)
    related_cores = sum(r["cpu_cores"] for r in rows if r["related"])
    engine_cores = sum(used for pid, used in cores.items() if engine_of(cmdlines[pid]))
    logical = psutil.cpu_count() or len(per_cpu) or 1
    return {
        "window_s": round(elapsed, 3),
        "logical_cpus": logical,
        "busy_cores": round(sum(per_cpu), 3),
        "top": rows[:TOP_N],
        "engine_cores": round(engine_cores, 3),
        "related_cores": round(related_cores, 3),
        "other_processes": sum(1 for r in rows if not r["related"] and engine_of(cmdlines[r["pid"]]) is None),
        "engines": _engine_rows(procs, cores, cmdlines, per_cpu, related_cores, logical),
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


def _optional(where: str, row: dict, key: str, kind: str) -> Any:
    """``row[key]`` when a recording kept it (checked as ``_field`` does), else None: a
    recording made before the figure was kept."""
    return None if row.get(key) is None else _field(where, row, key, kind)


def _compute_threads(kind: str, cmdline: str) -> int | None:
    """llama.cpp's ``-t``/``--threads``: the threads that compute (its others wait on HTTP)."""
    if kind != "llama.cpp":
        return None
    value = flag(cmdline.split(), "-t", "--threads")
    try:
        threads = int(value) if value is not None else None
    except ValueError:
        return None
    return threads if threads is not None and 0 < threads < MAX_INTEGER else None


def _engine(i: int, row: Any, logical: int, other_busy: float | None) -> EngineCpu:
    where = f"engines[{i}]"
    if not isinstance(row, dict):
        raise MeasurementError(f"measurement host.cpu_load: {where} = {_shown(row)}: expected an "
                               "object with pid, comm, cmdline, cpu_cores, threads, allowed_cpus")
    cmdline = kept_cmdline(_field(where, row, "cmdline", "string"))
    kind = engine_of(cmdline)
    if kind is None:
        raise MeasurementError(f"measurement host.cpu_load: {where}.cmdline = {_shown(cmdline)}: "
                               "not a serving engine's command line")
    threads = _optional(where, row, "threads", "integer")
    allowed = _optional(where, row, "allowed_cpus", "integer")
    usable = min(allowed, logical) if allowed else logical
    compute = _compute_threads(kind, cmdline)
    wanted = compute or threads
    busy_allowed = _optional(where, row, "allowed_busy_cores", "number")
    # every CPU allowed: the host's figure; a subset: the busy time of those CPUs
    other = other_busy if usable == logical or busy_allowed is None else float(busy_allowed)
    other = min(float(usable), other) if other is not None else None
    return EngineCpu(
        pid=_field(where, row, "pid", "integer"), comm=_field(where, row, "comm", "string"),
        engine=kind, processes=_optional(where, row, "processes", "integer") or 1,
        cpu_cores=float(_field(where, row, "cpu_cores", "number")), threads=threads,
        compute_threads=compute, allowed_cpus=allowed, usable_cpus=usable,
        cores_wanted=float(min(wanted, usable)) if wanted else None,
        other_busy_cores=round(other, 3) if other is not None else None,
        cores_left=round(usable - other, 3) if other is not None else None,
        missing=_missing(wanted, other),
    )


def _missing(wanted: int | None, other: float | None) -> dict[str, str]:
    """Why the figures cpu-contention-spread judges are None."""
    out: dict[str, str] = {}
    if not wanted:
        out["cores_wanted"] = lazy("its thread count was not read (/proc/<pid>/status Threads, "
                                   "or the sample kept none) and it has no -t/--threads flag")
    if other is None:
        out["other_busy_cores"] = out["cores_left"] = lazy(
            "the other work on its CPUs was not read (/proc/stat, or the sample kept none)")
    return out


def load_of(host: Host, inputs: Inputs) -> CpuLoadRecord:
    """The record host.cpu_load handed over in ``inputs``, else sampled here."""
    record = inputs.get(NAME, CpuLoadRecord)
    return record if record is not None else read_load(host)


def read_load(host: Host) -> CpuLoadRecord:
    """The CPU sample as a record (host.cpu_load's work; a probe that needs it reads its record
    through ``load_of``), each field checked, as a recording may be edited."""
    data = host.measure(NAME, sample)
    if not isinstance(data, dict):
        raise MeasurementError(f"measurement host.cpu_load = {_shown(data)}: expected an object "
                               "with window_s, logical_cpus, busy_cores, top")
    rows = _field("", data, "top", "list")
    top = sorted((_row(i, r) for i, r in enumerate(rows)), key=lambda p: -p.cpu_cores)
    logical = _field("", data, "logical_cpus", "integer")
    busy = float(_field("", data, "busy_cores", "number"))
    # A recording made before these were kept: the engines and llm-doctor of its top rows,
    # which hold every process that took more than the tenth heaviest.
    engine_cores = _optional("", data, "engine_cores", "number")
    if engine_cores is None:
        engine_cores = sum(p.cpu_cores for p in top if p.engine is not None)
    related_cores = _optional("", data, "related_cores", "number")
    if related_cores is None:
        related_cores = sum(p.cpu_cores for p in top if p.related)
    other_busy = max(0.0, min(float(logical), busy) - engine_cores - related_cores)
    others = _optional("", data, "other_processes", "integer")
    if others is None:
        others = sum(1 for p in top if not p.related and p.engine is None)
    engine_rows = _optional("", data, "engines", "list")
    if engine_rows is None:
        engine_rows = [{"pid": p.pid, "comm": p.comm, "cmdline": p.cmdline, "cpu_cores": p.cpu_cores}
                       for p in top if p.engine is not None]
    return CpuLoadRecord(
        window_s=float(_field("", data, "window_s", "number")),
        logical_cpus=logical,
        busy_cores=busy,
        top=tuple(top[:TOP_N]),  # a recording may hold more; the record promises TOP_N
        other_busy_cores=round(other_busy, 3),
        other_processes=others,
        engines=tuple(_engine(i, r, logical, other_busy) for i, r in enumerate(engine_rows)),
    )
