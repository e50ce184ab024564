"""engine.container: the container each serving engine runs in: /dev/shm, CPU quota, memory limit.

Engine processes (the process table) are grouped by their cgroup: vLLM's API server,
EngineCore and workers are one container. For each group, read through the host:

* ``/dev/shm`` in the engine's mount namespace (probes/helpers/mounts.py: statvfs of
  ``/proc/<pid>/root/dev/shm``, bytes; root needed for another user's process);
* the CPU quota from the engine's cgroup up (probes/helpers/cgroups.py: v2 ``cpu.max``, v1
  ``cpu.cfs_quota_us``/``cpu.cfs_period_us``, as CPUs), ``cpu.stat`` read twice
  ``SAMPLE_S`` apart (periods throttled in the window; a measurement, as it cannot be
  replayed from one read) with the runnable threads (state R in
  ``/proc/<pid>/task/*/stat``) sampled meanwhile, and ``Threads`` of ``/proc/<pid>/status``;
  and the engine's compute thread pool, known at rest (issue 28: an idle engine under a
  quota below it is throttled as soon as requests come): llama.cpp's ``-t``/``-tb`` (its
  default, and Ollama's, one thread per CPU it may run on: ``Cpus_allowed_list``), one
  thread for the Python and Rust engines (their scheduler loop; their compute is on the GPU);
* the memory limit from the cgroup up (v2 ``memory.max``, v1 ``memory.limit_in_bytes``),
  usage, OOM kills counted (``memory.events``/``memory.oom_control`` ``oom_kill``, v1
  ``memory.failcnt``), the engine's resident memory (``VmRSS`` of ``/proc/<pid>/status``,
  summed over the group) and "Memory cgroup out of memory" kills of its processes in the
  kernel log (``dmesg``; root where ``kernel.dmesg_restrict = 1``).

Manual equivalent: ``nsenter -t <pid> -m df -h /dev/shm``, ``cat
/sys/fs/cgroup$(cut -d: -f3 /proc/<pid>/cgroup)/{cpu.max,cpu.stat,memory.max,memory.events}``.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from doctor.i18n import lazy, t
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host, HostReadError, MeasurementError
from probes.helpers.lineage import lineage
from probes.helpers import cgroups, kernel_text
from probes.helpers.engine_flags import FLAGS, _args, flag, identity_of
from probes.helpers.mounts import shm_of
from probes.helpers.processes import Process, engine_processes

SAMPLE_S = 1.0  # ten 100 ms CFS periods
SAMPLES = 5  # runnable-thread counts taken in the window; the largest is kept
PARALLEL = 16  # engine cgroups read at once
MULTI_PROCESS = ("vllm", "sglang")  # Python engines that always run worker processes


@dataclass(frozen=True, slots=True)
class EngineContainer:
    engine: str  # "vllm pid 4242": the group's lowest pid
    kind: str
    pid: int  # the group's lowest pid
    pids: tuple[int, ...]  # the engine processes in this cgroup
    cgroup: str  # /proc/<pid>/cgroup's path (the memory controller's, else the v2 one)
    multi_process: bool  # vLLM/SGLang, or tensor parallel above 1
    tensor_parallel: int | None  # --tensor-parallel-size / --tp-size / --num-shard
    shm_bytes: int | None  # /dev/shm in the engine's mount namespace
    shm_source: str
    shm_reason: str | None
    cgroup_version: int | None
    cpu_quota_cpus: float | None  # None: no quota (or unread: cpu_reason)
    cpu_quota_dir: str | None
    cpu_reason: str | None
    threads: int | None  # /proc/<pid>/status Threads, summed over the group
    runnable_threads: int | None  # most threads in state R seen in the window
    nr_throttled_total: int | None  # cpu.stat since the cgroup was made
    throttled_s_total: float | None
    window_s: float | None
    periods_in_window: int | None
    throttled_in_window: int | None
    throttled_share: float | None  # throttled / elapsed periods in the window
    throttled_s_in_window: float | None
    memory_limit_bytes: int | None  # None: no limit (or unread: memory_reason)
    memory_dir: str | None
    memory_usage_bytes: int | None  # page cache included
    rss_bytes: int | None  # VmRSS summed over the group
    margin_bytes: int | None  # limit - RSS
    margin_share: float | None  # margin / limit
    oom_kills: int | None
    failcnt: int | None
    kernel_oom_kills: int | None  # kernel-log memcg OOM kills in this cgroup (None: log unread)
    memory_reason: str | None
    # the engine's identity in finding keys (doctor/engines.py: kind + listening address,
    # else model path, else pid)
    identity: str = ""
    pool_threads: int | None = None  # compute threads that run at once under load
    pool_source: str | None = None  # where pool_threads comes from: "-t 4", "Cpus_allowed_list"
    # field -> why it is None: unread (the reason), or none set (no quota, no limit), which
    # the rules read as not judged and `why` says
    missing: dict[str, str] = field(default_factory=dict)
    # the fields of ``missing`` that are None because none is set (no quota, no limit): `why`
    # rules a cause out on them (doctor/rules/evaluate.py ``none_set``)
    unset: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerRecord:
    engines: tuple[EngineContainer, ...]
    kernel_log: str  # where the kernel log came from, or why it was not read


def _status(host: Host, pid: int) -> dict[str, str]:
    """``/proc/<pid>/status`` read once a scan: its Threads and VmRSS then come from one read,
    live and replayed alike."""
    path = f"/proc/{pid}/status"
    text = host.memo(f"engine.container.status:{pid}", lambda: host.read_text(path))
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _status_sum(host: Host, pids: tuple[int, ...], key: str, unit: int) -> int | None:
    """None when one process's figure is absent (a zombie has no VmRSS) or unreadable."""
    total = 0
    for pid in pids:
        try:
            word = _status(host, pid).get(key, "").split()
            if not word:
                return None
            total += kernel_text.count(f"/proc/{pid}/status", word[0]) * unit
        except HostReadError:  # gone, or not what the kernel writes: that one figure is absent
            return None
    return total


