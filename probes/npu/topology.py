"""npu.topology: how each pair of Ascend NPUs is connected and which CPUs are near each NPU,
as ``npu-smi info -t topo`` prints it.

The table has one row and one column per NPU (``NPU0 ... NPU7``) and a last column ``CPU
Affinity`` (a CPU list, ``144-167``); a cell is npu-smi's word for the path between the two:
``X`` (itself), ``HCCS`` (Huawei's chip-to-chip link), ``PIX``, ``PXB``, ``PHB``, ``SYS``
(PCIe paths, as nvidia-smi's legend has them) or ``NA`` (unknown), explained by the legend
npu-smi prints under it. Real table: ms-swift's 8 × 910B3 host (tests/fixtures/ascend/sources).
Needs the driver's group or root. Manual equivalent: ``npu-smi info -t topo``.

A record for the vendor-neutral topology and NUMA rules to read (gpu.topology's pairs and
gpu.numa's CPU lists are the same facts); no rule of its own judges it yet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, MalformedError
from probes.helpers.npu_read import CommandFailed, npu_smi

VENDOR = "huawei"
MAX_NPUS = 64
_NPU = re.compile(r"NPU(\d{1,3})")
_CPUS = re.compile(r"[0-9,\-]{1,200}")


@dataclass(frozen=True, slots=True)
class NpuPair:
    a: int  # NPU numbers as the table heads them (NPU0 ...), a < b
    b: int
    link: str  # "HCCS", "PIX", "PXB", "PHB", "SYS", "NA"; another word as printed


@dataclass(frozen=True, slots=True)
class NpuAffinity:
    npu: int
    cpus: str | None  # "144-167"; None where the column is empty or not a CPU list


@dataclass(frozen=True, slots=True)
class NpuTopologyRecord:
    vendor: str
    pairs: tuple[NpuPair, ...]
    affinity: tuple[NpuAffinity, ...]
    problems: tuple[str, ...]  # rows that could not be read


def parse_topo(text: str) -> NpuTopologyRecord:
    lines = [ln for ln in text.splitlines()[:400] if ln.strip()]
    header = next((ln for ln in lines if ln.split()[:1] and _NPU.fullmatch(ln.split()[0])
                   and len(ln.split()) > 1 and _NPU.fullmatch(ln.split()[1])), None)
    if header is None:
        first = lines[0].strip()[:80] if lines else ""
        raise ValueError(f"no topology header (NPU0 NPU1 ...); first line: {first!r}")
    columns = [int(m[1]) for m in (_NPU.fullmatch(w) for w in header.split()) if m][:MAX_NPUS]
    pairs: dict[tuple[int, int], str] = {}
    affinity, problems = [], []
    for line in lines[lines.index(header) + 1:]:
        words = line.split()
        row = _NPU.fullmatch(words[0]) if words else None
        if row is None:
            if line.strip().startswith("Legend"):
                break
            continue
        cells = words[1:]
        if len(cells) < len(columns):
            problems.append(line.strip()[:120])
            continue
        npu = int(row[1])
        for col, word in zip(columns, cells):
            if col != npu and (min(npu, col), max(npu, col)) not in pairs:
                pairs[(min(npu, col), max(npu, col))] = word[:16]
        rest = " ".join(cells[len(columns):])
        affinity.append(NpuAffinity(npu, rest if _CPUS.fullmatch(rest) else None))
        if len(affinity) >= MAX_NPUS:
            break
    return NpuTopologyRecord(VENDOR, tuple(NpuPair(a, b, w) for (a, b), w in sorted(pairs.items())),
                             tuple(affinity), tuple(problems[:8]))


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> NpuTopologyRecord:
    try:
        text = npu_smi(host, ["info", "-t", "topo"])
    except CommandFailed as exc:
        raise MalformedError("npu-smi info -t topo", str(exc)) from exc
    try:
        record = parse_topo(text)
    except ValueError as exc:
        raise MalformedError("npu-smi info -t topo", str(exc)) from exc
    if not record.affinity:
        raise Skip(t("npu-smi info -t topo lists no NPU"))
    return record


def summary(record: NpuTopologyRecord) -> str:
    kinds = sorted({p.link for p in record.pairs})
    return t("{n} NPUs, pairs on {links}", n=len(record.affinity), links="/".join(kinds) or "-")
