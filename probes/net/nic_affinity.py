"""net.nic_affinity: the RDMA NIC nearest each GPU, by PCIe path.

NCCL gives each GPU the NIC nearest to it (src/graph/search.cc, by the path types of
src/graph/topo.h) and uses GPUDirect RDMA only while that NIC is no farther than
NCCL_NET_GDR_LEVEL, by default PXB (src/graph/paths.cc, ncclTopoCheckGdr: ``int netGdrLevel
= PATH_PXB``; its log says "GPU Direct RDMA Disabled for GPU … (distance … > …)"). A GPU
whose nearest RDMA NIC is across the inter-socket link (SYS) sends every inter-node byte
through UPI / Infinity Fabric and host memory; one at PHB or NODE stays on its socket but
past that default. The slot the card or the NIC sits in, not the software, sets it.

Reads (world-readable, no root): each GPU's bus id from gpu.inventory's record (handed by
the runner; else NVML ``nvmlDeviceGetPciInfo``, probes/helpers/gpu_buses.py), ``/sys/class/infiniband/<dev>/device`` (each RDMA device's PCI function),
``/sys/bus/pci/devices`` (each function's place in the PCIe tree), ``…/numa_node``; the level
between a GPU and a NIC is probes/helpers/pci_path.py's. Manual equivalent: ``nvidia-smi topo
-m`` (its NIC columns, the "NIC Legend" naming them) and ``lspci -tv``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host
from probes.helpers.gpu_buses import buses
from probes.helpers.pci_path import LEVELS, level, nearer
from probes.helpers.rdma_pci import PciPlace, device_bdf, place_of, rdma_devices
from probes.helpers.virtualization import detect


@dataclass(frozen=True, slots=True)
class Nic:
    name: str  # mlx5_0, as /sys/class/infiniband names it
    bdf: str | None  # its PCI function: "0000:17:00.0"; None for a software device (rxe0)
    numa_node: int | None  # /sys/bus/pci/devices/<bdf>/numa_node; None: -1 or unread
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class GpuNic:
    gpu: int  # NVML index
    bdf: str | None  # nvmlDeviceGetPciInfo busId, as sysfs names it
    numa_node: int | None
    nearest_nic: str | None  # the nearest RDMA NIC (first by name among equals)
    level: str | None  # PIX | PXB | PHB | NODE | SYS between them; None: not known
    across_sockets: bool  # the nearest NIC is SYS away: through the inter-socket link
    # the nearest NIC is past NCCL's default NCCL_NET_GDR_LEVEL (PXB): PHB, NODE or SYS
    beyond_gdr_default: bool
    levels: dict[str, str]  # every NIC with a known level: name -> level
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class NicAffinityRecord:
    nics: tuple[Nic, ...]
    gpus: tuple[GpuNic, ...]
    gpus_far: tuple[int, ...]  # GPUs whose nearest NIC is across the socket link
    on_vm: bool | None  # a VM: its PCIe tree is the hypervisor's picture, no slot to move
    missing: dict[str, str]


def nearest(gpu: int, gpu_place: PciPlace, nics: list[tuple[Nic, PciPlace]]) -> GpuNic:
    """One GPU against every NIC: the judging part, a function of places alone."""
    levels: dict[str, str] = {}
    best: tuple[str | None, str | None] = (None, None)
    missing = dict(gpu_place.missing)
    for nic, place in nics:
        if gpu_place.sysfs_dir is None or place.sysfs_dir is None:
            continue
        found = level(gpu_place.sysfs_dir, place.sysfs_dir, gpu_place.numa_node, place.numa_node)
        if found is None:
            missing[f"level.{nic.name}"] = "NUMA node of one side unknown"
            continue
        levels[nic.name] = found
        if best[1] is None or nearer(found, best[1]):
            best = (nic.name, found)
    if best[1] is None:
        missing.setdefault("level", "no NIC's PCI place known" if gpu_place.sysfs_dir
                           else missing.get("sysfs_dir", "GPU's PCI place unknown"))
    return GpuNic(gpu=gpu, bdf=gpu_place.bdf, numa_node=gpu_place.numa_node,
                  nearest_nic=best[0], level=best[1], across_sockets=best[1] == "SYS",
                  beyond_gdr_default=best[1] in ("PHB", "NODE", "SYS"),
                  levels=levels, missing=missing)


def _nics(host: Host, names: tuple[str, ...]) -> list[tuple[Nic, PciPlace]]:
    out = []
    for name in names:
        bdf, why = device_bdf(host, name)
        place = place_of(host, bdf)
        missing = dict(place.missing)
        if why:
            missing["bdf"] = why
        out.append((Nic(name, bdf, place.numa_node, missing), place))
    return out


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> NicAffinityRecord:
    found = rdma_devices(host)
    if not found.names:
        raise Skip(t("no RDMA device ({reason}): no NIC to place", reason=found.reason or ""))
    gpu_buses = buses(host, inputs)  # Skip with NVML's reason when there is no NVIDIA GPU
    nics = _nics(host, found.names)
    if not any(place.sysfs_dir for _, place in nics):
        raise Skip(t("no RDMA device on the PCI bus (software devices only: {names})",
                     names=", ".join(found.names)))
    gpus = []
    for gpu in gpu_buses:
        place = place_of(host, gpu.bdf)
        gpus.append(nearest(gpu.index, PciPlace(place.bdf, place.sysfs_dir, place.numa_node,
                                                {**gpu.missing, **place.missing}), nics))
    vm = detect(host)
    return NicAffinityRecord(
        nics=tuple(n for n, _ in nics), gpus=tuple(gpus),
        gpus_far=tuple(g.gpu for g in gpus if g.across_sockets),
        on_vm=vm.virtual_machine, missing=dict(vm.missing))


def summary(record: NicAffinityRecord) -> str:
    known = [g for g in record.gpus if g.level]
    if not known:
        return t("{gpus} GPU(s), {nics} RDMA NIC(s): no GPU's nearest NIC known",
                 gpus=len(record.gpus), nics=len(record.nics))
    worst = max((g.level for g in known), key=lambda lv: LEVELS.index(lv) if lv in LEVELS else 0)
    text = t("{gpus} GPU(s), {nics} RDMA NIC(s): nearest NIC at worst {level}",
             gpus=len(record.gpus), nics=len(record.nics), level=worst)
    if record.gpus_far:
        text += t("; GPU {ids} across the socket link from every NIC",
                  ids=",".join(str(i) for i in record.gpus_far))
    return text
