"""NUMA nodes as the kernel shows them, and where a process may run and where its memory sits.

Sources: ``/sys/devices/system/node/node<N>/cpulist`` (the CPUs of each node, "0-95,192-287"),
``/sys/bus/pci/devices/<bdf>/numa_node`` (a PCI function's node; -1: the firmware gave none),
``/proc/<pid>/status`` (``Cpus_allowed_list``, ``Mems_allowed_list``), ``/proc/<pid>/numa_maps``
(one line per mapping, ``N<node>=<pages>`` per node and ``kernelpagesize_kB=<k>``). No root
for the node files; another user's numa_maps needs root (ptrace access). Manual equivalent:
``numactl --hardware``, ``taskset -cp <pid>``, ``numastat -p <pid>``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError, MalformedError

NODES = "/sys/devices/system/node"
PCI_DEVICES = "/sys/bus/pci/devices"  # one link per function, to its /sys/devices/pci… dir
MAX_CPUS = 65536  # a cpulist naming more is not what the kernel writes
MAX_NODES = 1024  # CONFIG_NODES_SHIFT=10, the largest the kernel builds
# numa_maps has a line per mapping: a big engine has tens of thousands (~200 bytes each).
# The seam reads at most 4 MiB of a file; the lines beyond MAX_MAPS_LINES are not summed,
# and the record says so.
MAX_MAPS_LINES = 50_000
_NODE_DIR = re.compile(r"^node(\d+)$")
_PAGES = re.compile(r"\bN(\d+)=(\d+)\b")
_PAGE_KB = re.compile(r"\bkernelpagesize_kB=(\d+)\b")


def parse_cpulist(text: str) -> frozenset[int] | None:
    """The kernel's list format ("0-3,8,10-11") as a set; None when it is not that format.
    An empty list (a node without CPUs) is an empty set."""
    text = text.strip()
    if not text:
        return frozenset()
    out: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            return None
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first or last >= MAX_CPUS or len(out) + last - first >= MAX_CPUS:
            return None
        out.update(range(first, last + 1))
    return frozenset(out)


def format_cpulist(cpus: frozenset[int] | set[int]) -> str:
    """A set of CPUs (or nodes) in the kernel's list format: "0-3,8"."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


@dataclass(frozen=True, slots=True)
class NodeMap:
    cpus: dict[int, frozenset[int]]  # node -> its CPUs
    reason: str | None  # why the nodes were not read (None: read)

    def nodes_of(self, cpus: frozenset[int]) -> frozenset[int]:
        """The nodes holding any of ``cpus``."""
        return frozenset(n for n, own in self.cpus.items() if own & cpus)


def node_map(host: Host) -> NodeMap:
    """Every NUMA node and its CPUs, read once per scan."""
    return host.memo("numa_nodes", lambda: _read_nodes(host))


def _read_nodes(host: Host) -> NodeMap:
    try:
        entries = host.list_dirs(NODES)
    except HostReadError as exc:
        return NodeMap({}, f"{NODES}: {exc.reason.value}")
    out: dict[int, frozenset[int]] = {}
    for name in entries[:MAX_NODES]:
        m = _NODE_DIR.match(name)
        if not m:
            continue
        try:
            cpus = parse_cpulist(host.read_text(f"{NODES}/{name}/cpulist"))
        except HostReadError:
            cpus = None
        out[int(m.group(1))] = cpus if cpus is not None else frozenset()
    if not out:
        return NodeMap({}, f"{NODES}: no node<N> directory (a kernel without NUMA)")
    return NodeMap(dict(sorted(out.items())), None)


def pci_dirs(host: Host) -> dict[str, str]:
    """bus id -> the function's own directory under /sys/devices, read once per scan (the
    links' targets, so a capture keeps the link listing and the files where sysfs has them)."""
    return host.memo("numa_nodes.pci_dirs", lambda: _pci_dirs(host))


def _pci_dirs(host: Host) -> dict[str, str]:
    try:
        links = host.list_links(PCI_DEVICES)
    except HostReadError:
        return {}
    return {name: where for name, target in links.items()
            if (where := posixpath.normpath(posixpath.join(PCI_DEVICES, target)))
            .startswith("/sys/devices/")}


def pci_numa_node(host: Host, bdf: str) -> tuple[int | None, str | None]:
    """A PCI function's node from sysfs, or None and the read-failure reason: -1 (the
    firmware gave the device no node) is not-supported."""
    where = pci_dirs(host).get(bdf)
    path = f"{where or PCI_DEVICES + '/' + bdf}/numa_node"
    try:
        text = host.read_text(path).strip()
    except HostReadError as exc:
        return None, exc.reason.value
    if not re.fullmatch(r"-?\d{1,5}", text):
        raise MalformedError(path, f"{text[:40]!r} is not a NUMA node number")
    node = int(text)
    if node < 0:
        return None, "not-supported"
    return node, None


@dataclass(frozen=True, slots=True)
class Allowed:
    cpus: frozenset[int] | None  # /proc/<pid>/status Cpus_allowed_list
    mems: frozenset[int] | None  # Mems_allowed_list: nodes it may allocate on
    reason: str | None  # the read-failure reason (not-found: the process exited)


def allowed(host: Host, pid: int) -> Allowed:
    path = f"/proc/{pid}/status"
    try:
        text = host.read_text(path)
    except HostReadError as exc:
        return Allowed(None, None, exc.reason.value)
    fields = dict(line.split(":", 1) for line in text.splitlines()[:200] if ":" in line)
    cpus = parse_cpulist(fields.get("Cpus_allowed_list", "x"))
    mems = parse_cpulist(fields.get("Mems_allowed_list", "x"))
    bad = [n for n, v in (("Cpus_allowed_list", cpus), ("Mems_allowed_list", mems)) if v is None]
    if bad:  # the kernel has written both since 2.6.26
        raise MalformedError(path, f"no {' or '.join(bad)} in the kernel's list format")
    return Allowed(cpus, mems, None)


@dataclass(frozen=True, slots=True)
class MemoryPlacement:
    bytes_by_node: dict[int, int]  # summed N<node>=<pages> x kernelpagesize_kB over mappings
    lines: int  # mappings summed
    truncated: bool  # more lines than MAX_MAPS_LINES, or the seam's read cap: a partial sum
    reason: str | None  # the read-failure reason (no-permission: another user's, no root)


def memory_placement(host: Host, pid: int) -> MemoryPlacement:
    path = f"/proc/{pid}/numa_maps"
    try:
        text = host.read_text(path)
    except HostReadError as exc:
        return MemoryPlacement({}, 0, False, exc.reason.value)
    return parse_numa_maps(text)


def parse_numa_maps(text: str) -> MemoryPlacement:
    """Sum each node's resident bytes. A line without ``kernelpagesize_kB`` counts 4 KiB pages
    (kernels before 3.x did not print it; x86's base page)."""
    by_node: dict[int, int] = {}
    lines = text.splitlines()
    # The seam keeps a long file's tail from a line's start; a partial first line is not
    # possible, but a read at the cap means lines were left out.
    truncated = len(lines) > MAX_MAPS_LINES or len(text) >= 4 * 1024 * 1024 - 4096
    for line in lines[:MAX_MAPS_LINES]:
        m = _PAGE_KB.search(line)
        page = int(m.group(1)) * 1024 if m else 4096
        for node, pages in _PAGES.findall(line):
            if int(node) < MAX_NODES:
                by_node[int(node)] = by_node.get(int(node), 0) + int(pages) * page
    return MemoryPlacement(dict(sorted(by_node.items())), min(len(lines), MAX_MAPS_LINES),
                           truncated, None)
