"""The parts of a saved scan (docs/report-schema.json) a step builder reads, and the header
of the files a plan writes: what the catalogue takes from someone else's file, taken once,
bounded, and never as anything but data or a comment.

The scan comes typed (doctor/saved_scan.py, through reports/json_report.py ``read``): its
findings' rule, cause and key are strings and its probes' data objects, so nothing here
guards them again. A probe's data is the probe's own shape, not the report's: its lists
and numbers are still taken through ``dicts_in`` and ``integer``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from doctor.fix.text import input_text, one_line
from doctor.i18n import SOURCE
from doctor.saved_scan import SavedFinding, SavedScan


@dataclass(frozen=True, slots=True)
class Scan:
    """The parts of a saved scan (docs/report-schema.json) a builder reads, indexed once:
    a builder runs per finding, so a look-up that walked the findings or the probes each
    time made a plan of n findings cost n² (20,000 findings: 43 s)."""

    report: SavedScan  # read and checked by reports/json_report.py (``read``, or ``typed``)
    date: str  # YYYY-MM-DD, for the files' headers
    _data: dict = field(init=False, repr=False, compare=False)
    _rules: frozenset = field(init=False, repr=False, compare=False)
    _engines: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        data: dict[str, Mapping] = {}
        for probe in self.report.probes:  # the first ok result of each probe
            if probe.name not in data and probe.status == "ok":
                data[probe.name] = probe.data or {}
        object.__setattr__(self, "_data", data)
        object.__setattr__(self, "_rules", frozenset(f.rule for f in self.report.findings))
        engines: dict[object, list[dict]] = {}
        for engine in dicts_in(data.get("engine.container", {}).get("engines")):
            pid = engine.get("pid")
            if integer(pid) is not None or pid is None:
                engines.setdefault(pid, []).append(engine)
        object.__setattr__(self, "_engines", engines)

    def data(self, probe: str) -> Mapping:
        return self._data.get(probe, {})

    def has_finding(self, rule: str) -> bool:
        return rule in self._rules

    def engines(self, pid: int | None) -> list[dict]:
        """engine.container's engines with ``pid``, in the scan's order."""
        return self._engines.get(pid, [])


def header(finding: SavedFinding, scan: Scan, comment: str = "#") -> str:
    # the file's own words: English in every language, so a file is the same bytes whatever
    # language planned it, and whatever language the scan was saved in (its title line is
    # the finding's English title: said from its value, else as the scan wrote it). Each
    # line is a comment whatever the finding holds: its rule, key and title are made one
    # printable line each (a newline in a title once put a cron line into the file).
    key = input_text(finding.key)
    key = f" ({key})" if key else ""
    lines = [f"Written by llm-doctor fix on {one_line(scan.date, 10)} for the finding "
             f"{input_text(finding.rule)}{key}:", input_text(finding.title(SOURCE)),
             "'llm-doctor fix --revert PLAN' removes it and restores what it replaced."]
    return "".join(f"{comment} {one_line(line)}\n" for line in lines)


def dicts_in(value: object) -> list[dict]:
    """The dicts of a list in a probe's data; anything else (a hostile saved scan) is none."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def integer(value: object, low: int = -(2 ** 63), high: int = 2 ** 64) -> int | None:
    """An integer of the scan within [low, high] (a kernel value is at most 64 bits)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    return value if ok else None  # type: ignore[return-value]


