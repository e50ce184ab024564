"""host.sysctl: kernel settings that bound connections, memory policy and huge pages.

Reads ``/proc/sys/...``, ``/sys/kernel/mm/transparent_hugepage/*`` and the TcpExt listen
counters of ``/proc/net/netstat`` (world-readable).
Manual equivalent: ``sysctl fs.file-max net.core.somaxconn vm.swappiness`` and
``cat /sys/kernel/mm/transparent_hugepage/enabled``, ``nstat -az TcpExtListenOverflows``. A setting the kernel lacks is None; a file that holds
something other than the kernel's format (a word where a number goes) is an error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host
from doctor.seam.missing import Missing
from doctor.model import ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor import display
from doctor.i18n import t
from probes.helpers import kernel_text
from probes.helpers.kernel_text import MalformedError


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
    missing: dict[str, str]  # field → why it holds None (doctor/seam/missing.py): not-found, no-permission…


def _int(m: Missing, name: str, host: Host, path: str, field: int = 0, of: int = 1) -> int | None:
    """The ``field``-th of ``of`` numbers in a sysctl file; None (and why) when unread."""
    text = m.text(name, host, path)
    return None if text is None else parse_int(path, text, field, of)


def parse_int(path: str, text: str, field: int = 0, of: int = 1) -> int:
    """``4096 131072 6291456`` (of=3, field=2) → 6291456; anything else is MalformedError."""
    return kernel_text.count(path, kernel_text.fields(path, text, of)[field])


def _choice(m: Missing, name: str, host: Host, path: str) -> str | None:
    """``always [madvise] never`` → ``madvise``; None (and why) when unread."""
    text = m.text(name, host, path)
    return None if text is None else parse_choice(path, text)


def parse_choice(path: str, text: str) -> str:
    """The one [bracketed] word of a sysfs choice file, as the kernel marks the setting."""
    chosen = [w for w in text.split() if w.startswith("[") and w.endswith("]")]
    if len(chosen) != 1:
        raise MalformedError(path, f"expected one [bracketed] choice, got {len(chosen)}")
    return kernel_text.word(path, chosen[0][1:-1])


def tcp_ext(text: str, path: str = "/proc/net/netstat") -> dict[str, int]:
    """``/proc/net/netstat``: the TcpExt header line and value line, zipped."""
    rows = [line.split()[1:] for line in text.splitlines() if line.startswith("TcpExt:")]
    if len(rows) != 2:
        raise MalformedError(path, f"expected a TcpExt header and value line, got {len(rows)} line(s)")
    names, values = rows
    if len(names) != len(values):
        raise MalformedError(path, f"TcpExt has {len(names)} names but {len(values)} values")
    return {k: kernel_text.count(path, v, f"a TcpExt {k} count") for k, v in zip(names, values)}


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> SysctlRecord:
    m = Missing()
    netstat_text = m.text("listen_overflows", host, "/proc/net/netstat")
    netstat: dict[str, int] = {} if netstat_text is None else tcp_ext(netstat_text)
    if netstat_text is None:  # a kernel without it (networking off in /proc, gVisor)
        m.absent("listen_drops", m.reasons["listen_overflows"])
    elif "ListenOverflows" not in netstat:
        m.absent("listen_overflows", "not-supported")
        m.absent("listen_drops", "not-supported")
    values = {name: _int(m, name, host, path, *where) for name, (path, *where) in INTS.items()}
    return SysctlRecord(
        **values,
        thp_enabled=_choice(m, "thp_enabled", host, "/sys/kernel/mm/transparent_hugepage/enabled"),
        thp_defrag=_choice(m, "thp_defrag", host, "/sys/kernel/mm/transparent_hugepage/defrag"),
        listen_overflows=netstat.get("ListenOverflows"),
        listen_drops=netstat.get("ListenDrops"),
        missing=m.reasons,
    )


# Each integer field and its file (with the field's place among the file's numbers).
INTS: dict[str, tuple] = {
    "fs_file_max": ("/proc/sys/fs/file-max",),
    "fs_nr_open": ("/proc/sys/fs/nr_open",),
    "net_core_somaxconn": ("/proc/sys/net/core/somaxconn",),
    "net_ipv4_tcp_max_syn_backlog": ("/proc/sys/net/ipv4/tcp_max_syn_backlog",),
    "net_core_rmem_max_bytes": ("/proc/sys/net/core/rmem_max",),
    "net_core_wmem_max_bytes": ("/proc/sys/net/core/wmem_max",),
    "net_ipv4_tcp_rmem_max_bytes": ("/proc/sys/net/ipv4/tcp_rmem", 2, 3),
    "net_ipv4_tcp_wmem_max_bytes": ("/proc/sys/net/ipv4/tcp_wmem", 2, 3),
    "vm_swappiness": ("/proc/sys/vm/swappiness",),
    "vm_overcommit_memory": ("/proc/sys/vm/overcommit_memory",),
}


def summary(record: SysctlRecord) -> str:
    """One line for people: the backlogs, swappiness and THP mode."""
    shown = ("net_core_somaxconn", "net_ipv4_tcp_max_syn_backlog", "vm_swappiness", "thp_enabled")
    others = {k: v for k, v in record.missing.items() if k not in shown}
    unread = ", ".join(f"{k} ({display.why(v)})" for k, v in others.items())
    return (t("somaxconn {somaxconn}, syn backlog {syn}, swappiness {swappiness}, THP {thp}",
              somaxconn=display.field(record, "net_core_somaxconn"),
              syn=display.field(record, "net_ipv4_tcp_max_syn_backlog"),
              swappiness=display.field(record, "vm_swappiness"),
              thp=display.field(record, "thp_enabled"))
            + (t("; unread: {fields}", fields=unread) if others else ""))
