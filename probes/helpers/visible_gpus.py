"""The GPUs a process may use, from its ``CUDA_VISIBLE_DEVICES``, as NVML indexes.

CUDA reads the variable as a comma-separated list of device indexes (or ``GPU-<uuid>`` and
``MIG-<uuid>`` identifiers) and stops at the first entry it cannot use: ``0,1,x,2`` is
devices 0 and 1; an empty value hides every device. Its indexes follow
``CUDA_DEVICE_ORDER``: ``PCI_BUS_ID`` is NVML's order; the default, ``FASTEST_FIRST``, is the
same order only when every GPU is the same part (ties go by PCI bus id). Sources: the
CUDA C Programming Guide, "CUDA Environment Variables"; probes/helpers/process_env.py for
the values. A list of UUIDs, or an order that cannot be mapped, is not guessed at: the
answer is None and says why, and the caller judges every GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host
from probes.helpers.process_env import env_value


@dataclass(frozen=True, slots=True)
class Visible:
    indexes: tuple[int, ...] | None  # NVML indexes the process may use; None: every GPU
    note: str  # how they were found, or why every GPU is taken


def parse(text: str | None, count: int, order: str | None,
          names: tuple[str | None, ...] = ()) -> Visible:
    """``CUDA_VISIBLE_DEVICES`` = ``text`` on a host of ``count`` GPUs named ``names``."""
    if text is None:
        return Visible(None, "CUDA_VISIBLE_DEVICES not set: every GPU")
    out: list[int] = []
    for part in text.split(","):
        entry = part.strip()
        if entry.startswith(("GPU-", "MIG-")):
            return Visible(None, f"CUDA_VISIBLE_DEVICES={text[:60]} names devices by UUID: "
                                 "every GPU judged")
        if not entry.isdigit() or int(entry) >= count or int(entry) in out:
            break  # CUDA stops at the first entry it cannot use
        out.append(int(entry))
    if out and (order or "FASTEST_FIRST") != "PCI_BUS_ID" and len(set(names)) > 1:
        return Visible(None, f"CUDA_VISIBLE_DEVICES={text[:60]} in CUDA's fastest-first order "
                             "on different GPU models: every GPU judged")
    return Visible(tuple(out), f"CUDA_VISIBLE_DEVICES={text[:60]}: GPU "
                               f"{','.join(map(str, out)) or 'none'}")


def visible(host: Host, pid: int, count: int, names: tuple[str | None, ...] = ()) -> Visible:
    """What process ``pid`` may use (every GPU when its environment cannot be read)."""
    found = env_value(host, pid, "CUDA_VISIBLE_DEVICES")
    if found.reason:
        return Visible(None, f"its environment: {found.reason}: every GPU judged")
    return parse(found.value, count, env_value(host, pid, "CUDA_DEVICE_ORDER").value, names)
