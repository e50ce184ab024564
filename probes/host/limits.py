"""host.limits: resource limits of this process and of every serving-engine process.

Reads ``/proc/self/limits`` and ``/proc/<pid>/limits`` for each detected engine (world-
readable; no root needed). Counts, not bytes, except locked memory (bytes; None =
unlimited). Manual equivalent: ``ulimit -Sn; ulimit -Hn`` and ``cat /proc/<pid>/limits``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from doctor.seam.host import Host
from doctor.model import ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.i18n import t
from probes.helpers.proc_limits import parse_limits
from probes.helpers.engine_flags import identity_of
from probes.helpers.processes import engine_processes


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
    # an engine's identity in finding keys (kind + listening address, else model path, else
    # pid: doctor/engines.py); None for this shell
    identity: str | None = None
    # field -> why it is None: the limit is unlimited (a value the rules cannot tell from
    # one not read, so `why` says which)
    missing: dict[str, str] = field(default_factory=dict)
    # the fields of ``missing`` whose None is a value, no limit set, not a read that failed:
    # `why` rules a cause out on them (doctor/rules/evaluate.py ``none_set``)
    unset: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LimitsRecord:
    processes: tuple[ProcessLimits, ...]
    engine_count: int


def _limits(pid: int | None, comm: str, engine: str | None, text: str,
            path: str = "/proc/self/limits") -> ProcessLimits:
    v = parse_limits(text, path)
    return ProcessLimits(
        pid=pid,
        comm=comm,
        engine=engine,
        role="engine" if engine else "shell",
        nofile_soft=v["nofile_soft"],
        nofile_hard=v["nofile_hard"],
        nproc_soft=v["nproc_soft"],
        nproc_hard=v["nproc_hard"],
        memlock_soft_bytes=v["memlock_soft"],
        memlock_hard_bytes=v["memlock_hard"],
        missing={name: t("unlimited ({path})", path=path) for name, key in FIELDS.items()
                 if v[key] is None},
        unset=tuple(name for name, key in FIELDS.items() if v[key] is None),
    )


# the record's fields and parse_limits' keys; a None among them is "unlimited"
FIELDS = {"nofile_soft": "nofile_soft", "nofile_hard": "nofile_hard", "nproc_soft": "nproc_soft",
          "nproc_hard": "nproc_hard", "memlock_soft_bytes": "memlock_soft",
          "memlock_hard_bytes": "memlock_hard"}


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> LimitsRecord:
    rows = [_limits(None, "llm-doctor", None, host.read_text("/proc/self/limits"))]
    engines = engine_processes(host)
    for proc in engines:
        path = f"/proc/{proc.pid}/limits"
        rows.append(replace(_limits(proc.pid, proc.comm, proc.engine, host.read_text(path), path),
                            identity=identity_of(proc)))
    return LimitsRecord(processes=tuple(rows), engine_count=len(engines))


def summary(record: LimitsRecord) -> str:
    """One line for people: the shell's limits and how many engines were found."""
    me = record.processes[0]

    def limit(value: int | None) -> str:
        return t("unlimited") if value is None else str(value)  # None is "unlimited" here

    return t("open files {soft}/{hard}, processes {nproc}; {engines} engine process(es)",
             soft=limit(me.nofile_soft), hard=limit(me.nofile_hard), nproc=limit(me.nproc_soft),
             engines=record.engine_count)
