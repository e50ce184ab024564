"""Which logical AMD GPUs are partitions of one physical GPU, and the mode they are in.

An Instinct GPU in a compute partition mode other than SPX shows as several logical GPUs:
an MI300X in CPX mode as eight, one per XCD (AMD Instinct MI300X GPU partitioning overview,
instinct.docs.amd.com/projects/amdgpu-docs/en/latest/gpu-partitioning/mi300x/overview.html;
the ROCm blog "Applying Compute Partitioning for Workloads on MI300X GPUs": "instead of 1 GPU
it will appear as 8 separate GPUs … up to 64 on a node of 8"). AMD SMI gives each partition
the PCI address of its physical GPU with the partition's number in the function digit
(0000:02:00.1, 0000:02:00.2; no such PCI function exists: ROCm/rocm_smi_lib#208,
ROCm/rocm-systems#5805), so the address without its function names the physical GPU.

Before ROCm/rocm-systems#8491 amdsmi answered the partition mode on each physical GPU's
first partition only (N/A on the other 56 of 64 in CPX): the mode of a physical GPU is the
one any of its partitions reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Partitions:
    logical_gpus: int  # what amdsmi (and HIP) enumerate
    physical_gpus: int | None  # distinct PCI addresses without the function; None: a bus id missing
    partitions_per_gpu: int | None  # logical GPUs on the physical GPU that has most
    uneven: bool  # physical GPUs with different partition counts (a mode set on some only)
    compute_partition: str | None  # the mode(s) the physical GPUs report: "CPX", "SPX, CPX"


def physical_of(bus_id: str | None) -> str | None:
    """``0000:0c:00.3`` → ``0000:0c:00``: the physical GPU a partition belongs to."""
    if not bus_id or "." not in bus_id:
        return None
    return bus_id.rsplit(".", 1)[0]


def partitions(gpus: Iterable[tuple[str | None, str | None]]) -> Partitions:
    """From each logical GPU's (bus id, compute partition mode as amdsmi answered it)."""
    rows = list(gpus)
    groups: dict[str, list[str | None]] = {}
    for bus_id, mode in rows:
        physical = physical_of(bus_id)
        if physical is not None:
            groups.setdefault(physical, []).append(mode)
    complete = len(groups) > 0 and sum(len(g) for g in groups.values()) == len(rows)
    sizes = {len(g) for g in groups.values()}
    modes = sorted({next((m for m in g if m), None) or "" for g in groups.values()} - {""})
    return Partitions(
        logical_gpus=len(rows), physical_gpus=len(groups) if complete else None,
        partitions_per_gpu=max(sizes) if complete else None, uneven=complete and len(sizes) > 1,
        compute_partition=", ".join(modes) or None)
