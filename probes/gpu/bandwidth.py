"""gpu.bandwidth: measured copy bandwidth of each GPU, each beside its physical ceiling.

Runs the torch micro-kernels of ``probes.kernels.gpu_bandwidth`` and ``gpu_first_use`` in
child processes through ``host.measure`` (so a replay gives the same figures), bound to the
GPU's own CPUs (``nvmlDeviceGetCpuAffinity``) so that pinned memory is local to its NUMA node.
Decimal GB/s, each with its run-to-run spread over the timed copies (``<figure>_spread``, a
fraction: the noise floor a comparison holds it to). Level standard; about 2-4 s per GPU, plus the P2P matrix where there are
several GPUs. Needs torch with CUDA; no root. Manual equivalent: nvbandwidth
(``nvbandwidth -t device_local_copy host_to_device_memcpy_ce``), or CUDA samples'
``bandwidthTest`` and ``p2pBandwidthLatencyTest``.

Ceilings:
* device memory: max memory clock (``nvmlDeviceGetMaxClockInfo(MEM)``, MHz) x 2 (double data
  rate) x bus width (``nvmlDeviceGetMemoryBusWidth``, bits) / 8; ``BUS_WIDTH_OVERRIDES`` corrects
  boards whose NVML width is wrong. H100 SXM: 2619 MHz x 2 x 5120 / 8 = 3.35 TB/s;
* host link: PCIe lane rate x width (probes/helpers/link_ceilings.py), as trained during
  the copy and as capable (``nvmlDeviceGetMaxPcieLinkGeneration/Width``).
"""

from __future__ import annotations

from typing import Any

from doctor.seam.host import Host, MeasurementError
from doctor.model import ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.i18n import t
from probes.helpers.gpu_common import Reader, gpu_count
from probes.helpers.link_ceilings import BUS_WIDTH_OVERRIDES as BUS_WIDTH_OVERRIDES
from probes.helpers.link_ceilings import link_ceiling_gbps
from probes.helpers.link_ceilings import memory_ceiling_gbps
from probes.helpers.gpu_topology import AFFINITY_WORDS, cpu_list
from probes.helpers.kernel_child import run_kernel
from probes.helpers.spread import read_spread
from probes.helpers.gpu_bandwidth_record import BandwidthRecord as BandwidthRecord
from probes.helpers.gpu_bandwidth_record import GpuBandwidth as GpuBandwidth
from probes.helpers.gpu_bandwidth_record import PeerBandwidth as PeerBandwidth

CHILD_TIMEOUT_S = 90.0


def _ratio(measured: float | None, ceiling: float | None) -> float | None:
    return round(measured / ceiling, 3) if measured and ceiling else None


def _child(module: str, *args: str) -> dict:
    return run_kernel(module, *args, timeout_s=CHILD_TIMEOUT_S)


