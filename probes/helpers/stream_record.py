"""host.memory_bandwidth's record, here so that a probe that reads it (engine.offload, through
its inputs) imports no probe: the STREAM figures, the DIMMs' ceilings, the arrays' sizing."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    # The last-level cache the threads reach (stream_sizing), None where sysfs shows none;
    # vm_cache_bounded: a VM's advertised size (cache_advertised_bytes) was counted at most
    # 48 MiB a vCPU
    cache_bytes: int | None = None
    cache_advertised_bytes: int | None = None
    vm_cache_bounded: bool = False
    rule_array_bytes: int | None = None  # 4x cache_bytes: STREAM's rule of thumb per array
    memory_budget_bytes: int | None = None  # for the three arrays together
    budget_basis: str | None = None  # what bound it: available, cap, threads
    # The arrays that ran were smaller than the rule (the budget, or a first touch cut short
    # on a busy host): part of the figure may be cache bandwidth. None in older recordings.
    under_rule: bool | None = None
    touch_cut: bool | None = None  # the first touch stopped at half the deadline
    # The figure the ratios use, unrounded: triad, or copy with a 5-pass triad; engine.offload
    # estimates a token's cost from it (handed this record by the runner). None where absent.
    stream_gbps: float | None = None
    # field -> why a figure the rules judge is None (the DIMMs' ceiling unread, a recording
    # from before other_busy_cores was read), which `why` shows
    missing: dict[str, str] = field(default_factory=dict)
