"""What every gpu.* probe shares: finding the GPUs, and typed NVML reads that record why a
value is absent.

All NVML reads go through ``host.nvml`` (live: doctor/seam/nvml.py; recorded: nvml.json). A
value NVML does not give (not supported on this board, no permission, a driver too old
for the call, a recording holding the wrong type) is ``None``, and its reason goes into
the record's ``missing`` mapping under the field's name; it never sinks the probe.
"""

from __future__ import annotations

from typing import Any

from doctor.seam.host import Host, HostReadError
from doctor.model import Skip

NO_DRIVER = ("NVIDIA driver not loaded: libnvidia-ml.so.1 not found; install the driver or "
             "run where the GPU is")


def reason_of(exc: HostReadError) -> str:
    """The reason as its plain string ("not-supported"), whether an enum or a str."""
    return str(getattr(exc.reason, "value", exc.reason))


def gpu_count(host: Host) -> int:
    """How many GPUs NVML sees (``nvmlDeviceGetCount``); Skip when there is no driver or GPU."""
    try:
        count = host.nvml("nvmlDeviceGetCount")
    except HostReadError as exc:
        if reason_of(exc) == "library-missing":
            # doctor/seam/nvml.py's advice (driver absent, kernel module not loaded, …), or the
            # replay's "not loaded in this recording"; NO_DRIVER when neither says more
            detail = exc.detail if exc.detail and exc.detail != "recorded" else NO_DRIVER
            raise Skip(detail) from None
        raise
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise HostReadError("nvml nvmlDeviceGetCount()", "failed",
                            f"expected a GPU count, got {count!r}")
    if count == 0:
        raise Skip("NVML is loaded but sees no NVIDIA GPU (`nvidia-smi -L` lists none)")
    return count


class Reader:
    """Typed NVML reads for one probe; ``missing`` collects ``field -> reason``."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.missing: dict[str, str] = {}

    def raw(self, field: str, name: str, *args: int | str) -> Any:
        try:
            return self.host.nvml(name, *args)
        except HostReadError as exc:
            self.missing[field] = reason_of(exc)
            return None

    def _typed(self, field: str, value: Any, types: tuple[type, ...], what: str) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) and bool not in types:
            value = "bool"  # falls to the wrong-type branch: True is not a temperature
        if isinstance(value, types):
            return value
        self.missing[field] = f"wrong type: expected {what}, got {type(value).__name__}"
        return None

    def integer(self, field: str, name: str, *args: int | str) -> int | None:
        return self._typed(field, self.raw(field, name, *args), (int,), "an integer")

    def number(self, field: str, name: str, *args: int | str) -> float | None:
        value = self._typed(field, self.raw(field, name, *args), (int, float), "a number")
        return None if value is None else float(value)

    def text(self, field: str, name: str, *args: int | str) -> str | None:
        return self._typed(field, self.raw(field, name, *args), (str,), "a string")

    def mapping(self, field: str, name: str, *args: int | str) -> dict | None:
        return self._typed(field, self.raw(field, name, *args), (dict,), "an object")

    def sequence(self, field: str, name: str, *args: int | str) -> list | None:
        return self._typed(field, self.raw(field, name, *args), (list,), "a list")

    def item(self, field: str, mapping: dict | None, key: str, kind: type = int) -> Any:
        """``mapping[key]`` of the wanted type, else None with the reason noted."""
        if mapping is None:
            return None
        value = mapping.get(key)
        if isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool):
            return value
        self.missing[field] = f"wrong type: {key} is {type(value).__name__}"
        return None

    def compute_processes(self, index: int) -> list[dict]:
        """GPU ``index``'s compute processes (``nvmlDeviceGetComputeRunningProcesses``): the
        entries with an integer pid; one without is noted under ``processes`` and left out."""
        out = []
        found = self.sequence("processes", "nvmlDeviceGetComputeRunningProcesses", index)
        for entry in found or []:
            pid = entry.get("pid") if isinstance(entry, dict) else None
            if isinstance(pid, int) and not isinstance(pid, bool):
                out.append(entry)
            else:
                self.missing["processes"] = ("wrong type: a process entry without a pid: "
                                             f"{entry!r:.60}")
        return out

    def prefixed(self, prefix: str) -> dict[str, str]:
        """The reasons noted since, keys prefixed (``gpu0.temp_c``)."""
        return {f"{prefix}{k}": v for k, v in self.missing.items()}


def mib(value: int | None) -> int | None:
    return None if value is None else value // (1024 * 1024)


def watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else round(milliwatts / 1000, 1)