def _runnable(pids: tuple[int, ...]) -> int:
    """Live only (in a measurement): threads in state R now, across ``pids``."""
    count = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids[:4096]:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    count += f.read().rsplit(")", 1)[-1].split()[0] == "R"
            except (OSError, IndexError):
                continue
    return count


def _sample(host: Host, quota: cgroups.CpuQuota, pids: tuple[int, ...]) -> dict:
    """cpu.stat twice ``SAMPLE_S`` apart, the runnable threads counted meanwhile."""
    try:
        first = cgroups.read_cpu_stat(host, quota.version, quota.directory)
        start, runnable = time.monotonic(), 0
        for _ in range(SAMPLES):
            runnable = max(runnable, _runnable(pids))
            time.sleep(SAMPLE_S / SAMPLES)
        last = cgroups.read_cpu_stat(host, quota.version, quota.directory)
    except HostReadError as exc:
        raise MeasurementError(str(exc)) from None
    t0, t1 = (cgroups.throttled_seconds(quota.version, s) for s in (first, last))
    return {"window_s": round(time.monotonic() - start, 3), "runnable_threads": runnable,
            "periods": last.get("nr_periods", 0) - first.get("nr_periods", 0),
            "throttled": last.get("nr_throttled", 0) - first.get("nr_throttled", 0),
            "throttled_s": round(t1 - t0, 6) if t0 is not None and t1 is not None else None}


