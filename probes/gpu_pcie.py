"""gpu.pcie: each GPU's PCIe link, as trained and as capable, read while a transfer runs.

Source: NVML ``nvmlDeviceGetCurrPcieLinkGeneration/Width``, ``GetMaxPcieLinkGeneration``
(the most this GPU and its slot together allow), ``GetGpuMaxPcieLinkGeneration`` (the
GPU's own), ``GetMaxPcieLinkWidth``, ``GetPcieReplayCounter``. No root needed. Manual
equivalent: ``nvidia-smi -q -d PCIE`` (or ``lspci -vv -s BUS | grep LnkSta``) during a copy.

Why under load: NVIDIA GPUs lower their link *speed* at idle to save power (Gen1, 2.5 GT/s,
on a Gen4 card is normal at idle) but keep their *width*. So a short width is degraded at
any time, a low generation only if it stays low while a transfer runs. At level standard
and above the probe runs ``probes.kernels.gpu_link_load`` in a child process (host-to-device
copies for ~1 s per GPU, reading the link between copies) through ``host.measure``, so a
replay gives the same figures. At level quick the generation is left unjudged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

from doctor.host import Host, MeasurementError
from doctor.model import Level, ScanOptions
from probes.gpu_common import Reader, gpu_count

# Per lane per direction, GB/s (decimal), after line coding: Gen1/2 8b/10b, Gen3-5
# 128b/130b, Gen6 PAM4 FLIT 236/256 (PCI-SIG; ../shared/reference/gpu-facts.md).
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.375}
LOAD_SECONDS = 1.0
LOAD_TIMEOUT_S = 60.0


def link_ceiling_gbps(gen: int | None, width: int | None) -> float | None:
    """One direction's ceiling of a link: Gen4 x16 -> 31.5 GB/s."""
    if gen not in LANE_GBPS or not width:
        return None
    return round(LANE_GBPS[gen] * width, 2)


@dataclass(frozen=True, slots=True)
class GpuLink:
    index: int
    gen_current: int | None  # nvmlDeviceGetCurrPcieLinkGeneration, at rest
    width_current: int | None  # nvmlDeviceGetCurrPcieLinkWidth, at rest
    gen_max: int | None  # nvmlDeviceGetMaxPcieLinkGeneration: GPU and slot together
    gen_gpu_max: int | None  # nvmlDeviceGetGpuMaxPcieLinkGeneration: the GPU alone
    width_max: int | None  # nvmlDeviceGetMaxPcieLinkWidth
    replay_count: int | None  # nvmlDeviceGetPcieReplayCounter (link-level retries)
    under_load: bool  # gen/width_loaded were read during a host-to-device copy
    gen_loaded: int | None  # highest generation seen during the copy
    width_loaded: int | None  # lowest width seen during the copy
    slot_limited: bool  # the slot, not the GPU, caps the generation (gen_max < gen_gpu_max)
    width_short: bool  # the link trained narrower than it can (at rest or under load)
    gen_low_under_load: bool  # below gen_max while a transfer ran
    ceiling_trained_gbps: float | None  # one direction, at the generation/width seen in use
    ceiling_capable_gbps: float | None  # one direction, at gen_max x width_max
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class PcieRecord:
    gpus: tuple[GpuLink, ...]
    load_reason: str | None  # why the link was not read under load (level, failure)


def _loaded(host: Host, index: int) -> dict:
    """Generation and width seen while copying to GPU ``index`` (a child process)."""
    def run() -> dict:
        argv = [sys.executable, "-m", "probes.kernels.gpu_link_load", "--device", str(index),
                "--seconds", str(LOAD_SECONDS)]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S,
                                 check=False)
        except subprocess.TimeoutExpired:
            raise MeasurementError(f"gpu_link_load: no result in {LOAD_TIMEOUT_S:g} s") from None
        if out.returncode != 0:
            raise MeasurementError(f"gpu_link_load: {out.stderr.strip()[-300:]}")
        return json.loads(out.stdout)
    return host.measure(f"gpu.pcie.load.{index}", run)


def _int_of(data: dict, key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_link(host: Host, index: int, load: dict | None) -> GpuLink:
    r = Reader(host)
    gen = r.integer("gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", index)
    width = r.integer("width_current", "nvmlDeviceGetCurrPcieLinkWidth", index)
    gen_max = r.integer("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", index)
    gen_gpu_max = r.integer("gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration", index)
    width_max = r.integer("width_max", "nvmlDeviceGetMaxPcieLinkWidth", index)
    gen_loaded = _int_of(load, "gen_max_seen") if load else None
    width_loaded = _int_of(load, "width_min_seen") if load else None
    widths = [w for w in (width, width_loaded) if w]
    in_use_gen = gen_loaded or gen
    in_use_width = width_loaded or width
    return GpuLink(
        index=index, gen_current=gen, width_current=width, gen_max=gen_max,
        gen_gpu_max=gen_gpu_max, width_max=width_max,
        replay_count=r.integer("replay_count", "nvmlDeviceGetPcieReplayCounter", index),
        under_load=gen_loaded is not None,
        gen_loaded=gen_loaded, width_loaded=width_loaded,
        slot_limited=bool(gen_max and gen_gpu_max and gen_max < gen_gpu_max),
        width_short=bool(width_max and widths and min(widths) < width_max),
        gen_low_under_load=bool(gen_loaded and gen_max and gen_loaded < gen_max),
        ceiling_trained_gbps=link_ceiling_gbps(in_use_gen, in_use_width),
        ceiling_capable_gbps=link_ceiling_gbps(gen_max, width_max),
        missing=r.missing,
    )


def probe(host: Host, options: ScanOptions) -> PcieRecord:
    count = gpu_count(host)
    loads: dict[int, dict | None] = {i: None for i in range(count)}
    load_reason = None
    if options.level < Level.STANDARD:
        load_reason = "level quick reads the link at rest only (idle links train down)"
    else:
        for i in range(count):
            try:
                loads[i] = _loaded(host, i)
            except MeasurementError as exc:
                load_reason = str(exc)
    return PcieRecord(gpus=tuple(read_link(host, i, loads[i]) for i in range(count)),
                      load_reason=load_reason)


def summary(record: PcieRecord) -> str:
    parts = []
    for g in record.gpus:
        gen = g.gen_loaded or g.gen_current
        width = g.width_loaded or g.width_current
        parts.append(f"GPU{g.index} Gen{gen or '?'} x{width or '?'} of Gen{g.gen_max or '?'} "
                     f"x{g.width_max or '?'}")
    return "; ".join(parts) + ("" if record.load_reason is None else " (at rest)")
