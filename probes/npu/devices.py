"""npu.devices: each Huawei Ascend chip's health, temperature, power, AICore use and memory,
and the processes holding its memory, as ``npu-smi info`` prints them.

Source: ``npu-smi info`` (the overview table; probes/helpers/npu_smi.py reads it), and for a
chip whose health is not ``OK``, ``npu-smi info -t health -i <NPU> -c <chip>`` (its ``Error
Code`` and ``Error Information``); the process table (``/proc/<pid>/cmdline``, as gpu.memory
reads it) says which of npu-smi's processes is a serving engine. Units as npu-smi prints them: °C, W, %, MB (read as MiB:
npu-smi's 65536 MB HBM is the 64 GiB of a 910B). Needs no root where the user is in the
driver's group (HwHiAiUser); in a container, /dev/davinci_manager and the chip's /dev/davinci<N>
must be mounted (npu.device_files says which are missing). Manual equivalent: ``npu-smi info``.

Field names are the NVIDIA records' where the fact is the same (``index``, ``temp_c``,
``power_w``, ``used_mib``/``total_mib`` of gpu.memory as ``memory_used_mib``/``memory_total_mib``,
``pid``, ``name``); ``vendor`` is "huawei". What is not verified without the hardware
(docs/ascend.md): that ``index`` (the table's order) is the logical id ASCEND_RT_VISIBLE_DEVICES
counts, and what a ``-`` in the power column of an A3's second chip means (read as not reported).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError, MalformedError
from probes.helpers.npu_read import CommandFailed, npu_smi, overview
from probes.helpers.npu_smi import ChipRow, ProcessRow, TableError, parse_kv
from probes.helpers.processes import Process, process_table

VENDOR = "huawei"
OK = "OK"
# MindIE's backends as npu-smi prints their comm (youyve/nputop's 310P3 table): engines that
# llm-doctor's discovery does not know
MINDIE_BACKENDS = ("mindie_llm_back",)
MAX_HEALTH_QUERIES = 16  # chips not OK asked for their error code; the rest keep the table's word


@dataclass(frozen=True, slots=True)
class NpuChip:
    vendor: str  # "huawei"
    index: int  # the chip's place in npu-smi's table, from 0
    npu_id: int  # npu-smi's NPU ID (the card or module)
    chip_id: int | None  # the chip on that NPU (an A3 module or a 310P card has two)
    phy_id: int | None  # the Phy-ID (A3, npu-smi 25.x) or Device column where printed
    name: str | None  # "910B2C", "Ascend910", "310P3"
    bus_id: str | None  # "0000:5A:00.0"; None where npu-smi prints NA (an SoC)
    health: str | None  # "OK", "Warning", "Alarm", "Critical", as npu-smi prints it
    health_error_code: str | None  # npu-smi info -t health: "Error Code" (None: NA or not asked)
    health_error_info: str | None  # its "Error Information"
    temp_c: int | None  # Temp(C)
    power_w: float | None  # Power(W); None where npu-smi prints "-" or NA
    aicore_util_pct: int | None  # AICore(%): the AI cores' busy share
    memory_used_mib: int | None  # HBM-Usage(MB) where the chip has HBM, else Memory-Usage(MB)
    memory_total_mib: int | None
    memory_kind: str | None  # "HBM" or "DDR": which column memory_* came from
    missing: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NpuProcess:
    vendor: str
    npu_id: int
    chip_id: int | None
    index: int | None  # the chip's index in ``chips`` (None: a chip the table does not list)
    pid: int  # as npu-smi prints it (the host's PID namespace when run on the host)
    name: str  # npu-smi's Process name (the comm, cut to 15 characters by the kernel)
    used_mib: int | None  # Process memory(MB)
    # /proc/<pid> seen by this scan: False where the pid is another PID namespace's (npu-smi
    # run on the host, llm-doctor in a container) or the process ended; then engine is None
    visible: bool = False
    # vllm, sglang, ... when /proc/<pid>/cmdline is a serving engine; "mindie" for MindIE's
    # backend (MINDIE_BACKENDS), which llm-doctor's discovery does not know
    engine: str | None = None
    # gpu.memory's names, for the vendor-neutral gpu-memory-held-by-other-process (its
    # each_also): the chip's index, and two facts that are always false on an NPU
    gpu: int | None = None  # = index
    is_llm_doctor: bool = False  # llm-doctor runs no kernel on an NPU
    mps_server: bool = False  # no MPS on Ascend


@dataclass(frozen=True, slots=True)
class NpuDevicesRecord:
    vendor: str
    smi_version: str | None  # npu-smi's own version (the driver package's)
    chips: tuple[NpuChip, ...]
    processes: tuple[NpuProcess, ...]
    problems: tuple[str, ...]  # table lines npu-smi printed that could not be read
    # the processes whose pid this scan sees: the ones gpu-memory-held-by-other-process judges
    # (a pid of another PID namespace, npu-smi run on the host and llm-doctor in a container,
    # may be the engine itself: not judged)
    visible_processes: tuple[NpuProcess, ...] = ()


def _num(row: ChipRow, name: str) -> float | None:
    value = row.values.get(name)
    return value if isinstance(value, float) else None


def _pair(row: ChipRow, name: str) -> tuple[int, int] | None:
    value = row.values.get(name)
    return (int(value[0]), int(value[1])) if isinstance(value, tuple) else None


def _health_detail(host: Host, row: ChipRow) -> tuple[str | None, str | None, str | None]:
    """(error code, error information, the reason it was not read: the seam's words) of a
    chip whose health is not OK."""
    args = ["info", "-t", "health", "-i", str(row.npu_id)]
    args += ["-c", str(row.chip_id)] if row.chip_id is not None else []
    try:
        kv = parse_kv(npu_smi(host, args))
    except CommandFailed:
        return None, None, "failed"
    except HostReadError as exc:
        return None, None, exc.reason.value
    except Skip:  # this npu-smi (or its recording) has no health view
        return None, None, "not-found"

    def word(key: str) -> str | None:
        value = kv.get(key)
        return None if not value or value.upper() == "NA" else value[:120]
    return word("Error Code"), word("Error Information"), None


def _visible(host: Host) -> dict[int, Process]:
    """The processes this scan sees, by pid; none where /proc cannot be listed."""
    try:
        return {p.pid: p for p in process_table(host)}
    except HostReadError:
        return {}


def chip_of(host: Host, index: int, row: ChipRow, asked: int) -> NpuChip:
    missing: dict[str, str] = {}
    hbm, ddr = _pair(row, "HBM-Usage(MB)"), _pair(row, "Memory-Usage(MB)")
    memory, kind = (hbm, "HBM") if hbm and hbm[1] > 0 else (ddr, "DDR") if ddr and ddr[1] > 0 \
        else (None, None)
    if memory is None:
        missing["memory_used_mib"] = "not-supported"
    temp, power, aicore = _num(row, "Temp(C)"), _num(row, "Power(W)"), _num(row, "AICore(%)")
    for key, value in (("temp_c", temp), ("power_w", power), ("aicore_util_pct", aicore)):
        if value is None:
            missing[key] = "not-supported"
    code = info = None
    if row.health is not None and row.health != OK and asked < MAX_HEALTH_QUERIES:
        code, info, why = _health_detail(host, row)
        if why:
            missing["health_error_code"] = why
    return NpuChip(
        vendor=VENDOR, index=index, npu_id=row.npu_id, chip_id=row.chip_id, phy_id=row.phy_id,
        name=row.name, bus_id=row.bus_id, health=row.health, health_error_code=code,
        health_error_info=info, temp_c=None if temp is None else int(temp), power_w=power,
        aicore_util_pct=None if aicore is None else int(aicore),
        memory_used_mib=memory[0] if memory else None,
        memory_total_mib=memory[1] if memory else None, memory_kind=kind, missing=missing)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> NpuDevicesRecord:
    try:
        table = overview(host)
    except CommandFailed as exc:
        raise MalformedError("npu-smi info", str(exc)) from exc
    except TableError as exc:
        raise MalformedError("npu-smi info", str(exc)) from exc
    chips: list[NpuChip] = []
    asked = 0
    for index, row in enumerate(table.chips):
        chips.append(chip_of(host, index, row, asked))
        asked += row.health is not None and row.health != OK
    where = {(c.npu_id, c.chip_id): c.index for c in chips}
    seen = _visible(host) if table.processes else {}
    procs = tuple(_process(p, where.get((p.npu_id, p.chip_id)), seen.get(p.pid)) for p in table.processes)
    return NpuDevicesRecord(VENDOR, table.smi_version, tuple(chips), procs, table.problems,
                            tuple(p for p in procs if p.visible))


def _process(row: ProcessRow, index: int | None, seen: Process | None) -> NpuProcess:
    engine = seen.engine if seen else None
    if seen and engine is None and row.name in MINDIE_BACKENDS:
        engine = "mindie"
    return NpuProcess(VENDOR, row.npu_id, row.chip_id, index, row.pid, row.name, row.memory_mib,
                      visible=seen is not None, engine=engine, gpu=index)


def summary(record: NpuDevicesRecord) -> str:
    names = sorted({c.name or "?" for c in record.chips})
    sick = [c for c in record.chips if c.health not in (None, OK)]
    return t("{n} Ascend chips ({names}), npu-smi {version}; {sick} not OK",
             n=len(record.chips), names=", ".join(names), version=record.smi_version or "?",
             sick=len(sick))
