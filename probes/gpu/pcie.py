"""gpu.pcie: each GPU's PCIe link, as trained and as capable, read while a transfer runs.

Source: NVML ``nvmlDeviceGetCurrPcieLinkGeneration/Width``, ``GetMaxPcieLinkGeneration``
(the most this GPU and its slot together allow), ``GetGpuMaxPcieLinkGeneration`` (the
GPU's own), ``GetMaxPcieLinkWidth``, ``GetPcieReplayCounter``; the slot's own capability from sysfs: the upstream port
(the parent of ``/sys/bus/pci/devices/<bdf>``) ``max_link_speed`` and ``max_link_width``. No
root needed. Manual equivalent: ``nvidia-smi -q -d PCIE`` (or ``lspci -vv -s BUS | grep LnkSta``) during a copy.

Why under load: NVIDIA GPUs lower their link *speed* at idle to save power (Gen1, 2.5 GT/s,
on a Gen4 card is normal at idle) but keep their *width*. So a short width is degraded at
any time, a low generation only if it stays low while a transfer runs. At level standard
and above the probe runs ``probes.kernels.gpu_link_load`` in a child process (host-to-device
copies for ~1 s per GPU, reading the link between copies) through ``host.measure``, so a
replay gives the same figures. At level quick the generation is left unjudged.

The slot's width decides whether a narrow link is short: a GPU in an x8 slot (a consumer
board's second slot, a cloud VM's passthrough at x8, a supported T4 configuration) is not
degraded. Where the slot cannot be seen (the GPU sits on a root bus with no port above it,
as on passthrough VMs, or the port's link could not be read) or the host is a virtual
machine (whose virtual ports say nothing of the physical slot), the width is not judged
(``slot_known`` False, ``width_short`` False): the measured copy bandwidth is what is left
to judge by (``copy_gbps``, and gpu.bandwidth's pcie-bandwidth-low against the trained link).
``on_vm``: host.cpu's virtual-machine signals or NVML's virtualization mode of the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host, MeasurementError
from doctor.model import Level, ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.i18n import t
from probes.helpers.gpu_common import gpu_count
from probes.helpers.link_ceilings import LANE_GBPS as LANE_GBPS
from probes.helpers.link_ceilings import link_ceiling_gbps as link_ceiling_gbps
from probes.helpers.pcie_link import GpuLink, read_link
from probes.helpers.pcie_link import slot_of as slot_of
from probes.helpers.kernel_child import run_kernel
from probes.helpers.virtualization import detect as detect_virtualization

LOAD_SECONDS = 1.0
LOAD_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class PcieRecord:
    gpus: tuple[GpuLink, ...]
    load_reason: str | None  # why the link was not read under load (level, failure)


def _loaded(host: Host, index: int) -> dict:
    """Generation and width seen while copying to GPU ``index`` (a child process)."""
    def run() -> dict:
        return run_kernel("gpu_link_load", "--device", str(index), "--seconds", str(LOAD_SECONDS),
                          timeout_s=LOAD_TIMEOUT_S)
    return host.measure(f"gpu.pcie.load.{index}", run)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> PcieRecord:
    count = gpu_count(host)
    host_vm = detect_virtualization(host).virtual_machine
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
    return PcieRecord(gpus=tuple(read_link(host, i, loads[i], host_vm) for i in range(count)),
                      load_reason=load_reason)


def summary(record: PcieRecord) -> str:
    parts = []
    for g in record.gpus:
        width = g.width_loaded or g.width_current
        if g.under_load:
            part = t("GPU{index} Gen{gen} x{width} of Gen{gen_max} x{width_max}", index=g.index,
                     gen=g.gen_loaded or "?", width=width or "?", gen_max=g.gen_max or "?",
                     width_max=g.width_max or "?")
        else:  # an idle link trains down: its generation at rest is not the one in use
            part = t("GPU{index} x{width} of Gen{gen_max} x{width_max}, idle", index=g.index,
                     width=width or "?", gen_max=g.gen_max or "?", width_max=g.width_max or "?")
        if not g.slot_known:
            part += t(" (slot width unknown)")
        parts.append(part)
    return t("; ").join(parts) + ("" if record.load_reason is None else t(" (at rest)"))
