"""gpu.bandwidth's record, here so that a probe that reads it (engine.roofline, through its
inputs) imports no probe: each GPU's measured copy bandwidths beside their ceilings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuBandwidth:
    index: int
    name: str | None
    d2d_gbps: float | None  # device-to-device copy, read + write counted
    # each <figure>_spread: (max - min) / median of the timed copies' rates, the figure's
    # run-to-run noise floor; None after one copy and in recordings from before it was kept
    d2d_gbps_spread: float | None
    d2d_ceiling_gbps: float | None
    d2d_ceiling_source: str
    d2d_ratio: float | None
    h2d_pinned_gbps: float | None
    h2d_pinned_gbps_spread: float | None
    d2h_pinned_gbps: float | None
    d2h_pinned_gbps_spread: float | None
    h2d_pageable_gbps: float | None
    h2d_pageable_gbps_spread: float | None
    d2h_pageable_gbps: float | None
    d2h_pageable_gbps_spread: float | None
    link_gen: int | None  # during the host-to-device copy
    link_width: int | None
    link_ceiling_trained_gbps: float | None  # one direction, the link as it ran
    link_ceiling_capable_gbps: float | None  # one direction, max generation x max width
    h2d_ratio_trained: float | None  # h2d_pinned_gbps / link_ceiling_trained_gbps
    h2d_ratio_capable: float | None
    cpus: str | None  # the CPUs the kernel ran on (the GPU's affinity)
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class PeerBandwidth:
    a: int
    b: int
    gbps: float | None
    peer_access: bool | None  # torch.cuda.can_device_access_peer


@dataclass(frozen=True, slots=True)
class BandwidthRecord:
    gpus: tuple[GpuBandwidth, ...]
    peers: tuple[PeerBandwidth, ...]
    first_use_s: float | None  # first CUDA operation in a fresh process
    warm_use_s: float | None  # the same operation once warm
    errors: dict[str, str]  # measurement -> why it failed
