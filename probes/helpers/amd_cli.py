"""The ``amd-smi`` command as a second source for amd.gpu, when AMD SMI's Python library does
not load in llm-doctor's own Python (a venv without ROCm's ``amdsmi`` package) but ROCm's
``amd-smi`` CLI is installed (issue 33).

``amd-smi static``, ``amd-smi metric`` and ``amd-smi process`` run once per scan each
(``host.run``, an argv, no shell; a capture keeps their outputs under ``commands/``, a replay
answers them), their text is parsed by probes/helpers/amd_cli_text.py, and
``CliSource.query`` answers the amdsmi calls amd.gpu asks for (``amdsmi_get_gpu_asic_info``
from the static tree's ASIC block, …) in the shapes the library gives, so that one reader
serves both. What the text does not print (xGMI link states, bad pages, violation flags, the
default power cap) is
``Absent(NOT_IN_TEXT)``; "N/A" stays "N/A" (the reader's "not-supported"); a garbled value is
``Absent`` with its reason. Key names: amdsmi_cli/amdsmi_commands.py (ROCm/amdsmi; the JSON
keys are their lowercase); where releases renamed a key (VBIOS -> IFWI, CURRENT_POWER ->
SOCKET_POWER, GFX -> GFX_0) both are read.

Not read: ``--json`` (its layout changed between releases: a list, then ``gpu_data``, values
as ``{"value", "unit"}``; no complete real one was found to test against).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from doctor.seam.host import Host, HostReadError
from probes.helpers.amd_cli_text import NOT_REPORTED, CliTextError, Garbled, Tree, number, parse, word
from probes.helpers.gpu_common import reason_of

# on PATH, else where ROCm installs it (a venv's PATH may lack /opt/rocm/bin)
BINARIES = ("amd-smi", "/opt/rocm/bin/amd-smi")
TIMEOUT_S = 25.0  # eight MI300X take seconds per command; one run each per scan (3 × 25 s)
MAX_PROCESSES = 4096  # per GPU, as the library path reads at most
NOT_IN_TEXT = "not in amd-smi static/metric text"
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class Absent:
    """A value amd-smi's text does not give, and why (the reader notes the reason)."""

    reason: str


def _run(host: Host, argv: tuple[str, ...], empty_ok: bool = False) -> tuple[dict[int, Tree] | None, int, str | None]:
    """(trees by GPU, lines skipped, why not) for one amd-smi command; ``empty_ok``: a
    successful run that prints nothing is no GPU block (amd-smi process with no process)."""
    command = " ".join(argv)
    try:
        out = host.run(argv, timeout_s=TIMEOUT_S)
    except HostReadError as exc:
        return None, 0, f"{command}: {reason_of(exc)}" + (f" ({exc.detail})" if exc.detail else "")
    if empty_ok and out.rc == 0 and not out.stdout.strip():
        return {}, 0, None
    try:
        trees, skipped = parse(out.stdout, command)
    except CliTextError as exc:
        why = str(exc)
        if out.rc != 0:
            said = next((ln.strip() for ln in (out.stderr or "").splitlines() if ln.strip()), "")
            why = f"{command}: exit status {out.rc}" + (f" ({said[:120]})" if said else "")
        return None, 0, why
    return trees, skipped, None


