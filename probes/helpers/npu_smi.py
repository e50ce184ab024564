"""Parsers of Huawei Ascend's ``npu-smi`` and ``hccn_tool`` text, read as hostile input.

``npu-smi info`` prints a box-drawn table: two rows a chip (``NPU Name | Health | Power(W)
Temp(C) Hugepages-Usage(page)`` then ``Chip [Phy-ID|Device] | Bus-Id | AICore(%)
Memory-Usage(MB) [HBM-Usage(MB)]``), then a process table (``NPU Chip | Process id | Process
name | Process memory(MB)``). Its columns differ by card and version: the Atlas A3 and the
910B with npu-smi 25.x add ``Phy-ID``, the 310P adds ``Device`` and has no HBM column, the
910B has both DDR (``Memory-Usage``) and HBM. The header rows name the values of each data row
in order, so the parser reads the names from the header it was given, never from positions
fixed in advance; a value it cannot read is None and a line it cannot place is one problem
line, never an exception. Real tables it was checked against: tests/fixtures/ascend/sources
(SOURCES.md there names each one's origin).

The ``-t health``, ``-t board``, ``-t usages`` ... views are ``Key : Value`` lines;
``hccn_tool`` answers one ``key: value`` line a query (``link status: UP``, ``net health
status: Success``, ``ipaddr:10.10.0.10``). Version files (``/usr/local/Ascend/driver/
version.info``, the toolkit's ``ascend_toolkit_install.info``) are ``key=value`` lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINES = 4000  # a table of 64 chips and their processes is ~400 lines
MAX_CHIPS = 128
MAX_PROCESSES = 512
MAX_PROBLEMS = 8
_PAIR = re.compile(r"(-?\d+(?:\.\d+)?)\s*/\s*(-?\d+(?:\.\d+)?)")
_TOKEN = re.compile(r"-?\d+(?:\.\d+)?\s*/\s*-?\d+(?:\.\d+)?|\S+")
_VERSION = re.compile(r"npu-smi\s+(\S+)")
_INT = re.compile(r"-?\d{1,12}")
_NUM = re.compile(r"-?\d{1,12}(?:\.\d{1,6})?")


@dataclass(frozen=True, slots=True)
class ChipRow:
    npu_id: int
    chip_id: int | None
    phy_id: int | None  # the ``Phy-ID`` column (A3, npu-smi 25.x) or ``Device`` (310P)
    name: str | None  # "910B2C", "Ascend910", "310P3"; "xxx" where a document masked it
    health: str | None  # "OK", "Warning", "Alarm", "Critical", as printed
    bus_id: str | None  # "0000:5A:00.0"; None where npu-smi prints NA (an SoC, 310B)
    values: dict[str, float | tuple[float, float] | None]  # header name -> value or (used, total)


@dataclass(frozen=True, slots=True)
class ProcessRow:
    npu_id: int
    chip_id: int | None
    pid: int
    name: str
    memory_mib: int | None


@dataclass(frozen=True, slots=True)
class Overview:
    smi_version: str | None  # "23.0.2.1": the first line's ``npu-smi <version>``
    chips: tuple[ChipRow, ...]
    processes: tuple[ProcessRow, ...]
    problems: tuple[str, ...]  # lines that could not be placed, each cut to 120 characters


class TableError(ValueError):
    """The text holds no chip table at all: one line saying what was seen."""


def _cells(line: str) -> list[str] | None:
    line = line.strip()
    if not line.startswith("|"):
        return None
    return [c.strip() for c in line.strip("|").split("|")]


def _names(cell: str) -> list[str]:
    return cell.split()


def _value(token: str) -> float | tuple[float, float] | None:
    pair = _PAIR.fullmatch(token)
    if pair:
        return float(pair[1]), float(pair[2])
    return float(token) if _NUM.fullmatch(token) else None  # "-", "NA": not reported


def _values(names: list[str], cell: str) -> dict[str, float | tuple[float, float] | None]:
    tokens = _TOKEN.findall(cell)
    return {name: (_value(tokens[i]) if i < len(tokens) else None) for i, name in enumerate(names)}


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and _INT.fullmatch(text) else None


def _first_row(cells: list[str]) -> tuple[int, str | None] | None:
    parts = cells[0].split(None, 1)
    npu = _int(parts[0]) if parts else None
    return None if npu is None else (npu, parts[1].strip() if len(parts) > 1 else None)


def parse_info(text: str) -> Overview:
    """``npu-smi info``'s tables. Raises TableError when no chip header is in ``text``."""
    version = None
    head1: list[str] | None = None
    head2: list[str] | None = None
    second_id: str | None = None  # "Phy-ID" or "Device": the second row's second id column
    in_procs = False
    pending: tuple[list[str], int, str | None] | None = None
    chips: list[ChipRow] = []
    procs: list[ProcessRow] = []
    problems: list[str] = []

    def problem(line: str) -> None:
        if len(problems) < MAX_PROBLEMS:
            problems.append(line.strip()[:120])

    for line in text.splitlines()[:MAX_LINES]:
        cells = _cells(line)
        if cells is None or all(not c or set(c) <= set("-=+") for c in cells):
            continue  # a border, or a line outside the table ("...", a shell prompt)
        if version is None and (m := _VERSION.search(cells[0])):
            version = m[1][:40]
            continue
        if len(cells) >= 3 and cells[0].split()[:2] == ["NPU", "Name"]:
            head1 = _names(cells[2])
            continue
        if len(cells) >= 3 and cells[0].split()[:1] == ["Chip"] and "Bus-Id" in cells[1]:
            ids = cells[0].split()
            second_id = ids[1] if len(ids) > 1 else None
            head2 = _names(cells[2])
            continue
        if len(cells) >= 3 and "Process id" in cells[1]:
            in_procs = True
            continue
        if in_procs:
            _process(cells, procs, problem, line)
            continue
        if head1 is None or head2 is None or len(cells) < 3:
            problem(line)
            continue
        if pending is None:
            first = _first_row(cells)
            if first is None:
                problem(line)
                continue
            pending = (cells, first[0], first[1])
            continue
        row1, npu, name = pending
        pending = None
        ids = cells[0].split()
        chip = _int(ids[0]) if ids else None
        phy = _int(ids[1]) if second_id and len(ids) > 1 else None
        bus = cells[1] if cells[1] and cells[1].upper() != "NA" else None
        values = {**_values(head1, row1[2]), **_values(head2, cells[2])}
        if len(chips) < MAX_CHIPS:
            chips.append(ChipRow(npu, chip, phy, (name or "")[:40] or None,
                                 row1[1][:20] or None, (bus or "")[:20] or None, values))
    if head1 is None or head2 is None:
        seen = next((ln.strip() for ln in text.splitlines()[:MAX_LINES] if ln.strip()), "")
        raise TableError(f"no chip table (header `NPU Name | Health` and `Chip | Bus-Id`); "
                         f"first line: {seen[:80]!r}")
    if pending is not None:
        problem(" | ".join(pending[0]))
    return Overview(version, tuple(chips), tuple(procs), tuple(problems))


