"""npu.errors: each Ascend chip's HBM ECC counts and isolated pages, as ``npu-smi info -t ecc``
prints them.

Source: ``npu-smi info -t ecc -i <NPU>`` (``-c <chip>`` added where the NPU has more than one
chip), one ``Key : Value`` line a count: ``HBM Single Bit Error Count``, ``HBM Double Bit Error
Count``, ``HBM Single Bit Aggregate Total Err Cnt``, ``HBM Double Bit Aggregate Total Err Cnt``,
``HBM Single Bit Isolated Pages Count``, ``HBM Double Bit Isolated Pages Count`` (and the same
for DDR), as Huawei's log-collection guide prints them (tests/fixtures/ascend/sources). Field
names are gpu.errors' where the meaning reads the same: a single-bit error is corrected, a
double-bit one is not; the counts without "Aggregate" are taken as since the driver loaded
(NVML's volatile) and the "Aggregate Total" ones as the card's life. That reading is not
stated by npu-smi and not verified on hardware (docs/ascend.md). Needs the driver's group or
root. Manual equivalent: ``npu-smi info -t ecc -i 0``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError, MalformedError
from probes.helpers.npu_read import CommandFailed, npu_smi, overview
from probes.helpers.npu_smi import TableError, parse_kv

VENDOR = "huawei"
MAX_QUERIES = 64
FIELDS = {  # record field: npu-smi's key
    "ecc_corrected_volatile": "HBM Single Bit Error Count",
    "ecc_uncorrected_volatile": "HBM Double Bit Error Count",
    "ecc_corrected_aggregate": "HBM Single Bit Aggregate Total Err Cnt",
    "ecc_uncorrected_aggregate": "HBM Double Bit Aggregate Total Err Cnt",
    "isolated_pages_corrected": "HBM Single Bit Isolated Pages Count",
    "isolated_pages_uncorrected": "HBM Double Bit Isolated Pages Count",
}


@dataclass(frozen=True, slots=True)
class NpuErrors:
    vendor: str
    index: int  # the chip's place in npu-smi's table (npu.devices' index)
    npu_id: int
    chip_id: int | None
    ecc_corrected_volatile: int | None  # HBM Single Bit Error Count
    ecc_uncorrected_volatile: int | None  # HBM Double Bit Error Count
    ecc_corrected_aggregate: int | None  # HBM Single Bit Aggregate Total Err Cnt
    ecc_uncorrected_aggregate: int | None  # HBM Double Bit Aggregate Total Err Cnt
    isolated_pages_corrected: int | None  # HBM Single Bit Isolated Pages Count
    isolated_pages_uncorrected: int | None  # HBM Double Bit Isolated Pages Count
    missing: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NpuErrorsRecord:
    vendor: str
    chips: tuple[NpuErrors, ...]


def _count(value: str | None) -> int | None:
    value = (value or "").strip()
    return int(value) if value.isdigit() and len(value) <= 18 else None


def read_chip(host: Host, index: int, npu: int, chip: int | None, chips_on_npu: int) -> NpuErrors:
    args = ["info", "-t", "ecc", "-i", str(npu)]
    args += ["-c", str(chip)] if chips_on_npu > 1 and chip is not None else []
    missing: dict[str, str] = {}
    why = "not-supported"  # a 310 card without HBM prints no HBM lines
    try:
        kv = parse_kv(npu_smi(host, args))
    except CommandFailed:
        kv, why = {}, "failed"
    except HostReadError as exc:
        kv, why = {}, exc.reason.value
    counts = {name: _count(kv.get(key)) for name, key in FIELDS.items()}
    for name, value in counts.items():
        if value is None:
            missing[name] = why
    return NpuErrors(VENDOR, index, npu, chip, missing=missing, **counts)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> NpuErrorsRecord:
    try:
        rows = overview(host).chips
    except (CommandFailed, TableError) as exc:
        raise MalformedError("npu-smi info", str(exc)) from exc
    if not rows:
        raise Skip(t("npu-smi lists no Ascend chip"))
    per_npu: dict[int, int] = {}
    for row in rows:
        per_npu[row.npu_id] = per_npu.get(row.npu_id, 0) + 1
    chips = tuple(read_chip(host, i, r.npu_id, r.chip_id, per_npu[r.npu_id])
                  for i, r in enumerate(rows[:MAX_QUERIES]))
    return NpuErrorsRecord(VENDOR, chips)


def summary(record: NpuErrorsRecord) -> str:
    bad = sum(bool(c.ecc_uncorrected_volatile or c.isolated_pages_uncorrected) for c in record.chips)
    return t("{n} Ascend chips read for HBM ECC; {bad} with uncorrected errors",
             n=len(record.chips), bad=bad)
