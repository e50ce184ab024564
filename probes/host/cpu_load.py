"""host.cpu_load: which processes take the CPU right now, sampled over a short window.

Samples per-process CPU time (utime+stime, via psutil from ``/proc/<pid>/stat``) and the
system's busy time (``/proc/stat``) twice, ``SAMPLE_S`` apart. A share of 1.0 is one core
busy for the whole window. Sampling cannot be replayed from files, so it goes through
``host.measure``. No root needed. Manual equivalent: ``top -b -n 2 -d 1 | head -20`` or
``pidstat 1 1``.

llm-doctor itself, its children and its ancestors (the shell that started it) are marked
``related``: they are the observer, not the contention.

The CPU left to each engine (``engines``): an engine is a process tree (vLLM's API server,
its EngineCore and workers; one llama-server), its threads from ``/proc/<pid>/status``
``Threads``, the CPUs it may run on from ``Cpus_allowed_list`` (``sched_getaffinity``) and
how busy those CPUs were from the per-CPU rows of ``/proc/stat``. What other work takes of
them is their busy time less the engines' own and llm-doctor's: every other process summed,
kernel threads, interrupts and processes that came and went inside the window included, so
that contention spread over many small processes counts as much as one hog. Manual
equivalent: ``grep -E 'Threads|Cpus_allowed_list' /proc/<pid>/status`` and ``mpstat -P ALL 1 1``.

A command line is kept whole (secrets masked) only for a serving engine; any other
process is kept as its program name, in the measurement, the record and every report:
its arguments may carry credentials (``--dsn postgres://app:PASSWORD@db``).
"""


from __future__ import annotations

from doctor.display import number
from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions
from doctor.seam.host import Host
from probes.helpers.cpu_sample import TOP_N as TOP_N
from probes.helpers.cpu_sample import CpuLoadRecord, read_load
from probes.helpers.cpu_sample import EngineCpu as EngineCpu
from probes.helpers.cpu_sample import ProcessCpu as ProcessCpu
from probes.helpers.cpu_sample import kept_cmdline as kept_cmdline
from probes.helpers.cpu_sample import sample as sample


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> CpuLoadRecord:
    """The CPU sample (probes/helpers/cpu_sample.py); engine.frontend is handed this record."""
    return read_load(host)


def summary(record: CpuLoadRecord) -> str:
    """One line for people: how busy the CPUs were, the three heaviest other processes, and
    what the other work leaves each engine."""
    others = [p for p in record.top if not p.related][:3]
    top = ", ".join(f"{p.comm}({p.pid}) {number(p.cpu_cores, '.2f')}" for p in others) or t("nothing busy")
    line = t("{busy} of {cpus} cores busy; top: {top}",
             busy=number(record.busy_cores, ".2f"), cpus=record.logical_cpus, top=top)
    for e in record.engines:
        if e.cores_left is not None:
            line += t("; {comm}({pid}) has {left} of {usable} cores left", comm=e.comm, pid=e.pid,
                      left=number(e.cores_left, ".2f"), usable=e.usable_cpus)
    return line
