"""A process's cgroup and the CPU quota and memory limit it runs under, v1 and v2.

Sources: ``/proc/<pid>/cgroup`` (``0::/path`` for the v2 hierarchy, ``N:cpu,cpuacct:/path``
for a v1 one), ``/proc/self/mountinfo`` (where each hierarchy is mounted, and the part of
it the mount shows), then in the process's cgroup directory and its ancestors: v2
``cpu.max``, ``cpu.stat``, ``memory.max``, ``memory.current``, ``memory.events``; v1
``cpu.cfs_quota_us``, ``cpu.cfs_period_us``, ``cpu.stat``, ``memory.limit_in_bytes``,
``memory.usage_in_bytes``, ``memory.failcnt``, ``memory.oom_control``. A limit set on an
ancestor binds its descendants, so the tightest one on the way up is the one reported.
World-readable, no root needed. Memory-cgroup OOM kills are also read from the kernel log
(``dmesg``: root where ``kernel.dmesg_restrict = 1``). Manual equivalent: ``cat /sys/fs/cgroup$(cut -d: -f3
/proc/<pid>/cgroup)/cpu.max`` and ``systemd-cgls``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError, MalformedError
from probes.helpers import kernel_text

MAX_DEPTH = 32  # cgroup levels walked up to the hierarchy's root
# v1 prints "no limit" as the largest page-aligned long: 9223372036854771712
V1_UNLIMITED = 2**62
# mm/oom_kill.c: "oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/docker/3f2a,
# task_memcg=/docker/3f2a,task=python3,pid=4242,uid=0" (4.19+), then "Memory cgroup out of
# memory: Killed process 4242 (python3) total-vm:..." ("Kill process" before 5.0).
_MEMCG_LINE = re.compile(r"oom-kill:constraint=CONSTRAINT_MEMCG,.{0,400}?oom_memcg=([^,\s]{1,512}),"
                         r"task_memcg=([^,\s]{1,512}),.{0,200}?pid=(\d{1,10})")
_MEMCG_KILL = re.compile(r"Memory cgroup out of memory: Kill(?:ed)? process (\d{1,10}) ")
KERNEL_LOG_CHARS = 4 << 20  # the ring buffer's end: a bounded read of a huge log


@dataclass(frozen=True, slots=True)
class CgroupDir:
    version: int  # 1 or 2
    path: str  # the cgroup as /proc/<pid>/cgroup names it: /docker/3f2a...
    directory: str  # where its files are: /sys/fs/cgroup/cpu/docker/3f2a...
    top: str  # the mount point: the walk up stops there


@dataclass(frozen=True, slots=True)
class CpuQuota:
    version: int
    directory: str  # where the binding quota is set (its cpu.stat counts the throttling)
    quota_cpus: float | None  # quota / period; None: no quota on the way up
    period_us: int | None
    nr_periods: int | None  # cpu.stat, since the cgroup was made
    nr_throttled: int | None
    throttled_s: float | None  # v2 throttled_usec / 1e6, v1 throttled_time (ns) / 1e9


@dataclass(frozen=True, slots=True)
class MemoryLimit:
    version: int
    directory: str  # where the binding limit is set
    limit_bytes: int | None  # None: no limit on the way up
    usage_bytes: int | None  # v2 memory.current, v1 memory.usage_in_bytes (page cache included)
    oom_kills: int | None  # memory.events / memory.oom_control oom_kill (v1 before 4.13: None)
    failcnt: int | None  # v1 memory.failcnt: times usage hit the limit; v2 has none


def parse_proc_cgroup(path: str, text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` → {controller: cgroup path}; "" is the v2 hierarchy."""
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            raise MalformedError(path, f"line {number}: expected 'id:controllers:/path'")
        for controller in (parts[1].split(",") if parts[1] else [""]):
            found[controller.removeprefix("name=")] = parts[2]
    return found


def parse_mounts(path: str, text: str) -> dict[str, tuple[str, str]]:
    """``/proc/self/mountinfo`` → {controller: (mount point, root shown)}; "" is cgroup2."""
    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2":
            found.setdefault("", (fields[4], fields[3]))
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                if option not in ("rw", "ro") and not option.startswith("release_agent"):
                    found.setdefault(option.removeprefix("name="), (fields[4], fields[3]))
    return found


def cgroup_dir(host: Host, pid: int, controller: str) -> CgroupDir:
    """Where ``pid``'s cgroup for ``controller`` ("cpu", "memory") lives: the v1 hierarchy
    that has it, else the v2 one. HostReadError when neither is mounted or readable."""
    cgroups = parse_proc_cgroup(f"/proc/{pid}/cgroup", host.read_text(f"/proc/{pid}/cgroup"))
    mounts = host.memo("cgroup_mounts", lambda: parse_mounts(
        "/proc/self/mountinfo", host.read_text("/proc/self/mountinfo")))
    for key, version in ((controller, 1), ("", 2)):
        if key in cgroups and key in mounts:
            top, root = mounts[key]
            path = cgroups[key]
            inside = path[len(root):] if root != "/" and path.startswith(root) else path
            return CgroupDir(version, path, top.rstrip("/") + inside.rstrip("/"), top)
    raise HostReadError(f"/proc/{pid}/cgroup", "not-found",
                        f"no mounted cgroup hierarchy holds its {controller} controller")


def _ancestors(cg: CgroupDir) -> list[str]:
    out: list[str] = []
    directory = cg.directory
    while len(out) < MAX_DEPTH:
        out.append(directory)
        if directory.rstrip("/") == cg.top.rstrip("/") or "/" not in directory.strip("/"):
            break
        directory = directory.rsplit("/", 1)[0]
    return out


