"""host.memory_bandwidth: STREAM-style copy and triad on the CPU, against the DIMMs' ceilings.

Runs ``probes.kernels.stream`` in a child process, threads = physical cores (logical CPUs
where cpuinfo has no core ids), decimal GB/s counted as STREAM counts them. Each array is 4x
the last-level cache the threads reach (at least 256 MiB), within a memory budget: an eighth
of MemAvailable, 4 GiB, 512 MiB a thread, whichever is least (probes/helpers/stream_sizing.py
says why); where the budget makes them smaller than that rule, ``under_rule`` says so. The
cost is bounded in time too: the kernel has until TIME_BUDGET_S after its spawn for its start,
allocation, first touch (cut at half of what is left on a busy host, keeping cut_floor: the
passes then use what was filled) and timed passes (best of 2
to 10; the spread of the passes' rates is each figure's noise floor, ``<figure>_spread``),
with huge pages for the first touch where they come in faster (not in a VM whose balloon
hands free memory back). Up to
NUMPY_MAX_THREADS threads the numpy backend runs (no torch import: ~1.4 s of CPU, more than
the measurement on a small VM); above, torch where installed. The child keeps the arrays out
of the scan's own memory and can be killed on timeout. The child also reports how many cores
other work kept busy while it measured (``other_busy_cores``): the rules do not call a
contended figure a slow host. The ceilings come from ``dmidecode -t memory`` (root): the
installed DIMMs' and the platform's with every channel populated. Manual equivalent: STREAM
(``stream_c.exe``) and ``sudo dmidecode -t memory | grep -iE 'speed|size|locator'``.
"""

from __future__ import annotations

import re
import time

from doctor.seam.host import Host
from doctor.model import ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.display import number, why
from doctor.i18n import lazy, t
from probes.helpers.dimms import DimmCeiling, read_ceiling
from probes.helpers.cpuinfo import parse_cpuinfo
from probes.helpers.meminfo import parse_meminfo
from probes.helpers.kernel_child import run_kernel
from probes.helpers.spread import read_spread
from probes.helpers import stream_sizing
from probes.helpers.stream_sizing import Sizing
from probes.helpers.stream_record import MemoryBandwidthRecord as MemoryBandwidthRecord

KERNEL_TIMEOUT_S = 120.0
# The probe's time, from spawning the kernel to its result: the child's start (numpy imported
# twice: 0.3 s on an idle 2-vCPU VM, 1 s under load), allocation, first touch, passes, check;
# less EXIT_S for the kernel to check, unmap its arrays and exit (at 0.1 s, the probe took
# 3.1-3.2 s at load average 11 on 2 vCPUs; at 0.3 s, 2.75-3.03 s at load average 7).
TIME_BUDGET_S = 3.0
EXIT_S = 0.4
CUT_FLOOR_CACHES = 2  # a cut first touch still fills 2x the cache the threads reach (cut_floor)
# STREAM's default, so that the probe's best is a best of as many passes as C STREAM's; 10
# passes over 3 x 256 MiB take ~0.4 s on a 2-vCPU EPYC VM, and BUDGET_S bounds them.
MAX_REPEATS = 10
BUDGET_S = 1.0  # for the timed passes; the first touch of 3 arrays comes before
# numpy's threads are handed their chunk one after another from Python (the second of 2
# starts ~0.1 ms after the first on a 2-vCPU VM, under 0.5% of a pass over 3 x 256 MiB);
# torch's OpenMP threads start together, which matters with many threads.
NUMPY_MAX_THREADS = 8


def _run_kernel(array_bytes: int, threads: int, backend: str | None = None,
                min_array_bytes: int = 0) -> dict:
    """The STREAM kernel's result dict, from a child process; ``backend`` None: the probe's.
    A first touch the deadline cuts still fills ``min_array_bytes`` of each array."""
    if backend is None:
        backend = "numpy" if threads <= NUMPY_MAX_THREADS else "auto"
    return run_kernel("stream", "--array-bytes", str(array_bytes), "--threads", str(threads),
                      "--repeats", str(MAX_REPEATS), "--budget-s", str(BUDGET_S),
                      "--deadline-at", repr(time.time() + TIME_BUDGET_S - EXIT_S),
                      "--min-array-bytes", str(min_array_bytes),
                      "--backend", backend,
                      timeout_s=KERNEL_TIMEOUT_S)


