"""host.memory_bandwidth: STREAM-style copy and triad on the CPU, against the DIMMs' ceiling.

Runs ``probes.kernels.stream`` in a child process (torch on the CPU, numpy when torch is
absent), threads = physical cores (logical CPUs where cpuinfo has no core ids), each array 4× the last-level cache and at least 256 MiB,
best of 5 after a warm-up; decimal GB/s counted as STREAM counts them. The child keeps
torch out of the scan's own memory and can be killed on timeout. The ceiling comes from
``dmidecode -t memory`` (root). Manual equivalent: STREAM (``stream_c.exe``) and
``sudo dmidecode -t memory | grep -i speed``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass

from doctor.host import Host, HostReadError, MeasurementError
from doctor.model import ScanOptions
from probes.dimms import read_ceiling
from probes.host_cpu import parse_cpuinfo
from probes.host_memory import parse_meminfo

MIN_ARRAY_BYTES = 256 * 1024 * 1024
KERNEL_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class MemoryBandwidthRecord:
    backend: str  # torch or numpy
    threads: int
    array_bytes: int
    copy_gbps: float
    triad_gbps: float
    kernel_s: float  # the measurement's own wall time
    dimms_populated: int | None
    channels: int | None
    dimm_rated_mts: int | None
    dimm_configured_mts: int | None
    ceiling_gbps: float | None
    ceiling_reason: str | None  # why there is no ceiling
    # triad_gbps / ceiling_gbps; with numpy, whose triad makes 5 passes where STREAM counts
    # 3 (and so understates by ~25-40%), copy_gbps / ceiling_gbps instead.
    triad_ratio: float | None


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


def _run_kernel(array_bytes: int, threads: int) -> dict:
    argv = [sys.executable, "-m", "probes.kernels.stream", "--array-bytes", str(array_bytes),
            "--threads", str(threads), "--repeats", "5"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=KERNEL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MeasurementError(f"the STREAM kernel ran past {KERNEL_TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        raise MeasurementError(f"the STREAM kernel failed: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


def probe(host: Host, options: ScanOptions) -> MemoryBandwidthRecord:
    # STREAM runs one thread per core: SMT siblings share the core's load/store units.
    _, physical_cores, _, _ = parse_cpuinfo(host.read_text("/proc/cpuinfo"))
    threads = physical_cores or sum(
        1 for c in host.list_dirs("/sys/devices/system/cpu") if re.fullmatch(r"cpu\d+", c))
    available = parse_meminfo(host.read_text("/proc/meminfo")).get("MemAvailable", 0) * 1024
    array_bytes = max(4 * llc_total_bytes(host), MIN_ARRAY_BYTES)
    if available and 3 * array_bytes > available // 2:
        array_bytes = available // 6  # three arrays in half of what is free
    result = host.measure("host.memory_bandwidth.stream",
                          lambda: _run_kernel(array_bytes, threads))
    ceiling = read_ceiling(host)
    ratio = None
    if ceiling.ceiling_gbps:
        best = result["triad_gbps"] if result.get("triad_passes", 3) == 3 else result["copy_gbps"]
        ratio = round(best / ceiling.ceiling_gbps, 3)
    return MemoryBandwidthRecord(
        backend=result["backend"],
        threads=result["threads"],
        array_bytes=result["array_bytes"],
        copy_gbps=round(result["copy_gbps"], 2),
        triad_gbps=round(result["triad_gbps"], 2),
        kernel_s=round(result["duration_s"], 2),
        dimms_populated=ceiling.dimms_populated,
        channels=ceiling.channels,
        dimm_rated_mts=ceiling.rated_mts,
        dimm_configured_mts=ceiling.configured_mts,
        ceiling_gbps=ceiling.ceiling_gbps,
        ceiling_reason=ceiling.reason,
        triad_ratio=ratio,
    )


def summary(record: MemoryBandwidthRecord) -> str:
    """One line for people: copy and triad against the DIMMs' ceiling."""
    ceiling = (f"{record.triad_ratio:.0%} of {record.ceiling_gbps} GB/s ceiling"
               if record.ceiling_gbps else f"no ceiling ({record.ceiling_reason})")
    return (f"copy {record.copy_gbps} GB/s, triad {record.triad_gbps} GB/s ({record.backend}, "
            f"{record.threads} threads, {record.kernel_s} s); {ceiling}")
