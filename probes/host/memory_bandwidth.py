"""host.memory_bandwidth: STREAM-style copy and triad on the CPU, against the DIMMs' ceilings.

Runs ``probes.kernels.stream`` in a child process, threads = physical cores (logical CPUs
where cpuinfo has no core ids), each array 4× the last-level cache and at least 256 MiB, as
STREAM sizes them; decimal GB/s counted as STREAM counts them. The cost is bounded: huge
pages for the first touch (where they come in faster: not in a VM whose balloon hands free
memory back), and timed passes stop after BUDGET_S (best of 2 to 10; the spread of the
passes' rates is each figure's noise floor, ``<figure>_spread``). Up to
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
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from doctor.model import ScanOptions
from doctor.display import number, why
from doctor.i18n import t
from probes.helpers.dimms import read_ceiling
from probes.host.cpu import parse_cpuinfo
from probes.host.memory import parse_meminfo
from probes.helpers.kernel_child import run_kernel
from probes.kernels.spread import read_spread

MIN_ARRAY_BYTES = 256 * 1024 * 1024
KERNEL_TIMEOUT_S = 120.0
# STREAM's default, so that the probe's best is a best of as many passes as C STREAM's; 10
# passes over 3 x 256 MiB take ~0.4 s on a 2-vCPU EPYC VM, and BUDGET_S bounds them.
MAX_REPEATS = 10
BUDGET_S = 1.0  # for the timed passes; the first touch of 3 arrays comes before
# numpy's threads are handed their chunk one after another from Python (the second of 2
# starts ~0.1 ms after the first on a 2-vCPU VM, under 0.5% of a pass over 3 x 256 MiB);
# torch's OpenMP threads start together, which matters with many threads.
NUMPY_MAX_THREADS = 8


@dataclass(frozen=True, slots=True)
class MemoryBandwidthRecord:
    backend: str  # torch or numpy
    threads: int
    array_bytes: int
    copy_gbps: float
    # (max - min) / median of the timed passes' rates: the figure's run-to-run noise floor;
    # None after one pass, and in recordings from before the kernel reported it
    copy_gbps_spread: float | None
    triad_gbps: float
    triad_gbps_spread: float | None
    kernel_s: float  # the measurement's own wall time (allocation, first touch, passes)
    dimms_populated: int | None
    channels: int | None  # populated memory channels
    dimm_rated_mts: int | None
    dimm_configured_mts: int | None
    ceiling_gbps: float | None  # the installed DIMMs' ceiling
    ceiling_reason: str | None  # why there is no ceiling
    # triad_gbps / ceiling_gbps; with a kernel whose triad makes 5 passes where STREAM counts
    # 3 (numpy before its blocked triad; older recordings), copy_gbps / ceiling_gbps instead.
    triad_ratio: float | None
    repeats: int | None = None  # timed passes that ran (the time budget may stop them early)
    huge_pages: bool | None = None  # MADV_HUGEPAGE accepted for the arrays
    # Cores other processes (and hypervisor steal) kept busy during the timed passes, from
    # /proc/stat less the kernel's own CPU time; None in recordings from before it was read.
    other_busy_cores: float | None = None
    platform_channels: int | None = None  # all channels the DIMM slots belong to
    empty_channels: tuple[str, ...] = ()  # a slot name per channel with no DIMM
    platform_ceiling_gbps: float | None = None  # every channel populated, at the same speed
    platform_ratio: float | None = None  # the same figure as triad_ratio, / platform ceiling


def llc_total_bytes(host: Host) -> int:
    """Sum of distinct last-level caches (``/sys/devices/system/cpu/cpu*/cache/index*``)."""
    seen: dict[str, int] = {}
    best_level = 0
    for cpu in host.list_dirs("/sys/devices/system/cpu"):
        if not re.fullmatch(r"cpu\d+", cpu):
            continue
        base = f"/sys/devices/system/cpu/{cpu}/cache"
        try:
            indexes = host.list_dirs(base)
        except HostReadError:
            continue
        for index in indexes:
            try:
                level = int(host.read_text(f"{base}/{index}/level"))
                size = host.read_text(f"{base}/{index}/size").strip()
                shared = host.read_text(f"{base}/{index}/shared_cpu_list").strip()
            except (HostReadError, ValueError):
                continue
            if level > best_level:
                seen, best_level = {}, level
            if level == best_level:
                seen[shared] = _size_bytes(size)
    return sum(seen.values())


def _size_bytes(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _run_kernel(array_bytes: int, threads: int, backend: str | None = None) -> dict:
    """The STREAM kernel's result dict, from a child process; ``backend`` None: the probe's."""
    if backend is None:
        backend = "numpy" if threads <= NUMPY_MAX_THREADS else "auto"
    return run_kernel("stream", "--array-bytes", str(array_bytes), "--threads", str(threads),
                      "--repeats", str(MAX_REPEATS), "--budget-s", str(BUDGET_S),
                      "--backend", backend, timeout_s=KERNEL_TIMEOUT_S)


def probe(host: Host, options: ScanOptions) -> MemoryBandwidthRecord:
    # STREAM runs one thread per core: SMT siblings share the core's load/store units.
    _, physical_cores, _, _ = parse_cpuinfo(host.read_text("/proc/cpuinfo"))
    threads = physical_cores or sum(
        1 for c in host.list_dirs("/sys/devices/system/cpu") if re.fullmatch(r"cpu\d+", c))
    available = parse_meminfo(host.read_text("/proc/meminfo")).get("MemAvailable", 0) * 1024
    array_bytes = max(4 * llc_total_bytes(host), MIN_ARRAY_BYTES)
    if available and 3 * array_bytes > available // 2:
        array_bytes = available // 6  # three arrays in half of what is free
    # memoized: engine.offload estimates a token's cost from this scan's figure
    result = host.memo("host.memory_bandwidth.stream", lambda: host.measure(
        "host.memory_bandwidth.stream", lambda: _run_kernel(array_bytes, threads)))
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
        repeats=result.get("repeats"),
        huge_pages=result.get("huge_pages"),
        other_busy_cores=result.get("other_busy_cores"),
        platform_channels=ceiling.platform_channels,
        empty_channels=ceiling.empty_channels,
        platform_ceiling_gbps=ceiling.platform_ceiling_gbps,
        platform_ratio=_ratio(best, ceiling.platform_ceiling_gbps),
    )


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
             ceiling=ceiling, busy=busy)