def plan(host: Host) -> tuple[int, stream_sizing.Reach, Sizing]:
    """Threads, the cache they reach, and the arrays' size within the memory budget."""
    _, physical_cores, _, flags = parse_cpuinfo(host.read_text("/proc/cpuinfo"))
    # STREAM runs one thread per core: SMT siblings share the core's load/store units.
    threads = physical_cores or sum(
        1 for c in host.list_dirs("/sys/devices/system/cpu") if re.fullmatch(r"cpu\d+", c))
    available = parse_meminfo(host.read_text("/proc/meminfo")).get("MemAvailable")
    caches = stream_sizing.parse_cache_tree(stream_sizing.read_cache_tree(host))
    reach = stream_sizing.reach(caches, stream_sizing.allowed_cpus(host),
                                stream_sizing.is_virtual(host, flags))
    sizing = stream_sizing.size_arrays(reach.cache_bytes,
                                       None if available is None else available * 1024, threads)
    return threads, reach, sizing


def cut_floor(cache_bytes: int | None, array_bytes: int) -> int:
    """What a first touch the deadline cuts still fills of each array: 2x the cache (a 2-vCPU
    EPYC VM's C STREAM read DRAM's rates from arrays of 2x its L3, part cache below:
    stream_sizing's docstring), but at most half the array, so that the time bound holds but
    for that half's touch (arrays 3 x 340 MiB, not cut, took 3.1-3.9 s at load average 10)."""
    return min(CUT_FLOOR_CACHES * (cache_bytes or 0), array_bytes // 2)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> MemoryBandwidthRecord:
    threads, reach, sizing = plan(host)
    array_bytes = sizing.array_bytes
    floor = cut_floor(reach.cache_bytes, array_bytes)
    result = host.measure("host.memory_bandwidth.stream",
                          lambda: _run_kernel(array_bytes, threads, min_array_bytes=floor))
    ceiling = read_ceiling(host)
    best = result["triad_gbps"] if result.get("triad_passes", 3) == 3 else result["copy_gbps"]
    return MemoryBandwidthRecord(
        backend=result["backend"],
        threads=result["threads"],
        array_bytes=result["array_bytes"],
        copy_gbps=round(result["copy_gbps"], 2),
        copy_gbps_spread=read_spread(result.get("copy_gbps_spread")),
        triad_gbps=round(result["triad_gbps"], 2),
        triad_gbps_spread=read_spread(result.get("triad_gbps_spread")),
        kernel_s=round(result["duration_s"], 2),
        dimms_populated=ceiling.dimms_populated,
        channels=ceiling.channels,
        dimm_rated_mts=ceiling.rated_mts,
        dimm_configured_mts=ceiling.configured_mts,
        ceiling_gbps=ceiling.ceiling_gbps,
        ceiling_reason=ceiling.reason,
        triad_ratio=_ratio(best, ceiling.ceiling_gbps),
        stream_gbps=float(best),
        repeats=result.get("repeats"),
        huge_pages=result.get("huge_pages"),
        other_busy_cores=result.get("other_busy_cores"),
        platform_channels=ceiling.platform_channels,
        empty_channels=ceiling.empty_channels,
        platform_ceiling_gbps=ceiling.platform_ceiling_gbps,
        platform_ratio=_ratio(best, ceiling.platform_ceiling_gbps),
        cache_bytes=reach.cache_bytes,
        cache_advertised_bytes=reach.advertised_bytes,
        vm_cache_bounded=reach.vm_bounded,
        rule_array_bytes=sizing.rule_array_bytes,
        memory_budget_bytes=sizing.budget_bytes,
        budget_basis=sizing.budget_basis,
        under_rule=stream_sizing.is_under_rule(result["array_bytes"], sizing.rule_array_bytes),
        touch_cut=result.get("touch_cut"),
        missing=_missing(ceiling, result.get("other_busy_cores")),
    )


def _missing(ceiling: DimmCeiling, other_busy_cores: float | None) -> dict[str, str]:
    """Why the figures the host-memory rules judge are None."""
    out: dict[str, str] = {}
    unread = ceiling.reason or lazy("the DIMMs were not read (dmidecode -t memory)")
    for name, value in (("dimm_configured_mts", ceiling.configured_mts),
                        ("dimm_rated_mts", ceiling.rated_mts),
                        ("ceiling_gbps", ceiling.ceiling_gbps),
                        ("platform_ceiling_gbps", ceiling.platform_ceiling_gbps)):
        if value is None:
            out[name] = unread
    if ceiling.ceiling_gbps is None:
        out["triad_ratio"] = unread
    if ceiling.platform_ceiling_gbps is None:
        out["platform_ratio"] = unread
    if other_busy_cores is None:
        out["other_busy_cores"] = lazy("not in this recording: made before the kernel read "
                                       "/proc/stat around its passes; a new capture has it")
    return out


def _ratio(measured_gbps: float, ceiling_gbps: float | None) -> float | None:
    return round(measured_gbps / ceiling_gbps, 3) if ceiling_gbps else None


def summary(record: MemoryBandwidthRecord) -> str:
    """One line for people: the rates, both ceilings, empty channels, and other work."""
    if record.ceiling_gbps and record.triad_ratio is not None:
        ceiling = t("{ratio:.0%} of the DIMMs' {ceiling} GB/s", ratio=record.triad_ratio,
                    ceiling=record.ceiling_gbps)
        if record.platform_ceiling_gbps and record.empty_channels:
            ceiling += t(", {ratio:.0%} of the platform's {ceiling} GB/s ({channels} of {slots} "
                         "channels populated)", ratio=record.platform_ratio,
                         ceiling=record.platform_ceiling_gbps, channels=record.channels,
                         slots=record.platform_channels)
    else:
        ceiling = t("no ceiling ({why})", why=why(record.ceiling_reason))
    busy = ("" if record.other_busy_cores is None
            else t("; {cores} cores busy with other work meanwhile",
                   cores=number(record.other_busy_cores, "g")))
    return t("copy {copy} GB/s, triad {triad} GB/s ({backend}, {threads} threads, {seconds} s); "
             "{ceiling}{busy}", copy=record.copy_gbps, triad=record.triad_gbps,
             backend=record.backend, threads=record.threads, seconds=record.kernel_s,
             ceiling=ceiling, busy=busy) + _under_rule(record)


def _mib(value: int | None) -> str:
    return number((value or 0) / 2**20, ".0f")


def _under_rule(record: MemoryBandwidthRecord) -> str:
    """The note where the arrays were smaller than STREAM's rule of thumb, and why."""
    if not record.under_rule:
        return ""
    if record.touch_cut is None:  # a recording from before the kernel said what it filled
        bound = t("the recorded run's size")
    elif record.touch_cut:
        bound = t("the first touch was cut short at half the probe's time (a busy host)")
    elif record.budget_basis == "available":
        bound = t("the memory budget, an eighth of MemAvailable: {budget} MiB for 3 arrays",
                  budget=_mib(record.memory_budget_bytes))
    elif record.budget_basis == "threads":
        bound = t("the memory budget, {budget} MiB for 3 arrays at 512 MiB a thread",
                  budget=_mib(record.memory_budget_bytes))
    else:
        bound = t("the memory budget's cap, {budget} MiB for 3 arrays",
                  budget=_mib(record.memory_budget_bytes))
    vm = ("" if not record.vm_cache_bounded
          else t(", a VM's {advertised} MiB counted at most 48 MiB a vCPU",
                 advertised=_mib(record.cache_advertised_bytes)))
    return t("; arrays of {array} MiB, under STREAM's rule of 4x the cache the threads reach "
             "({rule} MiB = 4 x {cache} MiB{vm}): {bound}; part of the figure may be cache "
             "bandwidth", array=_mib(record.array_bytes), cache=_mib(record.cache_bytes), vm=vm,
             rule=_mib(record.rule_array_bytes), bound=bound)
