"""One line per probe for people: the figures worth reading without opening the JSON."""

from __future__ import annotations

from typing import Any, Callable

from doctor.model import ProbeResult


def _limits(r: Any) -> str:
    me = r.processes[0]
    return (f"open files {me.nofile_soft}/{me.nofile_hard}, processes {me.nproc_soft}; "
            f"{r.engine_count} engine process(es)")


def _sysctl(r: Any) -> str:
    return (f"somaxconn {r.net_core_somaxconn}, syn backlog {r.net_ipv4_tcp_max_syn_backlog}, "
            f"swappiness {r.vm_swappiness}, THP {r.thp_enabled}")


def _cpu(r: Any) -> str:
    governors = ", ".join(f"{g}×{n}" for g, n in r.governor_counts.items()) or "no cpufreq"
    isa = " ".join(r.isa) or "no AVX2"
    return (f"{r.model}: {r.logical_cpus} CPUs, {r.sockets or '?'} socket(s), "
            f"{r.numa_nodes} NUMA node(s); {isa}; governor {governors}; load {r.load_1m}")


def _cpu_load(r: Any) -> str:
    others = [p for p in r.top if not p.related][:3]
    top = ", ".join(f"{p.comm}({p.pid}) {p.cpu_cores:.2f}" for p in others) or "nothing busy"
    return f"{r.busy_cores:.2f} of {r.logical_cpus} cores busy; top: {top}"


def _memory(r: Any) -> str:
    return (f"{r.total_mib} MiB total, {r.available_mib} available; "
            f"swap {r.swap_used_mib}/{r.swap_total_mib} MiB used")


def _bandwidth(r: Any) -> str:
    ceiling = (f"{r.triad_ratio:.0%} of {r.ceiling_gbps} GB/s ceiling" if r.ceiling_gbps
               else f"no ceiling ({r.ceiling_reason})")
    return (f"copy {r.copy_gbps} GB/s, triad {r.triad_gbps} GB/s ({r.backend}, "
            f"{r.threads} threads, {r.kernel_s} s); {ceiling}")


def _storage(r: Any) -> str:
    parts = []
    for p in r.paths:
        speed = f"{p.read_mbps:.0f} MB/s" if p.read_mbps else (p.read_reason or "not read")
        rot = {True: "rotational", False: "solid-state", None: "no block device"}[p.rotational]
        parts.append(f"{p.path}: {p.fs_type} on {p.block_device or '-'} ({rot}), "
                     f"{p.weights_bytes / 1e9:.1f} GB weights, {speed}")
    return "; ".join(parts)


SUMMARIES: dict[str, Callable[[Any], str]] = {
    "host.limits": _limits,
    "host.sysctl": _sysctl,
    "host.cpu": _cpu,
    "host.cpu_load": _cpu_load,
    "host.memory": _memory,
    "host.memory_bandwidth": _bandwidth,
    "host.storage": _storage,
}


def summary(result: ProbeResult) -> str:
    if result.status != "ok":
        return result.reason or ""
    fn = SUMMARIES.get(result.name)
    return fn(result.record) if fn else ""
