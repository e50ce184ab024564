"""What the host has for an engine's CPU KV tier: MemAvailable, what the engine holds already,
and the locked-memory limit its RDMA registrations are charged against.

A CPU tier is pinned host memory, allocated whole when the engine starts (LMCache's
LocalCPUBackend, vLLM's CPU offloading worker and SGLang's HiCache host pool all allocate it
with ``pin_memory=True`` at start-up). Pinned pages are neither page cache nor reclaimable,
so once allocated the tier is already out of MemAvailable. How that is told here: the NVIDIA
driver maps the pages of a pinned allocation into the process with ``vm_insert_page``
(open-gpu-kernel-modules ``kernel-open/nvidia/nv-mmap.c`` nvidia_mmap_sysmem), and pages
pinned with ``cudaHostRegister`` are the process's own anonymous pages: both count in its
``VmRSS``. So the part of the tier the engine may hold already is at most the resident memory
of its processes (the server and the workers it started); what the tier still needs beyond
that must come out of MemAvailable.

Locked memory: the kernel charges memory registered with an RDMA device (``ibv_reg_mr``,
drivers/infiniband/core/umem.c ib_umem_get) against ``RLIMIT_MEMLOCK`` unless the process
holds ``CAP_IPC_LOCK``; UCX registers the host buffers NIXL sends from that way.

Sources: ``/proc/meminfo`` (MemAvailable, kB), ``/proc/<pid>/status`` (VmRSS, kB; CapEff,
hex), ``/proc/<pid>/limits`` (Max locked memory, bytes), ``/proc/<pid>/stat`` of every process
(the parent, to find the engine's workers). No root for the engine's own user; another
user's status is world-readable. Manual equivalent: ``grep MemAvailable /proc/meminfo``,
``ps -o rss= --ppid PID -p PID``, ``grep 'Max locked' /proc/PID/limits``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from probes.helpers import kernel_text
from probes.helpers.lineage import lineage
from probes.helpers.meminfo import parse_meminfo
from probes.helpers.proc_limits import parse_limits
from probes.helpers.processes import process_table

CAP_IPC_LOCK = 14  # include/uapi/linux/capability.h


@dataclass(frozen=True, slots=True)
class HostRoom:
    mem_available_bytes: int | None  # /proc/meminfo MemAvailable
    engine_rss_bytes: int | None  # VmRSS over the engine process and its descendants
    memlock_bytes: int | None  # the engine's soft RLIMIT_MEMLOCK; None: unlimited or unread
    memlock_unlimited: bool | None  # None: /proc/<pid>/limits not read
    ipc_lock: bool | None  # CAP_IPC_LOCK in CapEff: the limit does not bind; None: unread


def _available(host: Host, missing: dict[str, str]) -> int | None:
    try:
        values = host.memo("kv_host.meminfo", lambda: parse_meminfo(host.read_text("/proc/meminfo")))
    except HostReadError as exc:
        missing["mem_available_bytes"] = str(exc)
        return None
    if "MemAvailable" not in values:
        missing["mem_available_bytes"] = "/proc/meminfo has no MemAvailable row (kernel before 3.14)"
        return None
    return values["MemAvailable"] * 1024


def _status(host: Host, pid: int) -> dict[str, str]:
    text = host.read_text(f"/proc/{pid}/status")
    return dict(line.split(":", 1) for line in text.splitlines()[:200] if ":" in line)


def engine_tree(host: Host, pid: int) -> tuple[int, ...]:
    """pid and every process below it (its workers), from each process's parent."""
    return tuple(sorted({p.pid for p in process_table(host) if pid in lineage(host, p.pid)} | {pid}))


def _rss(host: Host, pid: int, missing: dict[str, str]) -> int | None:
    total = 0
    for one in engine_tree(host, pid)[:4096]:
        try:
            words = _status(host, one).get("VmRSS", "").split()
            if not words:  # a zombie, or a kernel thread: no figure of its own
                continue
            total += kernel_text.count(f"/proc/{one}/status", words[0], "VmRSS in kB") * 1024
        except HostReadError as exc:
            if one == pid:  # a worker gone meanwhile leaves the rest; the engine's own is needed
                missing["engine_rss_bytes"] = str(exc)
                return None
    return total


def _ipc_lock(host: Host, pid: int, missing: dict[str, str]) -> bool | None:
    try:
        word = _status(host, pid).get("CapEff", "").strip()
        caps = int(word, 16) if word and len(word) <= 16 else None
    except (HostReadError, ValueError) as exc:
        missing["ipc_lock"] = str(exc) if isinstance(exc, HostReadError) else f"/proc/{pid}/status: CapEff is no hex mask"
        return None
    if caps is None:
        missing["ipc_lock"] = f"/proc/{pid}/status: no CapEff row"
        return None
    return bool(caps >> CAP_IPC_LOCK & 1)


def _memlock(host: Host, pid: int, missing: dict[str, str]) -> tuple[int | None, bool | None]:
    path = f"/proc/{pid}/limits"
    try:
        soft = parse_limits(host.read_text(path), path)["memlock_soft"]
    except HostReadError as exc:
        missing["memlock_bytes"] = str(exc)
        return None, None
    if soft is None:
        missing["memlock_bytes"] = "unlimited"
    return soft, soft is None


def host_room(host: Host, pid: int | None, missing: dict[str, str]) -> HostRoom:
    """The host's room for one engine's CPU tier; absent figures say why in ``missing``."""
    available = _available(host, missing)
    if pid is None:
        for name in ("engine_rss_bytes", "memlock_bytes", "ipc_lock"):
            missing[name] = "no engine process found for this endpoint"
        return HostRoom(available, None, None, None, None)
    memlock, unlimited = _memlock(host, pid, missing)
    return HostRoom(available, _rss(host, pid, missing), memlock, unlimited,
                    _ipc_lock(host, pid, missing))
