"""host.sysctl: kernel settings that bound connections, memory policy and huge pages.

Reads ``/proc/sys/...``, ``/sys/kernel/mm/transparent_hugepage/*`` and the TcpExt listen
counters of ``/proc/net/netstat`` (world-readable).
Manual equivalent: ``sysctl fs.file-max net.core.somaxconn vm.swappiness`` and
``cat /sys/kernel/mm/transparent_hugepage/enabled``, ``nstat -az TcpExtListenOverflows``. A setting the kernel lacks is None.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.host import Host, HostReadError
from doctor.model import ScanOptions


@dataclass(frozen=True, slots=True)
class SysctlRecord:
    fs_file_max: int | None  # fs.file-max: system-wide open files
    fs_nr_open: int | None  # fs.nr_open: ceiling for any process's RLIMIT_NOFILE
    net_core_somaxconn: int | None  # listen() backlog cap
    net_ipv4_tcp_max_syn_backlog: int | None
    net_core_rmem_max_bytes: int | None
    net_core_wmem_max_bytes: int | None
    net_ipv4_tcp_rmem_max_bytes: int | None  # third field of net.ipv4.tcp_rmem
    net_ipv4_tcp_wmem_max_bytes: int | None
    vm_swappiness: int | None
    vm_overcommit_memory: int | None  # 0 heuristic, 1 always, 2 never
    thp_enabled: str | None  # the [bracketed] choice: always, madvise, never
    thp_defrag: str | None
    # /proc/net/netstat TcpExt, counted since boot: connections dropped at a full accept queue
    listen_overflows: int | None
    listen_drops: int | None


def _int(host: Host, path: str, field: int = 0) -> int | None:
    try:
        return int(host.read_text(path).split()[field])
    except HostReadError:
        return None


def _choice(host: Host, path: str) -> str | None:
    """``always [madvise] never`` → ``madvise``."""
    try:
        text = host.read_text(path)
    except HostReadError:
        return None
    for word in text.split():
        if word.startswith("["):
            return word.strip("[]")
    return text.strip() or None


def tcp_ext(text: str) -> dict[str, int]:
    """``/proc/net/netstat``: the TcpExt header line and value line, zipped."""
    rows = [line.split()[1:] for line in text.splitlines() if line.startswith("TcpExt:")]
    if len(rows) < 2:
        return {}
    return {k: int(v) for k, v in zip(rows[0], rows[1])}


def probe(host: Host, options: ScanOptions) -> SysctlRecord:
    try:
        netstat = tcp_ext(host.read_text("/proc/net/netstat"))
    except HostReadError:
        netstat = {}
    return SysctlRecord(
        fs_file_max=_int(host, "/proc/sys/fs/file-max"),
        fs_nr_open=_int(host, "/proc/sys/fs/nr_open"),
        net_core_somaxconn=_int(host, "/proc/sys/net/core/somaxconn"),
        net_ipv4_tcp_max_syn_backlog=_int(host, "/proc/sys/net/ipv4/tcp_max_syn_backlog"),
        net_core_rmem_max_bytes=_int(host, "/proc/sys/net/core/rmem_max"),
        net_core_wmem_max_bytes=_int(host, "/proc/sys/net/core/wmem_max"),
        net_ipv4_tcp_rmem_max_bytes=_int(host, "/proc/sys/net/ipv4/tcp_rmem", 2),
        net_ipv4_tcp_wmem_max_bytes=_int(host, "/proc/sys/net/ipv4/tcp_wmem", 2),
        vm_swappiness=_int(host, "/proc/sys/vm/swappiness"),
        vm_overcommit_memory=_int(host, "/proc/sys/vm/overcommit_memory"),
        thp_enabled=_choice(host, "/sys/kernel/mm/transparent_hugepage/enabled"),
        thp_defrag=_choice(host, "/sys/kernel/mm/transparent_hugepage/defrag"),
        listen_overflows=netstat.get("ListenOverflows"),
        listen_drops=netstat.get("ListenDrops"),
    )


def summary(record: SysctlRecord) -> str:
    """One line for people: the backlogs, swappiness and THP mode."""
    return (f"somaxconn {record.net_core_somaxconn}, syn backlog "
            f"{record.net_ipv4_tcp_max_syn_backlog}, swappiness {record.vm_swappiness}, "
            f"THP {record.thp_enabled}")