def _process(cells: list[str], procs: list[ProcessRow], problem, line: str) -> None:
    if cells[0].startswith("No running processes"):
        return
    ids = cells[0].split()
    pid = _int(cells[1]) if len(cells) > 1 else None
    npu = _int(ids[0]) if ids else None
    if npu is None or pid is None or len(cells) < 4:
        problem(line)
        return
    memory = _int(cells[3].split()[0]) if cells[3].split() else None
    if len(procs) < MAX_PROCESSES:
        procs.append(ProcessRow(npu, _int(ids[1]) if len(ids) > 1 else None, pid,
                                cells[2][:64], memory))


def parse_kv(text: str, sep: str = ":") -> dict[str, str]:
    """``Key : Value`` lines (``npu-smi info -t health``, ``hccn_tool``; ``key=value`` for
    version files with ``sep="="``): the first value of each key, keys and values stripped
    and cut to 64 and 256 characters."""
    out: dict[str, str] = {}
    for line in text.splitlines()[:MAX_LINES]:
        key, found, value = line.partition(sep)
        key = key.strip()
        if found and key and len(out) < 256 and key[:64] not in out:
            out[key[:64]] = value.strip()[:256]
    return out


def hccn_value(text: str, key: str) -> str | None:
    """The value of ``key`` in an ``hccn_tool`` answer (``link status: UP``)."""
    value = parse_kv(text).get(key)
    return value[:40] if value else None


def bracket_list(value: str | None) -> tuple[str, ...]:
    """``[V100R001C29],[V100R001C30]`` or ``[7.0.0,7.1.99]`` as its items, in order."""
    if not value:
        return ()
    return tuple(item.strip() for group in re.findall(r"\[([^\]]{0,200})\]", value)[:64]
                 for item in group.split(",") if item.strip())
