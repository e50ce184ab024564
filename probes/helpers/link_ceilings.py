"""A GPU's physical ceilings, in decimal GB/s: its host link and its device memory.

* host link, one direction: PCIe lane rate (after line coding) x width, ``link_ceiling_gbps``
  (Gen4 x16: 31.5 GB/s);
* device memory: max memory clock (``nvmlDeviceGetMaxClockInfo(MEM)``, MHz) x 2 (double data
  rate) x bus width (``nvmlDeviceGetMemoryBusWidth``, bits) / 8, ``memory_ceiling_gbps``;
  ``BUS_WIDTH_OVERRIDES`` corrects boards whose NVML width is wrong. H100 SXM: 2619 MHz x 2 x
  5120 / 8 = 3.35 TB/s.

Pure functions of NVML's figures: gpu.pcie, gpu.bandwidth and engine.offload judge by them.
"""

from __future__ import annotations

from doctor.i18n import t

# Per lane per direction, GB/s (decimal), after line coding: Gen1/2 8b/10b, Gen3-5
# 128b/130b, Gen6 PAM4 FLIT 236/256 (PCI-SIG; ../shared/reference/gpu-facts.md).
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.375}
# NVML reports 8192 bits for B200; the HBM3e stacks give 7680 (../shared/reference/gpu-facts.md).
BUS_WIDTH_OVERRIDES = {"B200": 7680}


def link_ceiling_gbps(gen: int | None, width: int | None) -> float | None:
    """One direction's ceiling of a link: Gen4 x16 -> 31.5 GB/s."""
    if gen not in LANE_GBPS or not width:
        return None
    return round(LANE_GBPS[gen] * width, 2)


def memory_ceiling_gbps(name: str | None, mem_clock_max_mhz: int | None,
                        bus_width_bits: int | None) -> tuple[float | None, str]:
    """(GB/s, how it was computed) from the max memory clock and the bus width."""
    if not mem_clock_max_mhz or not bus_width_bits:
        return None, "no max memory clock or bus width from NVML"
    source = f"{mem_clock_max_mhz} MHz x 2 x {bus_width_bits} bit / 8"
    for model, width in BUS_WIDTH_OVERRIDES.items():
        if name and model in name:
            bus_width_bits = width
            source = t("{mhz} MHz x 2 x {width} bit / 8 (bus width corrected for {model})",
                       mhz=mem_clock_max_mhz, width=width, model=model)
    return round(mem_clock_max_mhz * 1e6 * 2 * bus_width_bits / 8 / 1e9, 1), source
