"""How busy each NVIDIA GPU is now, and which of them an engine's processes hold.

Source: NVML ``nvmlDeviceGetUtilizationRates`` ``gpu`` (percent of the last sample period,
1/6 s to 1 s by the board, in which a kernel ran) through the host's NVML funnel, and
NVML's compute-process list (``nvmlDeviceGetComputeRunningProcesses``) with each pid's
lineage for the engine's GPUs. No privilege needed. Manual equivalent:
``nvidia-smi --query-gpu=index,utilization.gpu --format=csv`` and
``nvidia-smi --query-compute-apps=gpu_uuid,pid --format=csv``. Read by engine.frontend
and engine.progress (a probe imports no other probe).
"""

from __future__ import annotations

from doctor.i18n import t
from doctor.model import Skip
from doctor.seam.host import Host, HostReadError, reason_text
from doctor.values import non_negative
from probes.helpers import gpu_topology as topology
from probes.helpers.gpu_common import gpu_count, reason_of


def gpu_utilisation(host: Host) -> tuple[dict[int, float] | None, str | None, int | None]:
    """(each GPU's utilisation %, why absent, GPUs): None unless every GPU was read, since
    one unread could be the busy one."""
    try:
        gpus = gpu_count(host)
    except Skip as exc:  # its message, not str(): a message value keeps its translation
        return None, exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc), None
    except HostReadError as exc:
        return None, exc.text(), None
    seen: dict[int, float] = {}
    why = None
    for index in range(gpus):
        try:
            answer = host.nvml("nvmlDeviceGetUtilizationRates", index)
        except HostReadError as exc:
            why = t("GPU {index}: nvmlDeviceGetUtilizationRates {reason}", index=index,
                    reason=reason_text(reason_of(exc)))
            continue
        value = non_negative(answer.get("gpu")) if isinstance(answer, dict) else None
        if value is None or value > 100:
            why = t("GPU {index}: nvmlDeviceGetUtilizationRates gave {answer}", index=index,
                    answer=repr(str(answer)[:60]))
            continue
        seen[index] = value
    if len(seen) < gpus or not seen:
        return None, why, gpus
    return seen, None, gpus


def engine_gpus(host: Host, root: int, gpus: int) -> tuple[int, ...]:
    """The GPUs where a process of the tree rooted at ``root`` holds a compute context."""
    holders = topology.gpu_pids(host, gpus)
    return tuple(i for i, pids in holders.items()
                 if any(root in topology.lineage(host, pid) for pid in pids))
