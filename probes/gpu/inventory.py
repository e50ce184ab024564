"""gpu.inventory: which NVIDIA GPUs this host has, their driver, memory, persistence and MIG.

Source: NVML (``nvmlSystemGetDriverVersion``, ``nvmlSystemGetCudaDriverVersion``,
``nvmlDeviceGetName/UUID/PciInfo/MemoryInfo/PersistenceMode/MigMode/ComputeMode``), through
``host.nvml``. Memory in MiB (NVML gives bytes). No root needed. Manual equivalent:
``nvidia-smi -q -d MEMORY,COMPUTE`` and ``nvidia-smi --query-gpu=name,uuid,pci.bus_id,
persistence_mode,mig.mode.current --format=csv``. Without the driver the probe is skipped
with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host
from doctor.model import ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.i18n import t
from probes.helpers.gpu_common import cuda_version_text, COMPUTE_MODES, Reader, gpu_count, mib


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str | None  # nvmlDeviceGetName: "NVIDIA H100 80GB HBM3"
    uuid: str | None  # nvmlDeviceGetUUID: "GPU-…"
    bus_id: str | None  # nvmlDeviceGetPciInfo busId: "00000000:18:00.0"
    memory_total_mib: int | None  # nvmlDeviceGetMemoryInfo total
    persistence_mode: bool | None  # nvmlDeviceGetPersistenceMode (None on Windows/WSL)
    mig_enabled: bool | None  # nvmlDeviceGetMigMode current (None: the GPU has no MIG)
    mig_pending: bool | None  # the mode after the next GPU reset
    compute_mode: str | None  # default | exclusive-process | prohibited
    missing: dict[str, str]  # field -> why NVML gave no value


@dataclass(frozen=True, slots=True)
class GpuInventoryRecord:
    gpu_count: int
    driver_version: str | None  # nvmlSystemGetDriverVersion: "550.54.15"
    cuda_driver_version: str | None  # nvmlSystemGetCudaDriverVersion 12040 -> "12.4"
    gpus: tuple[GpuInfo, ...]
    missing: dict[str, str]
    # the GPUs' nvmlDeviceGetName, "+"-joined in sorted order on a host that mixes models
    # (it is then a fleet group of its own); None when no GPU answered a name
    gpu_model: str | None = None


def _flag(value: int | None) -> bool | None:
    return None if value is None else bool(value)


def read_gpu(host: Host, index: int) -> GpuInfo:
    r = Reader(host)
    pci = r.mapping("bus_id", "nvmlDeviceGetPciInfo", index)
    memory = r.mapping("memory_total_mib", "nvmlDeviceGetMemoryInfo", index)
    mig = r.mapping("mig_enabled", "nvmlDeviceGetMigMode", index)
    compute = r.integer("compute_mode", "nvmlDeviceGetComputeMode", index)
    return GpuInfo(
        index=index,
        name=r.text("name", "nvmlDeviceGetName", index),
        uuid=r.text("uuid", "nvmlDeviceGetUUID", index),
        bus_id=r.item("bus_id", pci, "busId", str),
        memory_total_mib=mib(r.item("memory_total_mib", memory, "total")),
        persistence_mode=_flag(r.integer("persistence_mode", "nvmlDeviceGetPersistenceMode", index)),
        mig_enabled=_flag(r.item("mig_enabled", mig, "current")),
        mig_pending=_flag(r.item("mig_pending", mig, "pending")),
        compute_mode=None if compute is None else COMPUTE_MODES.get(compute, f"mode {compute}"),
        missing=r.missing,
    )


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> GpuInventoryRecord:
    count = gpu_count(host)
    r = Reader(host)
    driver = r.text("driver_version", "nvmlSystemGetDriverVersion")
    cuda = r.integer("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
    gpus = tuple(read_gpu(host, i) for i in range(count))
    return GpuInventoryRecord(
        gpu_count=count,
        driver_version=driver,
        cuda_driver_version=cuda_version_text(cuda),
        gpus=gpus,
        missing=r.missing,
        gpu_model="+".join(sorted({g.name for g in gpus if g.name})) or None,
    )


def summary(record: GpuInventoryRecord) -> str:
    names = sorted({g.name or t("unknown GPU") for g in record.gpus})
    return t("{count}x {names}, driver {driver}, CUDA {cuda}", count=record.gpu_count,
             names=t(" / ").join(names), driver=record.driver_version or "?",
             cuda=record.cuda_driver_version or "?")
