"""What the AMD probes share: counting the GPUs amdsmi sees, and typed amdsmi reads that
record why a value is absent (the AMD twin of probes/helpers/gpu_common.py).

All AMD SMI reads go through ``host.amdsmi`` (live: doctor/seam/amdsmi.py; recorded:
amdsmi.json). amdsmi's Python bindings answer ``"N/A"`` for a value the board does not
report (a maximum unsigned integer in the C struct); that is ``None`` here with the reason
"not-supported", never the string.
"""

from __future__ import annotations

from typing import Any, Callable

from doctor.i18n import t, translated
from doctor.model import Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers import amd_cli
from probes.helpers.amd_cli import Absent
from probes.helpers.gpu_common import reason_of

# doctor/seam/amdsmi.py's NO_LIBRARY (probes do not import the seam's modules)
NO_LIBRARY = ("no AMD driver / ROCm library: libamd_smi.so not found; install ROCm's "
              "amd-smi-lib (or set ROCM_PATH), or run where the AMD GPU is")

AMD_VENDOR = "0x1002"
GPU_CLASSES = ("0x03", "0x12")  # display controller, processing accelerator (MI300X)
MAX_PCI_FUNCTIONS = 4096
COUNT_CALL = "amdsmi_get_processor_handles"  # the seam answers the number of GPUs
NOT_REPORTED = "N/A"  # amdsmi's own word for a value the board does not give
MAX_WORD = 64  # a version or part number: amdsmi's C strings are at most 64 bytes (AMDSMI_MAX_STRING_LENGTH)


def amd_pci_gpus(host: Host) -> int:
    """AMD display or accelerator functions on the PCI bus (``/sys/bus/pci/devices/*/{vendor,
    class}``); Skip, for one reason shared by the amd.* probes, when there is none."""
    try:
        devices = host.list_dirs("/sys/bus/pci/devices")
    except HostReadError:
        devices = []
    count = 0
    for bdf in devices[:MAX_PCI_FUNCTIONS]:
        try:
            vendor = host.read_text(f"/sys/bus/pci/devices/{bdf}/vendor").strip()
            klass = host.read_text(f"/sys/bus/pci/devices/{bdf}/class").strip()
        except HostReadError:
            continue
        count += vendor == AMD_VENDOR and klass.startswith(GPU_CLASSES)
    if count == 0:
        raise Skip(t("no AMD GPU on the PCI bus (vendor 0x1002)"))
    return count


Query = Callable[..., Any]  # (amdsmi call name, *args) -> its answer


def amd_count(host: Host) -> int:
    """How many GPUs amdsmi (or amd-smi's text) sees; see ``amd_source``."""
    return amd_source(host)[0]


def amd_source(host: Host) -> tuple[int, Query, amd_cli.CliSource | None]:
    """How many GPUs there are and where to read them: AMD SMI's library (``host.amdsmi``),
    else, when it does not load, the ``amd-smi`` command's text (its CliSource returned).
    Skip when there is no AMD GPU on the PCI bus (the reason the other amd.* probes give),
    neither source answers, or the source sees none."""
    amd_pci_gpus(host)
    cli = None
    query: Query = host.amdsmi
    try:
        count = host.amdsmi(COUNT_CALL)
    except HostReadError as exc:
        if reason_of(exc) not in ("library-missing", "no-permission"):
            raise
        # the seam's advice, or a recording's "recorded" (a capture where it failed)
        said = exc.detail if exc.detail and exc.detail != "recorded" else NO_LIBRARY
        cli, why = amd_cli.read(host)
        if cli is None:
            raise Skip(t("{library}; the amd-smi command gave nothing to read either: {why}",
                         library=translated(said), why=why)) from None
        count, query = cli.count, cli.query
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise HostReadError(f"amdsmi {COUNT_CALL}()", "failed", f"expected a GPU count, got {count!r}")
    if count == 0:
        raise Skip(t("amdsmi is loaded but sees no AMD GPU (`amd-smi list` lists none)"))
    return count, query, cli


class AmdReader:
    """Typed amdsmi reads for one probe; ``missing`` collects ``field -> reason``."""

    def __init__(self, host: Host, query: Query | None = None) -> None:
        self.host = host
        self.query: Query = query or host.amdsmi  # amd-smi's text answers through a CliSource
        self.missing: dict[str, str] = {}

    def raw(self, field: str, name: str, *args: int | str) -> Any:
        try:
            value = self.query(name, *args)
        except HostReadError as exc:
            self.missing[field] = reason_of(exc)
            return None
        if isinstance(value, Absent):
            self.missing[field] = value.reason
            return None
        if value == NOT_REPORTED:
            self.missing[field] = "not-supported"
            return None
        return value

    def mapping(self, field: str, name: str, *args: int | str) -> dict | None:
        value = self.raw(field, name, *args)
        if value is None or isinstance(value, dict):
            return value
        self.missing[field] = f"wrong type: expected an object, got {type(value).__name__}"
        return None

    def sequence(self, field: str, name: str, *args: int | str) -> list | None:
        value = self.raw(field, name, *args)
        if value is None or isinstance(value, list):
            return value
        self.missing[field] = f"wrong type: expected a list, got {type(value).__name__}"
        return None

    def integer(self, field: str, name: str, *args: int | str) -> int | None:
        return self.number_of(field, self.raw(field, name, *args))

    def text(self, field: str, name: str, *args: int | str) -> str | None:
        value = self.raw(field, name, *args)
        if value is None or isinstance(value, str):
            return value or None
        self.missing[field] = f"wrong type: expected a string, got {type(value).__name__}"
        return None

    def number_of(self, field: str, value: Any, kinds: tuple = (int,)) -> Any:
        """``value`` if it is a number of ``kinds`` (never a bool), else None, noted."""
        if value is None:
            return None
        if isinstance(value, Absent):
            self.missing[field] = value.reason
            return None
        if value == NOT_REPORTED:
            self.missing[field] = "not-supported"
            return None
        if isinstance(value, kinds) and not isinstance(value, bool):
            return value
        self.missing[field] = f"wrong type: expected a number, got {type(value).__name__}"
        return None

    def item(self, field: str, mapping: dict | None, key: str, kinds: tuple = (int,)) -> Any:
        """``mapping[key]`` as a number, else None with the reason noted."""
        if mapping is None:
            return None
        if key not in mapping:
            self.missing[field] = f"not reported: no {key}"
            return None
        return self.number_of(field, mapping[key], kinds)

    def word(self, field: str, mapping: dict | None, key: str) -> str | None:
        """``mapping[key]`` as a short printable string (a version, a part number), else None
        with the reason noted: a recording's text is hostile, so it is bounded and checked."""
        if mapping is None:
            return None
        value = mapping.get(key)
        if value is None and key not in mapping:
            self.missing[field] = f"not reported: no {key}"
            return None
        if isinstance(value, Absent):
            self.missing[field] = value.reason
            return None
        if not isinstance(value, str):
            self.missing[field] = f"wrong type: expected a string, got {type(value).__name__}"
            return None
        value = value.strip()
        if value in ("", NOT_REPORTED):  # amd-smi's CLI prints a blank one as N/A too
            self.missing[field] = "not-supported"
            return None
        if len(value) > MAX_WORD or not value.isprintable():
            self.missing[field] = f"not a version: {value[:MAX_WORD]!r}"
            return None
        return value

    def prefixed(self, prefix: str) -> dict[str, str]:
        return {f"{prefix}{k}": v for k, v in self.missing.items()}
