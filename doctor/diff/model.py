"""The diff's records: facts read from one saved scan, and what the comparison made of them.

Everything here is plain data, frozen, built from two saved-scan dicts (docs/report-schema.json)
by ``doctor.diff.compare``; the renderers (reports/diff_*.py) show it and judge nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A fact's status, as the JSON schema spells it (docs/diff-schema.json)
SAME, CHANGED, ADDED, REMOVED, INCOMPLETE = "same", "changed", "added", "removed", "incomplete"
STATUSES = (SAME, CHANGED, ADDED, REMOVED, INCOMPLETE)

REGRESSION = "regression likely"
IMPROVEMENT = "improvement likely"
NO_CHANGE = "no material change"
NOT_COMPARABLE = "not comparable"
VERDICTS = (REGRESSION, IMPROVEMENT, NO_CHANGE, NOT_COMPARABLE)

# How a figure is judged (doctor/diff/noise.py holds the floors of the measured kinds)
CONFIG = "config"  # a setting or a version: any difference is a change
FLAG = "flag"  # an engine flag: absent (None) means not given, so None to a value is ADDED
SECRET = "secret"  # compared, never shown: a change reads "changed"


@dataclass(frozen=True, slots=True)
class Reading:
    """One fact as one side's records hold it."""

    id: str  # stable across scans: gpu[GPU-uuid].pcie.width, host.sysctl.vm_swappiness
    family: str  # gpu | engine | host
    label: str  # what a person reads: "PCIe link width"
    value: Any  # str, int, float, bool or None (absent: the probe did not report it)
    kind: str = CONFIG  # CONFIG, FLAG, SECRET or a measured kind of noise.FLOORS
    probe: str = ""  # the probe whose record holds it
    samples: int | None = None  # a latency percentile: the requests it was taken over
    spread: float | None = None  # a kernel's run-to-run spread, (max-min)/median, when it gave one
    flag: str = ""  # an engine flag's spelling on the command line: --enforce-eager
    contended: str = ""  # a measured figure taken while other work held the cores: why


@dataclass(frozen=True, slots=True)
class Fact:
    """One fact compared: its status, and for a figure, the ratio and the floor it was held to."""

    id: str
    family: str
    label: str
    status: str
    before: Any  # None for a secret (never shown) or an absent side
    after: Any
    kind: str = CONFIG
    ratio: float | None = None  # after / before, for numbers
    floor: float | None = None  # the relative noise floor a measured figure was judged against
    direction: str = ""  # worse | better | "" (a change with no known good way)
    causes: tuple[str, ...] = ()  # cause ids it bears on (doctor/diff/links.py)
    score: float = 0.0  # how well it explains the difference: the changes are sorted by it
    note: str = ""  # why INCOMPLETE, or the argv form of a flag change ("+ --enforce-eager")


@dataclass(frozen=True, slots=True)
class FindingDelta:
    rule: str
    key: str
    cause: str
    state: str  # raised | cleared | unchanged
    severity: str  # the side's severity that holds it (after's when both do)
    title: str


@dataclass(frozen=True, slots=True)
class Side:
    """What the diff says of one side: where it came from and what it was."""

    source: str  # the path, "live" or "baseline"
    hostname: str
    level: str
    started_at: str
    engine_state: str  # idle | under load | no engine | unknown


@dataclass(frozen=True, slots=True)
class Diff:
    verdict: str
    line: str  # the verdict's one line: why, or the first change
    exit_code: int  # 0 no material change, 1 changes at warning, 2 regression likely, 3 not compared
    before: Side
    after: Side
    identity: str  # same | different | unproven
    identity_evidence: tuple[str, ...]
    comparable: bool
    not_comparable: tuple[str, ...]  # why not, when not
    facts: tuple[Fact, ...]  # every fact, changes first in score order, then the rest by id
    findings: tuple[FindingDelta, ...] = ()
    missing_facts: tuple[str, ...] = field(default=())  # what no probe records yet

    @property
    def changes(self) -> tuple[Fact, ...]:
        return tuple(f for f in self.facts if f.status not in (SAME, INCOMPLETE))