class CliSource:
    """amd-smi's static and metric trees, answering amdsmi calls by name."""

    def __init__(self, static: dict[int, Tree], metric: dict[int, Tree] | None,
                 notes: dict[str, str], process: dict[int, Tree] | None = None) -> None:
        self.static = static
        self.metric = metric or {}
        self.process = process
        self.process_missing = notes.get("process") if process is None else None
        # why no GPU has metric values: the command failed or printed nothing readable
        self.metric_missing = notes.get("metric") if metric is None else None
        self.notes = notes  # "static" / "metric" -> what was not read, for the record
        self.count = len(static)

    # -- the calls amd.gpu makes (probes/amd/gpu.py) ----------------------------------
    def query(self, name: str, *args: int | str) -> Any:
        if name == "amdsmi_get_processor_handles":
            return self.count
        if name == "amdsmi_get_gpu_process_list" and args and isinstance(args[0], int):
            return self.processes(args[0])
        answer = ANSWERS.get(name)
        if answer is None or not args or not isinstance(args[0], int):
            return Absent(NOT_IN_TEXT)
        static = self.static.get(args[0])
        if static is None:
            return Absent(f"GPU {args[0]} not in amd-smi static's output")
        return answer(self, static, self.metric.get(args[0]), *args[1:])

    def m(self, metric: Tree | None, *path: str) -> Any:
        """A metric value, or Absent saying why the metric text has none."""
        if metric is None:
            return Absent(self.metric_missing or "GPU not in amd-smi metric's output")
        return _first(metric, path)


    def processes(self, i: int) -> Any:
        """amdsmi_get_gpu_process_list's entries from GPU ``i``'s PROCESS_INFO blocks: pid,
        name (None for N/A), VRAM in bytes; an entry whose PID is garbled is left out."""
        if self.process is None:
            return Absent(self.process_missing or "amd-smi process: not run")
        tree = self.process.get(i, {})
        out = []
        for key in [k for k in tree if k.split("#")[0] == "PROCESS_INFO"][:MAX_PROCESSES]:
            block = tree[key]
            if not isinstance(block, dict):
                continue  # "No running processes detected"
            pid = _num(block.get("PID", Absent(NOT_IN_TEXT)), ("",))
            if not isinstance(pid, int):
                continue
            name = _word(block.get("NAME", Absent(NOT_IN_TEXT)))
            vram = _bytes(_first(block, ("MEMORY_USAGE", "VRAM_MEM")))
            out.append({"pid": pid, "name": name if isinstance(name, str) and name != NOT_REPORTED else None,
                        "memory_usage": {"vram_mem": vram if isinstance(vram, int) else None}})
        return out


# amd-smi prints process memory in powers of 1024 with one decimal (amdsmi_helpers'
# convert_bytes): "1.9 GB"; bytes from it are approximate, to 0.05 of the unit
BYTE_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def _bytes(value: Any) -> Any:
    if isinstance(value, Absent) or not isinstance(value, str):
        return Absent(NOT_IN_TEXT)
    unit = value.strip().rpartition(" ")[2]
    return _num(value, (unit,), BYTE_UNITS[unit]) if unit in BYTE_UNITS else Absent(
        f"garbled amd-smi value: not a size in B/KB/MB/GB/TB: {value.strip()[:40]!r}")


def _first(tree: Tree, path: tuple[str, ...]) -> Any:
    """The value at ``path``, where a step may be ``"A|B"`` (a key renamed between releases)."""
    here: Any = tree
    for step in path:
        if not isinstance(here, dict):
            return Absent(NOT_IN_TEXT)
        found = next((here[k] for k in step.split("|") if k in here), None)
        if found is None:
            return Absent(NOT_IN_TEXT)
        here = found
    return here


def _num(value: Any, units: tuple[str, ...], scale: int | float = 1) -> Any:
    """A number from its text (``"750 W"``), scaled; N/A as it is; else Absent with why."""
    if isinstance(value, Absent):
        return value
    try:
        parsed = number(value, units)
    except Garbled as exc:
        return Absent(f"garbled amd-smi value: {exc}")
    if isinstance(parsed, str) or scale == 1:  # "N/A"
        return parsed
    return round(parsed * scale)


def _word(value: Any) -> Any:
    if isinstance(value, Absent) or value == NOT_REPORTED:
        return value
    try:
        return word(value)
    except Garbled as exc:
        return Absent(f"garbled amd-smi value: {exc}")


PCT, MHZ, WATT, CELSIUS, MB, GTS = ("%",), ("MHz",), ("W",), ("°C", "C"), ("MB",), ("GT/s",)
LANES = ("", "lanes")


