"""How big host.memory_bandwidth's STREAM arrays are: the rule of thumb, within a memory budget.

STREAM's rule of thumb: each array at least 4x the last-level cache the run's threads can
reach, or the passes read part of their data from cache and the figure is not DRAM's. The
cache they reach is the sum of the distinct last-level cache instances
(``/sys/devices/system/cpu/cpu*/cache/index*/``: ``level``, ``type``, ``size``,
``shared_cpu_list``) holding at least one CPU the threads may run on (the scan's
``Cpus_allowed_list``, which the kernel child inherits): an instance none of them runs on
holds none of their data (a process pinned to one CCD of a Genoa-X reaches 96 MiB of its
1.1 GiB). On a 2-vCPU AMD EPYC 9004 VM (32 MiB L3, 1 MiB L2 a core), C STREAM
(benchmarks/stream.c, best of 3) read cache rates with arrays of 0.5x the L3 (copy 41 GB/s),
part cache at 1-1.5x (copy 26 GB/s) and DRAM's from 2x (copy 9-10 GB/s); 4x leaves room for
caches that keep more of a streamed set than that one does.

On a virtual machine the size is what the hypervisor advertises, often its host socket's L3,
which the VM's few vCPUs share with every other core of that socket (a 2-vCPU Intel VM
reports 480 MiB): there an instance counts at most ``VM_LLC_PER_CPU`` per vCPU of it, the
most L3 per core of any x86 server part (AMD EPYC 9184X and 7373X: a 96 MiB CCD shared by 2
cores). On bare metal the size is the hardware's and counts whole.

The memory budget, for the three arrays together, is the least of:

- ``MEMORY_SHARE`` of MemAvailable (an eighth). MemAvailable counts the page cache as free,
  and on a serving host much of that cache is the engine's (llama.cpp maps its GGUF, vLLM
  reads its safetensors through it): what the arrays take, the engine reads again from disk
  or swaps for. An eighth leaves the host seven eighths of its headroom, and the arrays'
  floor (3 x 256 MiB) fits hosts with 6 GiB available.
- ``MEMORY_CAP`` (4 GiB), whatever the host: enough for 4x the L3 of a 1-socket 96-core
  Genoa (384 MiB: 3 x 1.5 GiB), a diagnostic's most on a host whose memory is the engine's.
- ``TOUCH_BYTES_PER_THREAD`` per thread (512 MiB): the first touch faults in every page,
  about 0.45 GB/s a thread at worst measured (4 KiB pages on a 2-vCPU VM whose balloon
  reports free pages): 1.2 s, half of the probe's 3 s, on a 2-thread host.

Where the budget (or the floor's absence of a cache size) makes the arrays smaller than the
rule, the record says so (``under_rule``) and the summary shows it: part of the figure may
be cache bandwidth. Manual equivalent: ``lscpu -C`` and ``grep MemAvailable /proc/meminfo``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from probes.helpers.numa_nodes import parse_cpulist

MIB = 2**20
RULE_MULTIPLE = 4  # STREAM's rule of thumb: each array 4x the cache the threads reach
MIN_ARRAY_BYTES = 256 * MIB  # the floor (and the size where no cache size is known)
VM_LLC_PER_CPU = 48 * MIB
MEMORY_SHARE = 1 / 8
MEMORY_CAP = 4 * 2**30
TOUCH_BYTES_PER_THREAD = 512 * MIB
ARRAYS = 3
# What the kernel takes besides its arrays and a bare interpreter (its threads' stacks, the
# check's samples, pages the arrays' ends round up to: 0.1 MiB measured): the budget holds it.
KERNEL_OWN_BYTES = 4 * MIB
# What bound the budget, in the record: MemAvailable's share, the cap, the threads' touch
BUDGET_BASES = ("available", "cap", "threads")


@dataclass(frozen=True, slots=True)
class CacheInstance:
    level: int
    size_bytes: int
    cpus: frozenset[int]  # shared_cpu_list


@dataclass(frozen=True, slots=True)
class Reach:
    """The last-level cache the threads reach, and whether a VM's advertised size was bounded."""

    cache_bytes: int | None  # None: no cache tree readable
    advertised_bytes: int | None  # the instances' sizes as sysfs gives them
    vm_bounded: bool


@dataclass(frozen=True, slots=True)
class Sizing:
    array_bytes: int  # per array, as the kernel is asked to allocate it
    rule_array_bytes: int | None  # RULE_MULTIPLE x the cache reached; None: cache unknown
    budget_bytes: int  # the three arrays together
    budget_basis: str  # one of BUDGET_BASES
    under_rule: bool  # array_bytes < rule_array_bytes (False where the rule is unknown)


