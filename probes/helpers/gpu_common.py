"""What every gpu.* probe shares: finding the GPUs, and typed NVML reads that record why a
value is absent.

All NVML reads go through ``host.nvml`` (live: doctor/seam/nvml.py; recorded: nvml.json). A
value NVML does not give (not supported on this board, no permission, a driver too old
for the call, a recording holding the wrong type) is ``None``, and its reason goes into
the record's ``missing`` mapping under the field's name; it never sinks the probe.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from doctor.seam.host import Host, HostReadError
from doctor.model import Skip
from doctor.i18n import lazy, t, translated

# nvmlComputeMode_t (nvml.h); EXCLUSIVE_THREAD (1) is deprecated since CUDA 8
COMPUTE_MODES = {0: "default", 1: "exclusive-thread", 2: "prohibited", 3: "exclusive-process"}

NO_DRIVER = lazy("NVIDIA driver not loaded: libnvidia-ml.so.1 not found; install the driver or "
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
            # the seam's fixed sentences have zh_CN entries (probes_helpers.toml): translated
            detail = translated(exc.detail if exc.detail and exc.detail != "recorded" else NO_DRIVER)
            raise Skip(detail) from None
        raise
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise HostReadError("nvml nvmlDeviceGetCount()", "failed",
                            f"expected a GPU count, got {count!r}")
    if count == 0:
        raise Skip(t("NVML is loaded but sees no NVIDIA GPU (`nvidia-smi -L` lists none)"))
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


# --- NVIDIA functions on the PCI bus, as the kernel sees them (not NVML) ---------------------

PCI_DEVICES = "/sys/bus/pci/devices"  # one link per function, to its /sys/devices/pci… dir
DRIVER_GPUS = "/proc/driver/nvidia/gpus"  # one directory per GPU the nvidia module holds
NVIDIA_VENDOR = 0x10DE
GPU_CLASSES = (0x0300, 0x0302)  # PCI class/subclass: VGA controller, 3D controller
NVSWITCH_CLASS = 0x0680  # bridge, other: how NVSwitches (and only they, from NVIDIA) show
MAX_PCI_FUNCTIONS = 4096  # a bound on what one scan reads; a host has a few hundred
_BDF = re.compile(r"^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


@dataclass(frozen=True, slots=True)
class PciFunction:
    bdf: str  # "0000:18:00.0", as sysfs names it
    class_code: int  # /sys/bus/pci/devices/<bdf>/class: 0x030200
    device_id: int  # …/device: 0x2330 (H100 SXM), 0x22a3 (NVSwitch)


@dataclass(frozen=True, slots=True)
class NvidiaPci:
    gpus: tuple[PciFunction, ...]
    switches: tuple[PciFunction, ...]
    reason: str | None  # why the bus was not read (None: read)


def pci_bdf(bus_id: str | None) -> str | None:
    """NVML's "00000000:18:00.0" (or sysfs's "0000:18:00.0") as sysfs names it; None if
    it is neither."""
    m = _BDF.match((bus_id or "").strip().lower())
    if not m:
        return None
    return f"{int(m.group(1), 16):04x}:{m.group(2)}:{m.group(3)}.{m.group(4)}"


def _hex(host: Host, path: str) -> int | None:
    try:
        return int(host.read_text(path).strip(), 16)
    except (HostReadError, ValueError):
        return None


def _read_pci(host: Host) -> NvidiaPci:
    try:
        links = host.list_links(PCI_DEVICES)
    except HostReadError as exc:
        return NvidiaPci((), (), f"{PCI_DEVICES}: {reason_of(exc)}")
    gpus, switches = [], []
    for name, target in sorted(links.items())[:MAX_PCI_FUNCTIONS]:
        bdf = pci_bdf(name)
        # The function's own directory: read there, not through the link, so a capture
        # keeps the link and the files it points at as sysfs has them.
        where = posixpath.normpath(posixpath.join(PCI_DEVICES, target))
        if bdf is None or not where.startswith("/sys/devices/"):
            continue
        if _hex(host, f"{where}/vendor") != NVIDIA_VENDOR:
            continue
        code = _hex(host, f"{where}/class")
        device = _hex(host, f"{where}/device")
        if code is None:
            continue
        function = PciFunction(bdf, code, device or 0)
        if code >> 8 in GPU_CLASSES:
            gpus.append(function)
        elif code >> 8 == NVSWITCH_CLASS:
            switches.append(function)
    return NvidiaPci(tuple(gpus), tuple(switches), None)


def nvidia_pci(host: Host) -> NvidiaPci:
    """NVIDIA GPUs and NVSwitches on the PCI bus (``/sys/bus/pci/devices/*/{vendor,class,
    device}``), read once per scan. Manual equivalent: ``lspci -d 10de: -nn``."""
    return host.memo("nvidia_pci", lambda: _read_pci(host))


def driver_gpus(host: Host) -> tuple[frozenset[str] | None, str | None]:
    """The bus ids of the GPUs the nvidia kernel module holds (``/proc/driver/nvidia/gpus``:
    in a container, only the GPUs given to it), or None and why not."""
    try:
        names = host.list_dirs(DRIVER_GPUS)
    except HostReadError as exc:
        return None, f"{DRIVER_GPUS}: {reason_of(exc)}"
    return frozenset(b for n in names if (b := pci_bdf(n))), None


def cuda_version_text(code: int | None) -> str | None:
    """NVML's CUDA version integer (1000 x major + 10 x minor) as "12.4"."""
    if code is None or code <= 0:
        return None
    return f"{code // 1000}.{code % 1000 // 10}"