def _counted(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 2**63:
        raise MeasurementError(f"{name}: expected a non-negative number, got {value!r:.40}")
    return value


def _cpu(host: Host, pids: tuple[int, ...]) -> dict:
    try:
        cg = cgroups.cgroup_dir(host, pids[0], "cpu")
        # engines sharing a cgroup see one reading of it (a recording keeps a file's first)
        quota = host.memo(f"engine.container.cpu_quota:{cg.directory}",
                          lambda: cgroups.cpu_quota(host, cg))
    except HostReadError as exc:
        return {"cpu_reason": str(exc)}
    out = {"cgroup_version": quota.version, "cpu_quota_cpus": quota.quota_cpus,
           "cpu_quota_dir": quota.directory, "nr_throttled_total": quota.nr_throttled,
           "throttled_s_total": quota.throttled_s}
    if quota.quota_cpus is None:
        return out | {"cpu_reason": "no CPU quota on the engine's cgroup or above it"}
    name = f"engine.container.cpu_sample:{quota.directory}"
    try:
        # one sample a cgroup: engines sharing it share the sample (and its runnable count)
        got = host.memo(name, lambda: host.measure(name, lambda: _sample(host, quota, pids)))
        if not isinstance(got, dict):
            raise MeasurementError(f"{name}: expected a mapping, got {type(got).__name__}")
        periods = _counted(got.get("periods"), f"{name} periods")
        throttled = _counted(got.get("throttled"), f"{name} throttled")
        if periods is not None and throttled is not None and throttled > periods:
            raise MeasurementError(f"{name}: {throttled:g} periods throttled of {periods:g}")
    except MeasurementError as exc:
        return out | {"cpu_reason": f"throttling not sampled: {exc}"}
    return out | {
        "window_s": _counted(got.get("window_s"), f"{name} window_s"),
        "runnable_threads": _counted(got.get("runnable_threads"), f"{name} runnable_threads"),
        "periods_in_window": periods, "throttled_in_window": throttled,
        "throttled_share": round(throttled / periods, 3) if periods and throttled is not None
        else None,
        "throttled_s_in_window": _counted(got.get("throttled_s"), f"{name} throttled_s")}


def _memory(host: Host, pids: tuple[int, ...]) -> dict:
    rss = _status_sum(host, pids, "VmRSS", 1024)
    try:
        memory_cg = cgroups.cgroup_dir(host, pids[0], "memory")
        # engines sharing a cgroup see one reading of it (a recording keeps a file's first)
        limit = host.memo(f"engine.container.memory_limit:{memory_cg.directory}",
                          lambda: cgroups.memory_limit(host, memory_cg))
    except HostReadError as exc:
        return {"rss_bytes": rss, "memory_reason": str(exc)}
    margin = limit.limit_bytes - rss if limit.limit_bytes is not None and rss is not None else None
    return {"rss_bytes": rss, "memory_limit_bytes": limit.limit_bytes, "memory_dir": limit.directory,
            "memory_usage_bytes": limit.usage_bytes, "oom_kills": limit.oom_kills,
            "failcnt": limit.failcnt, "margin_bytes": margin,
            "margin_share": round(margin / limit.limit_bytes, 4)
            if margin is not None and limit.limit_bytes else None,
            "memory_reason": None if limit.limit_bytes is not None
            else "no memory limit on the engine's cgroup or above it"}


def _kills_of(kills: list[cgroups.KernelKill] | None, pids: tuple[int, ...], cgroup: str) -> int | None:
    """Kills in the engine's cgroup (by memcg path), or of one of its pids where the kernel
    named no cgroup: a pid alone could be an older process's."""
    if kills is None:
        return None
    return sum(1 for k in kills if cgroup in k.memcgs or (not k.memcgs and k.pid in pids))


def _tensor_parallel(proc: Process) -> int | None:
    names = FLAGS["tensor_parallel_size"].get(proc.engine or "", ())
    value = flag(_args(proc.cmdline), *names) if names else None
    return int(value) if value and value.isascii() and value.isdigit() and len(value) < 6 else None


def _groups(host: Host) -> dict[str, list[Process]]:
    """The engines' processes, one group per engine: an engine's API server and its workers
    share a cgroup, a mount namespace and an ancestor; two engines started from one shell
    share the cgroup only, and stay two."""
    engines = engine_processes(host)
    pids = {p.pid for p in engines}
    groups: dict[str, list[Process]] = {}
    for proc in engines:
        try:
            cgroup = host.read_text(f"/proc/{proc.pid}/cgroup")
        except HostReadError:
            groups[f"pid {proc.pid}"] = [proc]  # gone, or unreadable: judged alone
            continue
        try:
            mnt = host.read_link(f"/proc/{proc.pid}/ns/mnt")
        except HostReadError:
            mnt = "?"
        root = min((a for a in lineage(host, proc.pid) if a in pids),
                   key=lambda a: len(lineage(host, a)), default=proc.pid)  # the topmost engine
        groups.setdefault(f"{cgroup}\0{mnt}\0{proc.engine}\0{root}", []).append(proc)
    return groups


CPU_ENGINES = ("llama.cpp", "ollama")  # engines whose compute threads run on the CPU
THREAD_FLAGS = ("-t", "--threads", "-tb", "--threads-batch")  # llama-server --help


def _cpus_allowed(host: Host, pid: int) -> int | None:
    """CPUs in ``Cpus_allowed_list`` of ``/proc/<pid>/status`` ("0-3,8" → 5)."""
    try:
        listed = _status(host, pid).get("Cpus_allowed_list", "").strip()
    except HostReadError:
        return None
    total = 0
    for part in listed.split(",")[:4096]:
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return None
        total += int(high) - int(low) + 1 if high else 1
    return total if total > 0 else None


def thread_pool(host: Host, procs: list[Process]) -> tuple[int | None, str | None]:
    """(threads, source): what the engine runs at once under load, known at rest."""
    kind = procs[0].engine or ""
    if kind not in CPU_ENGINES:
        return 1, "one scheduler thread"  # at least its loop; its compute is on the GPU
    found = []
    for proc in procs:
        words = _args(proc.cmdline)
        for name in THREAD_FLAGS:
            value = flag(words, name)
            if value and value.isascii() and value.isdigit() and 0 < int(value) < 100000:
                found.append((int(value), f"{name} {value}"))
    if found:
        return max(found)
    allowed = _cpus_allowed(host, procs[0].pid)
    return (allowed, "Cpus_allowed_list") if allowed else (None, None)


def _identity(procs: list[Process]) -> str:
    """The group's engine identity: the process holding its socket, else the lowest pid."""
    holder = next((p for p in procs if p.listen), procs[0])
    return identity_of(holder)


def _one(host: Host, procs: list[Process], kills: list[cgroups.KernelKill] | None) -> EngineContainer:
    procs = sorted(procs, key=lambda p: p.pid)
    pids = tuple(p.pid for p in procs)
    kind = procs[0].engine or "engine"
    tps = [tp for tp in map(_tensor_parallel, procs) if tp]
    shm = shm_of(host, pids[0])
    try:
        cg = cgroups.cgroup_dir(host, pids[0], "memory").path
    except HostReadError:
        cg = "?"
    memory = _memory(host, pids)
    pool, pool_source = thread_pool(host, procs)
    fields = {"cgroup_version": None, "cpu_quota_cpus": None, "cpu_quota_dir": None,
              "cpu_reason": None, "runnable_threads": None, "nr_throttled_total": None,
              "throttled_s_total": None, "window_s": None, "periods_in_window": None,
              "throttled_in_window": None, "throttled_share": None,
              "throttled_s_in_window": None, "memory_limit_bytes": None, "memory_dir": None,
              "memory_usage_bytes": None, "margin_bytes": None, "margin_share": None,
              "oom_kills": None, "failcnt": None} | _cpu(host, pids) | memory
    return EngineContainer(
        engine=f"{kind} pid {pids[0]}", kind=kind, pid=pids[0], pids=pids, cgroup=cg,
        multi_process=kind in MULTI_PROCESS or any(tp > 1 for tp in tps),
        tensor_parallel=max(tps) if tps else None, shm_bytes=shm.size_bytes,
        shm_source=shm.source, shm_reason=shm.reason,
        threads=_status_sum(host, pids, "Threads", 1),
        kernel_oom_kills=_kills_of(kills, pids, cg), identity=_identity(procs),
        pool_threads=pool, pool_source=pool_source, missing=_missing(fields, shm.size_bytes,
                                                                     shm.reason),
        unset=_unset(fields), **fields)


def _unset(fields: dict) -> tuple[str, ...]:
    """The quota and the limit read and found unset (their cgroup was read: a version, a
    directory): None there is "nothing caps it", not a failed read."""
    out = []
    if fields["cpu_quota_cpus"] is None and fields["cgroup_version"] is not None:
        out.append("cpu_quota_cpus")
    if fields["memory_limit_bytes"] is None and fields["memory_dir"] is not None:
        out.append("memory_limit_bytes")
    return tuple(out)


def _missing(fields: dict, shm_bytes: int | None, shm_reason: str | None) -> dict[str, str]:
    """Why the figures the rules judge are None: the read's reason, else none is set."""
    out: dict[str, str] = {}
    if fields["cpu_quota_cpus"] is None:
        out["cpu_quota_cpus"] = fields.get("cpu_reason") or lazy(
            "no CPU quota on its cgroup (cpu.max max, cpu.cfs_quota_us -1): nothing caps its CPU time")
    if fields["memory_limit_bytes"] is None:
        out["memory_limit_bytes"] = fields.get("memory_reason") or lazy(
            "no memory limit on its cgroup (memory.max max, or v1's unlimited)")
    if shm_bytes is None:
        out["shm_bytes"] = shm_reason or lazy("/dev/shm's size was not read")
    return out


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> ContainerRecord:
    groups = _groups(host)
    if not groups:
        raise Skip(t("no serving engine in the process table"))
    kills, source = cgroups.kernel_kills(host)
    # each quota's cpu.stat is sampled for SAMPLE_S: the cgroups are read side by side, so a
    # node of many containers takes a few windows, not one per container
    with ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="engine.container") as pool:
        engines = tuple(pool.map(lambda procs: _one(host, procs, kills), groups.values()))
    return ContainerRecord(engines, source)


def summary(record: ContainerRecord) -> str:
    def one(e: EngineContainer) -> str:
        shm = f"/dev/shm {e.shm_bytes / 2**20:.0f} MiB" if e.shm_bytes is not None else "/dev/shm ?"
        cpu = (t("{cpus:g} CPUs", cpus=e.cpu_quota_cpus) if e.cpu_quota_cpus is not None
               else t("no CPU quota"))
        mem = (t("memory limit {gib:.2f} GiB", gib=e.memory_limit_bytes / 2**30)
               if e.memory_limit_bytes is not None else t("no memory limit"))
        return t("{engine}: {shm}, {cpu}, {memory}", engine=e.engine, shm=shm, cpu=cpu, memory=mem)
    return t("; ").join(one(e) for e in record.engines)