def parse_cache_tree(files: Mapping[str, str]) -> tuple[CacheInstance, ...]:
    """Unified and data caches from ``{"cpu0/cache/index3/level": "3", ...}`` (paths under
    /sys/devices/system/cpu), one per distinct (level, shared_cpu_list); an index with a
    missing or unreadable field is skipped."""
    indexes = {path.rsplit("/", 1)[0] for path in files}
    found: dict[tuple[int, frozenset[int]], int] = {}
    for index in sorted(indexes):
        try:
            level = int(files[f"{index}/level"])
            size = _size_bytes(files[f"{index}/size"])
            cpus = parse_cpulist(files[f"{index}/shared_cpu_list"])
        except (KeyError, ValueError):
            continue
        if cpus and files.get(f"{index}/type", "Unified").strip() != "Instruction":
            found[(level, cpus)] = size
    return tuple(CacheInstance(level, size, cpus) for (level, cpus), size in found.items())


def _size_bytes(text: str) -> int:
    """sysfs cache size, ``32768K`` (binary units), in bytes; ValueError otherwise."""
    text = text.strip()
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    value = int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)
    if value <= 0:
        raise ValueError(text)
    return value


def reach(caches: Iterable[CacheInstance], cpus: frozenset[int] | None, virtual: bool) -> Reach:
    """The last-level cache the threads on ``cpus`` (None: every CPU) reach (module docstring)."""
    caches = tuple(caches)
    if not caches:
        return Reach(None, None, False)
    last = max(cache.level for cache in caches)
    used = [c for c in caches if c.level == last and (cpus is None or c.cpus & cpus)]
    if not used:  # the allowed CPUs show no cache: count them all rather than none
        used = [c for c in caches if c.level == last]
    advertised = sum(c.size_bytes for c in used)
    if not virtual:
        return Reach(advertised, advertised, False)
    counted = sum(min(c.size_bytes, len(c.cpus) * VM_LLC_PER_CPU) for c in used)
    return Reach(counted, advertised, counted < advertised)


def size_arrays(cache_bytes: int | None, available_bytes: int | None, threads: int) -> Sizing:
    """Each array's size: RULE_MULTIPLE x ``cache_bytes``, at least MIN_ARRAY_BYTES, within
    the memory budget (module docstring); ``available_bytes`` None: MemAvailable unknown."""
    rule = RULE_MULTIPLE * cache_bytes if cache_bytes else None
    wanted = max(rule or 0, MIN_ARRAY_BYTES)
    limits = {"cap": MEMORY_CAP, "threads": max(threads, 1) * TOUCH_BYTES_PER_THREAD}
    if available_bytes is not None:
        limits["available"] = int(available_bytes * MEMORY_SHARE)
    basis = min(BUDGET_BASES, key=lambda name: limits.get(name, MEMORY_CAP + 1))
    budget = limits[basis]
    array_bytes = min(wanted, max(budget - KERNEL_OWN_BYTES, 0) // ARRAYS)
    array_bytes -= array_bytes % 8  # float64 elements
    array_bytes = max(array_bytes, 8)
    return Sizing(array_bytes, rule, budget, basis, rule is not None and array_bytes < rule)


def is_under_rule(array_bytes: int, rule_array_bytes: int | None) -> bool:
    """The arrays that ran were smaller than the rule (the kernel may fill less than asked)."""
    return rule_array_bytes is not None and array_bytes < rule_array_bytes


def read_cache_tree(host: Host) -> dict[str, str]:
    """The cache files of every CPU, keyed as parse_cache_tree takes them; unreadable ones left out."""
    files: dict[str, str] = {}
    base = "/sys/devices/system/cpu"
    try:
        cpus = [c for c in host.list_dirs(base) if c.startswith("cpu") and c[3:].isdigit()]
    except HostReadError:
        return files
    for cpu in cpus:
        try:
            indexes = host.list_dirs(f"{base}/{cpu}/cache")
        except HostReadError:
            continue
        for index in indexes:
            for name in ("level", "type", "size", "shared_cpu_list"):
                path = f"{cpu}/cache/{index}/{name}"
                try:
                    files[path] = host.read_text(f"{base}/{path}").strip()
                except HostReadError:
                    pass
    return files


def allowed_cpus(host: Host) -> frozenset[int] | None:
    """The CPUs this scan (and the kernel child it starts) may run on; None where unreadable."""
    try:
        status = host.read_text("/proc/self/status")
    except HostReadError:
        return None
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key == "Cpus_allowed_list":
            return parse_cpulist(value) or None
    return None


def is_virtual(host: Host, flags: set[str]) -> bool:
    """A virtual machine: the CPU's ``hypervisor`` flag (x86) or /sys/hypervisor/type (Xen)."""
    if "hypervisor" in flags:
        return True
    try:
        return bool(host.read_text("/sys/hypervisor/type").strip())
    except HostReadError:
        return False
