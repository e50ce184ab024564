"""The NVIDIA GPUs' count and PCI bus ids: gpu.inventory's record when the runner hands it
over (``after=("gpu.inventory",)``), else read here from NVML as gpu.inventory reads them.

The record's type lives in a probe module, which no probe may import (docs/probes.md); its
shape is named here instead (``InventoryShape``, checked by attribute on the record the
runner hands over), and a record of another shape is read as absent, so the reads are made
here. Source: NVML ``nvmlDeviceGetCount``, ``nvmlDeviceGetPciInfo`` (``busId``). No root.
Manual equivalent: ``nvidia-smi --query-gpu=index,pci.bus_id --format=csv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from doctor.inputs import Inputs
from doctor.seam.host import Host
from probes.helpers.gpu_common import Reader, gpu_count, pci_bdf

INVENTORY = "gpu.inventory"
MAX_GPUS = 64  # NVML counts at most 64 in a recording; a bound on reads live


@runtime_checkable
class InventoryShape(Protocol):
    """What is read of gpu.inventory's record (probes/gpu/inventory.py)."""

    gpu_count: int
    gpus: tuple


@dataclass(frozen=True, slots=True)
class GpuBus:
    index: int
    bdf: str | None  # "0000:18:00.0", as sysfs names it; None with the reason in missing
    missing: dict[str, str]


def count_of(host: Host, inputs: Inputs) -> int:
    """How many GPUs: the inventory's count, else NVML's (Skip where there is none)."""
    record = inputs.get(INVENTORY, InventoryShape)  # type: ignore[type-abstract]
    if record is not None and isinstance(record.gpu_count, int):
        return record.gpu_count
    return gpu_count(host)


def buses(host: Host, inputs: Inputs) -> tuple[GpuBus, ...]:
    """Each GPU's bus id, in NVML's order; Skip (from gpu_count) where there is no GPU."""
    record = inputs.get(INVENTORY, InventoryShape)  # type: ignore[type-abstract]
    if record is not None:
        out: list[GpuBus] = []
        for gpu in record.gpus[:MAX_GPUS]:
            bus_id = getattr(gpu, "bus_id", None)
            why = dict(getattr(gpu, "missing", {}) or {})
            bdf = pci_bdf(bus_id) if isinstance(bus_id, str) else None
            index = getattr(gpu, "index", None)
            out.append(GpuBus(index if isinstance(index, int) else len(out), bdf,
                              {} if bdf else {"bdf": str(why.get("bus_id", "not a PCI bus id"))}))
        return tuple(out)
    found = []
    for index in range(min(gpu_count(host), MAX_GPUS)):
        r = Reader(host)
        pci = r.mapping("bdf", "nvmlDeviceGetPciInfo", index)
        bus_id = r.item("bdf", pci, "busId", str)
        bdf = pci_bdf(bus_id)
        if bdf is None and "bdf" not in r.missing:
            r.missing["bdf"] = f"not a PCI bus id: {bus_id!r:.40}"
        found.append(GpuBus(index, bdf, r.missing))
    return tuple(found)
