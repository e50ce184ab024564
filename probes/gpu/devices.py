"""gpu.devices: whether each engine in a container still has its GPUs' device nodes and
device-cgroup access, and whether the host has the /dev/char links for the NVIDIA devices.

Sources: ``/proc/<pid>/ns/mnt`` against ``/proc/self/ns/mnt`` and ``/proc/1/ns/mnt`` (another
mount namespace: a container); the engine's own ``/dev`` through ``/proc/<pid>/root/dev``
(``nvidiactl``, ``nvidia-uvm``, ``nvidia<minor>``: stat only, never opened; the minor from
``nvmlDeviceGetMinorNumber``, else the NVML index); its device cgroup from
``/proc/<pid>/cgroup``: under cgroup v1 ``/sys/fs/cgroup/devices/<path>/devices.list``
(``c 195:* rwm``); under cgroup v2 device access is a BPF program, not readable, and only the
nodes are judged. The host's ``/dev/char`` links (``195:0 -> ../nvidia0``, ``195:255 ->
../nvidiactl``, nvidia-uvm's major from ``/proc/devices``). The engine's GPUs come from
NVML's process list (gpu.topology's way); with none listed, any GPU node counts. Reading
another user's ``/proc/<pid>/root`` needs root (ptrace access). Manual equivalent:
``sudo nsenter -t <pid> -m ls -l /dev/nvidia*``, ``ls -l /dev/char | grep nvidia``.

Why: with the NVIDIA container toolkit and systemd's cgroup driver, a ``systemctl
daemon-reload`` rewrites a running container's device rules and drops the GPU devices that
the runtime hook added, unless the /dev/char links exist (NVIDIA container toolkit known
issue; ``nvidia-ctk system create-dev-char-symlinks --create-all`` makes them). NVML then
fails inside the container with "Failed to initialize NVML: Unknown Error" while the host
still sees the GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor.model import ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host, HostReadError
from doctor.i18n import lazy, t, translated
from probes.helpers import gpu_topology as topology
from probes.helpers.gpu_common import Reader, gpu_count, reason_of
from probes.helpers.processes import engine_processes, lasting_name

NVIDIA_MAJOR = 195  # nvidia.ko's fixed major (nvidia0..N-1 and nvidiactl at minor 255)
CTL_MINOR = 255
CGROUP_V2 = lazy("device access under cgroup v2 is a BPF program, not readable")
MAX_GPUS = 64  # nvidia<N> nodes looked at per engine
MAX_CGROUP_LINES = 4096
_DEVICE_RULE = re.compile(r"^([abc]) (\*|\d+):(\*|\d+) ([rwm]+)$")


@dataclass(frozen=True, slots=True)
class EngineDevices:
    pid: int
    engine: str
    mount_ns: str | None  # readlink /proc/<pid>/ns/mnt: "mnt:[4026532301]"
    in_container: bool | None  # another mount namespace than llm-doctor's or pid 1's
    gpus: tuple[int, ...]  # where NVML lists it (or a worker); () when none listed
    nodes_missing: tuple[str, ...]  # under /proc/<pid>/root/dev: "nvidia0", "nvidiactl"
    cgroup_version: int | None  # 1 or 2, from /proc/<pid>/cgroup
    cgroup_denied: tuple[str, ...]  # v1 devices.list: "nvidia0 (c 195:0)" not allowed rw
    cgroup_note: str | None  # CGROUP_V2, or why devices.list was not read
    lost: bool  # in a container, and a node or the cgroup's access to one gone
    missing: dict[str, str]
    name: str = ""  # processes.lasting_name: the finding's key (a pid is not one)


@dataclass(frozen=True, slots=True)
class DevicesRecord:
    host_sees_gpus: bool  # NVML on the host answers for its GPUs (a name for each)
    host_mount_ns: str | None  # pid 1's, else llm-doctor's
    uvm_major: int | None  # /proc/devices "nvidia-uvm"
    char_links_missing: tuple[str, ...] | None  # "195:0 -> ../nvidia0" absent; None: not read
    gpu_containers: int  # engines or GPU processes in another mount namespace
    engines: tuple[EngineDevices, ...]
    missing: dict[str, str]


def _ns(host: Host, pid: int | str, missing: dict[str, str] | None = None,
        field: str = "mount_ns") -> str | None:
    try:
        return host.read_link(f"/proc/{pid}/ns/mnt")
    except HostReadError as exc:
        if missing is not None:
            missing[field] = reason_of(exc)
        return None


def _char_majors(host: Host, missing: dict[str, str]) -> int | None:
    """nvidia-uvm's major from /proc/devices' "Character devices:" section."""
    try:
        text = host.read_text("/proc/devices")
    except HostReadError as exc:
        missing["uvm_major"] = reason_of(exc)
        return None
    block = text.split("Block devices:", 1)[0]
    for line in block.splitlines()[:512]:
        number, _, name = line.strip().partition(" ")
        if name.strip() == "nvidia-uvm" and number.isdigit():
            return int(number)
    missing["uvm_major"] = "not-found"  # nvidia-uvm not loaded
    return None


def _minors(host: Host, count: int) -> dict[int, int]:
    out = {}
    for i in range(min(count, MAX_GPUS)):
        minor = Reader(host).integer("minor", "nvmlDeviceGetMinorNumber", i)
        out[i] = minor if minor is not None and 0 <= minor < CTL_MINOR else i
    return out


def _links_missing(host: Host, minors: dict[int, int], uvm: int | None,
                   missing: dict[str, str]) -> tuple[str, ...] | None:
    want = {f"{NVIDIA_MAJOR}:{CTL_MINOR}": "nvidiactl"}
    want.update({f"{NVIDIA_MAJOR}:{m}": f"nvidia{m}" for m in minors.values()})
    if uvm is not None:
        want[f"{uvm}:0"] = "nvidia-uvm"
    try:
        links = host.list_links("/dev/char")
    except HostReadError as exc:
        missing["char_links_missing"] = reason_of(exc)
        return None
    return tuple(f"{dev} -> ../{name}" for dev, name in want.items()
                 if links.get(dev, "").rsplit("/", 1)[-1] != name)


def _cgroup(host: Host, pid: int) -> tuple[int | None, str | None, str | None]:
    """(version, v1 devices path, note) from /proc/<pid>/cgroup."""
    try:
        text = host.read_text(f"/proc/{pid}/cgroup")
    except HostReadError as exc:
        return None, None, f"/proc/{pid}/cgroup: {reason_of(exc)}"
    lines = text.splitlines()[:MAX_CGROUP_LINES]
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "devices" in controllers.split(","):
            return 1, path, None
    if any(line.startswith("0::") for line in lines):
        return 2, None, translated(CGROUP_V2)
    return None, None, t("/proc/{pid}/cgroup: no devices controller and no cgroup v2 line", pid=pid)


def _allows(rules: list[tuple[str, ...]], major: int, minor: int) -> bool:
    return any(kind in "ac" and maj in ("*", str(major)) and mnr in ("*", str(minor))
               and "r" in access and "w" in access for kind, maj, mnr, access in rules)


def _denied(host: Host, path: str, nodes: dict[str, tuple[int, int]]) -> tuple[tuple[str, ...], str | None]:
    where = f"/sys/fs/cgroup/devices/{path.strip('/')}/devices.list".replace("//", "/")
    try:
        text = host.read_text(where)
    except HostReadError as exc:
        return (), f"{where}: {reason_of(exc)}"
    rules = [m.groups() for line in text.splitlines()[:MAX_CGROUP_LINES]
             if (m := _DEVICE_RULE.match(line.strip()))]
    return tuple(f"{name} (c {major}:{minor})" for name, (major, minor) in nodes.items()
                 if not _allows(rules, major, minor)), None


def _engine(host: Host, proc, host_ns: set[str], gpus: tuple[int, ...],
            minors: dict[int, int], uvm: int | None) -> EngineDevices:
    missing: dict[str, str] = {}
    ns = _ns(host, proc.pid, missing)
    in_container = None if ns is None or not host_ns else ns not in host_ns
    wanted = gpus or tuple(minors)
    nodes = {"nvidiactl": (NVIDIA_MAJOR, CTL_MINOR)}
    if uvm is not None:
        nodes["nvidia-uvm"] = (uvm, 0)
    gpu_nodes = {f"nvidia{minors[i]}": (NVIDIA_MAJOR, minors[i]) for i in wanted if i in minors}
    absent: list[str] = []
    if not in_container:  # its /dev is the host's: nothing of the container's to check
        return EngineDevices(pid=proc.pid, name=lasting_name(proc), engine=proc.engine or "?", mount_ns=ns,
                             in_container=in_container, gpus=gpus, nodes_missing=(),
                             cgroup_version=None, cgroup_denied=(), cgroup_note=None,
                             lost=False, missing=missing)
    for name in [*nodes, *gpu_nodes]:
        try:
            host.stat(f"/proc/{proc.pid}/root/dev/{name}")
        except HostReadError as exc:
            if reason_of(exc) == "not-found":
                absent.append(name)
            else:
                missing["nodes_missing"] = reason_of(exc)  # no-permission: root needed
    version, path, note = _cgroup(host, proc.pid)
    denied: list[str] = []
    if version == 1 and path is not None:
        found, note = _denied(host, path, {**nodes, **gpu_nodes})
        denied = list(found)
    if not gpus:  # its GPUs are not known: any one GPU node it can use is enough
        gone = {n for n in gpu_nodes if n in absent or any(d.startswith(n + " ") for d in denied)}
        if gone != set(gpu_nodes):
            absent = [n for n in absent if n not in gpu_nodes]
            denied = [d for d in denied if d.split(" ")[0] not in gpu_nodes]
    lost = bool(absent or denied)
    return EngineDevices(pid=proc.pid, name=lasting_name(proc), engine=proc.engine or "?", mount_ns=ns,
                         in_container=in_container, gpus=gpus, nodes_missing=tuple(absent),
                         cgroup_version=version, cgroup_denied=tuple(denied), cgroup_note=note,
                         lost=lost, missing=missing)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> DevicesRecord:
    count = gpu_count(host)
    missing: dict[str, str] = {}
    names = [Reader(host).text("name", "nvmlDeviceGetName", i) for i in range(count)]
    host_ns = {ns for ns in (_ns(host, 1, missing, "host_mount_ns"), _ns(host, "self")) if ns}
    if host_ns:
        missing.pop("host_mount_ns", None)
    minors = _minors(host, count)
    uvm = _char_majors(host, missing)
    holders = topology.gpu_pids(host, count)
    out = []
    engines = engine_processes(host)
    pids = {p.pid for p in engines}
    for proc in engines:
        if (topology.lineage(host, proc.pid) - {proc.pid}) & pids:
            continue  # a worker (VLLM::EngineCore) of an engine listed on its own
        gpus = tuple(i for i, pids in holders.items()
                     if any(proc.pid in topology.lineage(host, pid) for pid in pids))
        out.append(_engine(host, proc, host_ns, gpus, minors, uvm))
    engine_pids = {e.pid for e in out}
    others = {pid for pids in holders.values() for pid in pids} - engine_pids
    foreign = sum(1 for pid in others if host_ns and (ns := _ns(host, pid)) and ns not in host_ns)
    return DevicesRecord(
        host_sees_gpus=all(n is not None for n in names),
        host_mount_ns=_ns(host, 1) or _ns(host, "self"), uvm_major=uvm,
        char_links_missing=_links_missing(host, minors, uvm, missing),
        gpu_containers=foreign + sum(1 for e in out if e.in_container),
        engines=tuple(out), missing=missing)


def summary(record: DevicesRecord) -> str:
    lost = [f"{e.engine} pid {e.pid}" for e in record.engines if e.lost]
    contained = sum(1 for e in record.engines if e.in_container)
    links = (t("/dev/char not read") if record.char_links_missing is None
             else t("/dev/char lacks {n} NVIDIA links", n=len(record.char_links_missing))
             if record.char_links_missing else t("/dev/char links present"))
    return (t("{n} engine(s) in a container", n=contained)
            + (t(", GPU nodes gone: {engines}", engines=", ".join(lost)) if lost else "")
            + t("; ") + links)
