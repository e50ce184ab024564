"""The memory a model is sized against on this host (or a recorded one): GPU 0's total from
NVML where there is a GPU; where there is none (no NVML library or driver, or no device),
the host's available memory, ``MemAvailable`` of ``/proc/meminfo`` (else ``MemTotal``), for
a CPU engine. One answer for ``llm-doctor plan`` and engine.capacity (issue 28: a CPU
llama.cpp that plan sized could not be sized by the scan). Unit: bytes. No privilege.
Manual equivalent: ``nvidia-smi --query-gpu=memory.total --format=csv`` or ``free -b``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from doctor.i18n import t
from doctor.seam.host import Host, HostReadError, Reason

# NVML's answers for a host with no GPU to plan for (doctor/seam/nvml.py maps them)
NO_GPU = {Reason.LIBRARY_MISSING.value}


class MemoryFigureError(Exception):
    """No memory figure to size against; the message says why (and ``hint`` what to do)."""


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    total_bytes: int
    kind: str  # "gpu" or "host"
    source: str  # where it came from, for people
    share: float  # the default share of it an engine takes: 0.9 of a GPU, all of the host's


def host_memory(host: Host, parse_meminfo: Callable[[str], dict[str, int]],
                hint: str) -> MemoryBudget:
    """The budget as the module says; ``parse_meminfo`` reads /proc/meminfo's text into kB
    (probes/host/memory.py's, which this layer may not import); MemoryFigureError ending
    with ``hint`` when there is no figure."""
    try:
        count = host.nvml("nvmlDeviceGetCount")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise MemoryFigureError(t("NVML nvmlDeviceGetCount answered {answer}, not a count "
                                      "of GPUs; {hint}", answer=f"{count!r:.40}", hint=hint))
        if count:
            info = host.nvml("nvmlDeviceGetMemoryInfo", 0)
            total = info.get("total") if isinstance(info, dict) else None
            if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
                raise MemoryFigureError(t("NVML nvmlDeviceGetMemoryInfo(0) answered {answer}, "
                                          "not a memory size; {hint}",
                                          answer=f"{info!r:.60}", hint=hint))
            return MemoryBudget(total, "gpu", f"GPU 0's total from NVML, 1 of {count} GPUs; "
                                "--gpu-memory for all the cards a model is split over", 0.9)
        no_gpu = "NVML finds no GPU"
    except HostReadError as exc:
        reason = getattr(exc.reason, "value", exc.reason)
        if reason not in NO_GPU:  # a GPU that will not answer is not a host without one
            raise MemoryFigureError(t("no GPU memory figure: {error}; {hint}", error=exc,
                                      hint=hint)) from None
        no_gpu = "no GPU (NVML: no library or driver)"
    try:
        kb = parse_meminfo(host.read_text("/proc/meminfo"))
    except (HostReadError, ValueError) as exc:
        raise MemoryFigureError(t("no GPU and no host memory figure: {error}; {hint}",
                                  error=exc, hint=hint)) from None
    for key, said in (("MemAvailable", "available"), ("MemTotal", "total")):
        if kb.get(key):
            return MemoryBudget(kb[key] * 1024, "host",
                                f"{no_gpu}; the host's {said} memory, {key} of /proc/meminfo, "
                                "for a CPU engine", 1.0)
    raise MemoryFigureError(t("no GPU, and /proc/meminfo gives no MemAvailable or MemTotal; "
                              "{hint}", hint=hint))