def _gbps(data: dict, key: str) -> float | None:
    part = data.get(key)
    value = part.get("gbps") if isinstance(part, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _spread(data: dict, key: str) -> float | None:
    part = data.get(key)
    return read_spread(part.get("spread")) if isinstance(part, dict) else None


def read_gpu(host: Host, index: int, errors: dict[str, str]) -> GpuBandwidth:
    r = Reader(host)
    name = r.text("name", "nvmlDeviceGetName", index)
    words = r.sequence("cpus", "nvmlDeviceGetCpuAffinity", index, AFFINITY_WORDS)
    cpus = cpu_list(words) if words else None
    key = f"gpu.bandwidth.{index}"
    try:
        data: dict[str, Any] = host.measure(
            key, lambda: _child("gpu_bandwidth", "--device", str(index), *(["--cpus", cpus] if cpus else [])))
    except MeasurementError as exc:
        errors[key], data = str(exc), {}
    if not isinstance(data, dict):
        errors[key], data = f"wrong type: {type(data).__name__}", {}
    ceiling, source = memory_ceiling_gbps(
        name, r.integer("mem_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", index, 2),
        r.integer("bus_width", "nvmlDeviceGetMemoryBusWidth", index))
    raw_link = data.get("link_during_h2d")
    link = raw_link if isinstance(raw_link, dict) else {}
    gen = link.get("gen") if isinstance(link.get("gen"), int) else None
    width = link.get("width") if isinstance(link.get("width"), int) else None
    trained = link_ceiling_gbps(gen, width)
    capable = link_ceiling_gbps(r.integer("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", index),
                                r.integer("width_max", "nvmlDeviceGetMaxPcieLinkWidth", index))
    d2d, h2d = _gbps(data, "d2d"), _gbps(data, "h2d_pinned")
    return GpuBandwidth(
        index=index, name=name, d2d_gbps=d2d, d2d_gbps_spread=_spread(data, "d2d"),
        d2d_ceiling_gbps=ceiling, d2d_ceiling_source=source, d2d_ratio=_ratio(d2d, ceiling),
        h2d_pinned_gbps=h2d, h2d_pinned_gbps_spread=_spread(data, "h2d_pinned"),
        d2h_pinned_gbps=_gbps(data, "d2h_pinned"),
        d2h_pinned_gbps_spread=_spread(data, "d2h_pinned"),
        h2d_pageable_gbps=_gbps(data, "h2d_pageable"),
        h2d_pageable_gbps_spread=_spread(data, "h2d_pageable"),
        d2h_pageable_gbps=_gbps(data, "d2h_pageable"),
        d2h_pageable_gbps_spread=_spread(data, "d2h_pageable"),
        link_gen=gen, link_width=width, link_ceiling_trained_gbps=trained,
        link_ceiling_capable_gbps=capable, h2d_ratio_trained=_ratio(h2d, trained),
        h2d_ratio_capable=_ratio(h2d, capable), cpus=cpus, missing=r.missing)


def _peers(host: Host, count: int, errors: dict[str, str]) -> tuple[PeerBandwidth, ...]:
    if count < 2:
        return ()
    try:
        data = host.measure("gpu.bandwidth.p2p", lambda: _child("gpu_bandwidth", "--peers", str(count)))
    except MeasurementError as exc:
        errors["gpu.bandwidth.p2p"] = str(exc)
        return ()
    pairs = data.get("pairs") if isinstance(data, dict) else None
    return tuple(PeerBandwidth(p["a"], p["b"], p.get("gbps"), p.get("peer_access"))
                 for p in pairs or [] if isinstance(p, dict) and isinstance(p.get("a"), int)
                 and isinstance(p.get("b"), int))


def _first_use(host: Host, errors: dict[str, str]) -> tuple[float | None, float | None]:
    try:
        data = host.measure("gpu.first_use", lambda: _child("gpu_first_use", "--device", "0"))
    except MeasurementError as exc:
        errors["gpu.first_use"] = str(exc)
        return None, None
    first, warm = (data.get(k) if isinstance(data, dict) else None for k in ("first_s", "warm_s"))
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (first, warm))
    return (first, warm) if ok else (None, None)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> BandwidthRecord:
    count = gpu_count(host)
    errors: dict[str, str] = {}
    gpus = tuple(read_gpu(host, i, errors) for i in range(count))
    peers = _peers(host, count, errors)
    first, warm = _first_use(host, errors)
    return BandwidthRecord(gpus=gpus, peers=peers, first_use_s=first, warm_use_s=warm,
                           errors=errors)


def summary(record: BandwidthRecord) -> str:
    parts, unmeasured = [], []
    for g in record.gpus:
        failed = record.errors.get(f"gpu.bandwidth.{g.index}")
        if failed is not None:
            unmeasured.append(g.index)
            continue
        d2d = f"{g.d2d_gbps:g}/{g.d2d_ceiling_gbps:g} GB/s" if g.d2d_gbps and g.d2d_ceiling_gbps else "?"
        h2d = (f"{g.h2d_pinned_gbps:g}/{g.link_ceiling_trained_gbps:g} GB/s"
               if g.h2d_pinned_gbps and g.link_ceiling_trained_gbps else "?")
        parts.append(t("GPU{index} memory {d2d}, host->device {h2d}", index=g.index, d2d=d2d, h2d=h2d))
    if unmeasured:  # one reason for all: the same kernel failed, or the recording lacks it
        first = record.errors[f"gpu.bandwidth.{unmeasured[0]}"]
        gpus = ",".join(str(i) for i in unmeasured)
        parts.append(t("GPU {gpus} not measured ({why})", gpus=gpus, why=first))
    return t("; ").join(parts)