def _asic(s: CliSource, static: Tree, metric: Tree | None) -> Any:
    return {"market_name": _word(_first(static, ("ASIC", "MARKET_NAME"))),
            "target_graphics_version": _word(_first(static, ("ASIC", "TARGET_GRAPHICS_VERSION")))}


def _bdf(s: CliSource, static: Tree, metric: Tree | None) -> Any:
    return _word(_first(static, ("BUS", "BDF")))


def _temp(s: CliSource, static: Tree, metric: Tree | None, sensor: Any = "", kind: Any = "") -> Any:
    if sensor != "HOTSPOT":
        return Absent(NOT_IN_TEXT)
    if kind == "CURRENT":
        return _num(s.m(metric, "TEMPERATURE", "HOTSPOT"), CELSIUS)
    limit = {"CRITICAL": "SLOWDOWN_HOTSPOT_TEMPERATURE", "EMERGENCY": "SHUTDOWN_HOTSPOT_TEMPERATURE"}
    if kind not in limit:
        return Absent(NOT_IN_TEXT)
    return _num(_first(static, ("LIMIT", limit[kind])), CELSIUS)


def _clock(s: CliSource, static: Tree, metric: Tree | None, kind: Any = "") -> Any:
    block = {"GFX": "GFX_0|GFX", "MEM": "MEM_0|MEM"}.get(str(kind))
    if block is None:
        return Absent(NOT_IN_TEXT)
    return {"clk": _num(s.m(metric, "CLOCK", block, "CLK|CUR_CLK"), MHZ),
            "max_clk": _num(s.m(metric, "CLOCK", block, "MAX_CLK"), MHZ)}


def _power(s: CliSource, static: Tree, metric: Tree | None) -> Any:
    keys = "SOCKET_POWER|CURRENT_SOCKET_POWER|CURRENT_POWER|AVERAGE_SOCKET_POWER|AVERAGE_POWER"
    return {"socket_power": _num(s.m(metric, "POWER", keys), WATT)}


def _power_cap(s: CliSource, static: Tree, metric: Tree | None) -> Any:
    # LIMIT's SOCKET_POWER is amdsmi_get_power_cap_info's power_cap, printed in W (the CLI
    # converts the µW); the reader wants µW, as the library answers
    return {"power_cap": _num(_first(static, ("LIMIT", "SOCKET_POWER")), WATT, 1_000_000),
            "default_power_cap": Absent(NOT_IN_TEXT)}


def _vram_total(s: CliSource, static: Tree, metric: Tree | None, kind: Any = "VRAM") -> Any:
    # amd-smi's MB is MiB (vram_size is bytes / 2**20 in amdsmi); the reader wants bytes
    found = _first(static, ("VRAM", "SIZE"))
    if isinstance(found, Absent):
        found = s.m(metric, "MEM_USAGE", "TOTAL_VRAM")
    return _num(found, MB, MIB) if kind == "VRAM" else Absent(NOT_IN_TEXT)


def _vram_used(s: CliSource, static: Tree, metric: Tree | None, kind: Any = "VRAM") -> Any:
    return _num(s.m(metric, "MEM_USAGE", "USED_VRAM"), MB, MIB) if kind == "VRAM" else Absent(NOT_IN_TEXT)


def _ecc(s: CliSource, static: Tree, metric: Tree | None) -> Any:
    return {"correctable_count": _num(s.m(metric, "ECC", "TOTAL_CORRECTABLE_COUNT|TOTAL_CORRECTABLE"), ("",)),
            "uncorrectable_count": _num(s.m(metric, "ECC", "TOTAL_UNCORRECTABLE_COUNT|TOTAL_UNCORRECTABLE"), ("",)),
            "deferred_count": _num(s.m(metric, "ECC", "TOTAL_DEFERRED_COUNT|DEFERRED_COUNT"), ("",))}


def _activity(s: CliSource, static: Tree, metric: Tree | None) -> Any:
    return {"gfx_activity": _num(s.m(metric, "USAGE", "GFX_ACTIVITY"), PCT),
            "umc_activity": _num(s.m(metric, "USAGE", "UMC_ACTIVITY"), PCT)}


