"""The probe registry: one explicit tuple, no import side effects, no plugin scanning."""

from __future__ import annotations

from doctor.model import Level, ProbeSpec
from probes import (
    host_cpu,
    host_cpu_load,
    host_limits,
    host_memory,
    host_memory_bandwidth,
    host_storage,
    host_sysctl,
)

PROBES: tuple[ProbeSpec, ...] = (
    ProbeSpec(
        name="host.limits",
        level=Level.QUICK,
        description="Open files, processes and locked memory limits of llm-doctor's shell and every engine process",
        reads="/proc/self/limits, /proc/<pid>/limits, /proc/<pid>/cmdline",
        timeout_s=10.0,
        run=host_limits.probe,
        summary=host_limits.summary,
    ),
    ProbeSpec(
        name="host.sysctl",
        level=Level.QUICK,
        description="Kernel settings: file-max, nr_open, listen backlogs, socket buffers, swappiness, overcommit, THP",
        reads="/proc/sys/{fs,net,vm}/..., /sys/kernel/mm/transparent_hugepage/",
        timeout_s=5.0,
        run=host_sysctl.probe,
        summary=host_sysctl.summary,
    ),
    ProbeSpec(
        name="host.cpu",
        level=Level.QUICK,
        description="CPU model, cores, sockets, NUMA nodes, AVX-512/AMX, frequency governor and energy preference, load",
        reads="/proc/cpuinfo, /proc/loadavg, /sys/devices/system/{cpu,node}/",
        timeout_s=10.0,
        run=host_cpu.probe,
        summary=host_cpu.summary,
    ),
    ProbeSpec(
        name="host.cpu_load",
        level=Level.QUICK,
        description="Processes taking the most CPU, sampled over half a second",
        reads="/proc/stat, /proc/<pid>/stat (sampled twice)",
        timeout_s=10.0,
        run=host_cpu_load.probe,
        summary=host_cpu_load.summary,
    ),
    ProbeSpec(
        name="host.memory",
        level=Level.QUICK,
        description="Total and available memory, swap in use",
        reads="/proc/meminfo",
        timeout_s=5.0,
        run=host_memory.probe,
        summary=host_memory.summary,
    ),
    ProbeSpec(
        name="host.storage",
        level=Level.QUICK,
        description="Model weights' filesystem, block device, rotational or not, free space; read throughput (standard: 1 GiB sample, full: up to 16 GiB)",
        reads="/proc/self/mountinfo, /sys/dev/block/, /sys/block/*/queue/rotational, statvfs, the weight files (O_DIRECT)",
        timeout_s=90.0,
        run=host_storage.probe,
        summary=host_storage.summary,
        exclusive=True,
    ),
    ProbeSpec(
        name="host.memory_bandwidth",
        level=Level.STANDARD,
        description="STREAM copy and triad on the CPU (torch, numpy fallback) against the DIMMs' ceiling",
        reads="/sys/devices/system/cpu/*/cache/, /proc/meminfo, dmidecode -t memory; runs a micro-kernel",
        timeout_s=180.0,
        run=host_memory_bandwidth.probe,
        summary=host_memory_bandwidth.summary,
        exclusive=True,
    ),
)


def by_name() -> dict[str, ProbeSpec]:
    return {spec.name: spec for spec in PROBES}