def parse_stat(path: str, text: str) -> dict[str, int]:
    """``cpu.stat`` or ``memory.events``: one ``key value`` a line."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            raise MalformedError(path, f"expected 'key value' lines, got {line[:60]!r}")
        out[parts[0]] = kernel_text.count(path, parts[1])
    return out


def _quota_at(host: Host, version: int, directory: str) -> tuple[int, int] | None:
    """(quota, period) in µs set at ``directory``, None for no quota there."""
    if version == 2:
        path = f"{directory}/cpu.max"
        fields = kernel_text.fields(path, host.read_text(path), 2)
        period = kernel_text.count(path, fields[1])
        return None if fields[0] == "max" else (kernel_text.count(path, fields[0]), period)
    path = f"{directory}/cpu.cfs_quota_us"
    quota = host.read_text(path).strip()
    if quota == "-1":
        return None
    period_path = f"{directory}/cpu.cfs_period_us"
    return (kernel_text.count(path, quota),
            kernel_text.count(period_path, host.read_text(period_path).strip()))


def read_cpu_stat(host: Host, version: int, directory: str) -> dict[str, int]:
    path = f"{directory}/cpu.stat"
    return parse_stat(path, host.read_text(path))


def throttled_seconds(version: int, stat: dict[str, int]) -> float | None:
    if version == 2:
        return stat["throttled_usec"] / 1e6 if "throttled_usec" in stat else None
    return stat["throttled_time"] / 1e9 if "throttled_time" in stat else None


def cpu_quota(host: Host, cg: CgroupDir) -> CpuQuota:
    """The tightest CPU quota from ``cg`` up, and the throttling its cgroup counted."""
    best: tuple[float, str, int] | None = None
    for directory in _ancestors(cg):
        try:
            found = _quota_at(host, cg.version, directory)
        except HostReadError:
            if directory == cg.directory:
                raise  # no CPU controller in the engine's own cgroup: say so
            continue  # a level above that shows no files (the v2 root has no cpu.max)
        if found and found[1] > 0 and (best is None or found[0] / found[1] < best[0]):
            best = (found[0] / found[1], directory, found[1])
    directory = best[1] if best else cg.directory
    stat = read_cpu_stat(host, cg.version, directory)
    return CpuQuota(cg.version, directory, round(best[0], 3) if best else None,
                    best[2] if best else None, stat.get("nr_periods"), stat.get("nr_throttled"),
                    throttled_seconds(cg.version, stat))


def _limit_at(host: Host, version: int, directory: str) -> int | None:
    path = f"{directory}/{'memory.max' if version == 2 else 'memory.limit_in_bytes'}"
    text = host.read_text(path).strip()
    if version == 2 and text == "max":
        return None
    value = kernel_text.count(path, text)
    return None if version == 1 and value >= V1_UNLIMITED else value


def _optional_count(host: Host, path: str) -> int | None:
    try:
        return kernel_text.count(path, host.read_text(path).strip())
    except MalformedError:
        raise
    except HostReadError:
        return None


def memory_limit(host: Host, cg: CgroupDir) -> MemoryLimit:
    """The tightest memory limit from ``cg`` up, its usage and the OOM kills counted there."""
    best: tuple[int, str] | None = None
    for directory in _ancestors(cg):
        try:
            limit = _limit_at(host, cg.version, directory)
        except HostReadError:
            if directory == cg.directory:
                raise
            continue
        if limit is not None and (best is None or limit < best[0]):
            best = (limit, directory)
    directory = best[1] if best else cg.directory
    if cg.version == 2:
        events_path = f"{directory}/memory.events"
        events = parse_stat(events_path, host.read_text(events_path))
        return MemoryLimit(2, directory, best[0] if best else None,
                           _optional_count(host, f"{directory}/memory.current"),
                           events.get("oom_kill"), None)
    control_path = f"{directory}/memory.oom_control"
    control = parse_stat(control_path, host.read_text(control_path))
    return MemoryLimit(1, directory, best[0] if best else None,
                       _optional_count(host, f"{directory}/memory.usage_in_bytes"),
                       control.get("oom_kill"), _optional_count(host, f"{directory}/memory.failcnt"))


@dataclass(frozen=True, slots=True)
class KernelKill:
    pid: int
    memcgs: tuple[str, ...]  # oom_memcg and task_memcg; () where the kernel printed neither


def parse_kills(text: str) -> list[KernelKill]:
    """The memory-cgroup OOM kills a kernel log holds, once each."""
    kills: dict[int, KernelKill] = {}
    for m in _MEMCG_LINE.finditer(text):
        kills[int(m.group(3))] = KernelKill(int(m.group(3)), (m.group(1), m.group(2)))
    for m in _MEMCG_KILL.finditer(text):
        kills.setdefault(int(m.group(1)), KernelKill(int(m.group(1)), ()))
    return list(kills.values())


def kernel_kills(host: Host) -> tuple[list[KernelKill] | None, str]:
    """The kernel log's memcg OOM kills; None when the log cannot be read."""
    try:
        out = host.run(["dmesg"], timeout_s=5.0)
    except HostReadError as exc:
        return None, f"dmesg: {exc.reason}"
    if out.rc != 0:
        return None, f"dmesg exited {out.rc}: {out.stderr.strip()[:120]} (run as root)"
    return parse_kills(out.stdout[-KERNEL_LOG_CHARS:]), "dmesg"