def _pcie(s: CliSource, static: Tree, metric: Tree | None) -> Any:
    version = _first(static, ("BUS", "PCIE_INTERFACE_VERSION"))
    if isinstance(version, str) and version.startswith("Gen "):
        version = version[4:]  # "Gen 5", as amd-smi prints pcie_interface_version
    return {"pcie_static": {"max_pcie_width": _num(_first(static, ("BUS", "MAX_PCIE_WIDTH")), LANES),
                            "max_pcie_speed": _num(_first(static, ("BUS", "MAX_PCIE_SPEED")), GTS, 1000),
                            "pcie_interface_version": _num(version, ("",))},
            # the speed in MT/s, as amdsmi_get_pcie_info's pcie_speed (the CLI prints GT/s)
            "pcie_metric": {"pcie_width": _num(s.m(metric, "PCIE", "WIDTH|CURRENT_LANES"), LANES),
                            "pcie_speed": _num(s.m(metric, "PCIE", "SPEED|CURRENT_SPEED"), GTS, 1000),
                            "pcie_replay_count": _num(s.m(metric, "PCIE", "REPLAY_COUNT"), ("",))}}


def _driver(s: CliSource, static: Tree, metric: Tree | None) -> Any:
    return {"driver_name": _word(_first(static, ("DRIVER", "NAME"))),
            "driver_version": _word(_first(static, ("DRIVER", "VERSION")))}


def _vbios(s: CliSource, static: Tree, metric: Tree | None) -> Any:
    # VBIOS in earlier releases, IFWI in later ones (static_dict['ifwi'] = vbios_info)
    return {key: _word(_first(static, ("IFWI|VBIOS", key.upper())))
            for key in ("name", "build_date", "part_number", "version")}


def _partition(section: str) -> Callable[..., Any]:
    def answer(s: CliSource, static: Tree, metric: Tree | None) -> Any:
        return _word(_first(static, ("PARTITION", section)))
    return answer


ANSWERS: dict[str, Callable[..., Any]] = {
    "amdsmi_get_gpu_asic_info": _asic, "amdsmi_get_gpu_device_bdf": _bdf,
    "amdsmi_get_temp_metric": _temp, "amdsmi_get_clock_info": _clock,
    "amdsmi_get_power_info": _power, "amdsmi_get_power_cap_info": _power_cap,
    "amdsmi_get_gpu_memory_total": _vram_total, "amdsmi_get_gpu_memory_usage": _vram_used,
    "amdsmi_get_gpu_total_ecc_count": _ecc, "amdsmi_get_gpu_activity": _activity,
    "amdsmi_get_pcie_info": _pcie, "amdsmi_get_gpu_driver_info": _driver,
    "amdsmi_get_gpu_vbios_info": _vbios,
    "amdsmi_get_gpu_compute_partition": _partition("COMPUTE_PARTITION"),
    "amdsmi_get_gpu_memory_partition": _partition("MEMORY_PARTITION"),
}


def read(host: Host) -> tuple[CliSource | None, str]:
    """amd-smi's source, or None and why it gave none (one line)."""
    first = ""
    for binary in BINARIES:
        static, skipped, why = _run(host, (binary, "static"))
        if static is not None or not (why or "").startswith(f"{binary} static: not-found"):
            break
        first = first or why or ""
    if static is None:
        return None, first or why or "amd-smi static: no output"
    notes = {"static": f"{skipped} lines of amd-smi static not read"} if skipped else {}
    metric, mskipped, mwhy = _run(host, (binary, "metric"))
    if metric is None:
        notes["metric"] = mwhy or "amd-smi metric: no output"
    elif mskipped:
        notes["metric"] = f"{mskipped} lines of amd-smi metric not read"
    process, pskipped, pwhy = _run(host, (binary, "process"), empty_ok=True)
    if process is None:
        notes["process"] = pwhy or "amd-smi process: no output"
    elif pskipped:
        notes["process"] = f"{pskipped} lines of amd-smi process not read"
    return CliSource(static, metric, notes, process), ""
