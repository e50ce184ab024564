"""Each accelerator's busy figure at the scan, whatever its vendor, and the pids that hold it.

NVIDIA: NVML ``nvmlDeviceGetUtilizationRates`` ``gpu`` read now (probes/helpers/gpu_busy.py),
the holders from NVML's compute-process list. AMD: amd.gpu's record (``util_gpu_pct``, AMD
SMI ``amdsmi_get_gpu_activity`` gfx_activity) and its process list. Huawei Ascend:
npu.devices' record (``aicore_util_pct``, npu-smi's AICore(%)) and its process list. The
AMD and Ascend records are read by shape, a probe imports no other probe
(tests/test_import_graph.py). A vendor's figure is kept only when every one of its devices
gave one: the device left unread could be the idle one, or the busy one. Units: percent.
No privilege needed. Manual equivalent: ``nvidia-smi --query-gpu=index,utilization.gpu
--format=csv``, ``amd-smi metric -u``, ``npu-smi info``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from doctor.i18n import t
from doctor.inputs import Inputs
from doctor.seam.host import Host
from doctor.values import non_negative
from probes.helpers import gpu_topology as topology
from probes.helpers.gpu_busy import gpu_utilisation
from probes.helpers.lineage import lineage

AMD, NPU = "amd.gpu", "npu.devices"


@dataclass(frozen=True, slots=True)
class Accelerator:
    vendor: str  # nvidia, amd, huawei
    index: int  # as the vendor's tool numbers it (nvidia-smi, amd-smi, npu-smi's table)
    busy_pct: float  # NVIDIA utilization.gpu, AMD gfx_activity, Ascend AICore(%)


@dataclass(frozen=True, slots=True)
class Busy:
    devices: tuple[tuple[Accelerator, frozenset[int]], ...]  # each device and the pids holding it
    why: str | None  # why no device's figure was read (each vendor's word); None when one was


def _percent(value: Any) -> float | None:
    number = non_negative(value)
    return number if number is not None and number <= 100 else None


def _from_record(record: Any, vendor: str, probe: str, list_name: str, field: str,
                 index_of: str) -> tuple[list[tuple[Accelerator, frozenset[int]]], str]:
    """A vendor's devices from its probe's record; ([], why) when it holds no whole reading."""
    items = getattr(record, list_name, None)
    if not items:
        return [], t("{probe} gave no device", probe=probe)
    holders: dict[int, set[int]] = {}
    for p in getattr(record, "processes", ()) or ():
        where, pid = getattr(p, index_of, None), getattr(p, "pid", None)
        if isinstance(where, int) and isinstance(pid, int):
            holders.setdefault(where, set()).add(pid)
    out = []
    for item in items:
        busy = _percent(getattr(item, field, None))
        if busy is None:
            return [], t("{probe}: device {index} gave no {field}", probe=probe,
                         index=getattr(item, "index", "?"), field=field)
        out.append((Accelerator(vendor, item.index, busy), frozenset(holders.get(item.index, ()))))
    return out, ""


def read(host: Host, inputs: Inputs) -> Busy:
    """Every accelerator's busy figure now (NVIDIA) or at its probe's read (AMD, Ascend)."""
    devices: list[tuple[Accelerator, frozenset[int]]] = []
    util, why, gpus = gpu_utilisation(host)
    whys = [t("NVIDIA: {why}", why=why or t("not read"))] if util is None else []
    if util is not None and gpus:
        held = topology.gpu_pids(host, gpus)
        devices += [(Accelerator("nvidia", i, pct), frozenset(held.get(i, ())))
                    for i, pct in sorted(util.items())]
    for vendor, probe, list_name, field, index_of in (
            ("amd", AMD, "gpus", "util_gpu_pct", "gpu"),
            ("huawei", NPU, "chips", "aicore_util_pct", "index")):
        record = inputs.records.get(probe)
        if record is None:
            whys.append(t("{probe}: no record", probe=probe))
            continue
        found, why_not = _from_record(record, vendor, probe, list_name, field, index_of)
        devices += found
        if not found:
            whys.append(why_not)
    return Busy(tuple(devices), None if devices else t("; ").join(whys))


def of_engine(host: Host, busy: Busy, root: int | None) -> tuple[tuple[Accelerator, ...], str]:
    """(the devices an engine's process tree holds, "engine"), else (every device, "host"):
    a container that sees other pids, or an engine whose workers hold no listed context."""
    if root:
        mine = tuple(d for d, pids in busy.devices
                     if any(root in lineage(host, pid) for pid in sorted(pids)))
        if mine:
            return mine, "engine"
    return tuple(d for d, _ in busy.devices), "host"
