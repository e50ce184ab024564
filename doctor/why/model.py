"""The differential's records: one row per candidate cause, each confirmed, ruled out or not
checked, with what says so. Renderers (reports/why_*.py) show them; nothing here renders."""

from __future__ import annotations

from dataclasses import dataclass, field

from doctor.i18n.values import Text
from doctor.model import Finding, Level, Severity

CONFIRMED, RULED_OUT, NOT_CHECKED = "confirmed", "ruled-out", "not-checked"
STATUSES = (CONFIRMED, RULED_OUT, NOT_CHECKED)


@dataclass(frozen=True, slots=True)
class ItemCheck:
    """One item a rule judged and did not fire on (a GPU, a process), or the rule's whole
    condition (``item`` ""): why its condition is false, or which value it lacked."""

    item: str
    absent: bool  # a value the condition needs was not measured: not judged
    parts: tuple[Text, ...]


@dataclass(frozen=True, slots=True)
class RuleCheck:
    """One rule of a candidate cause, as this run could judge it."""

    rule: str
    status: str  # CONFIRMED | RULED_OUT | NOT_CHECKED
    findings: tuple[Finding, ...] = ()
    items: tuple[ItemCheck, ...] = ()  # the first MAX_ITEMS items not fired on
    more_items: int = 0  # items judged beyond those
    why: Text | None = None  # not checked: the reason (a probe's skip, a level, no requests)
    command: str | None = None  # not checked: what would check it
    # not checked because a probe it reads skipped (what it reads is not on this host: no
    # Ascend driver, no engine): it does not decide its cause's row when another rule does
    skipped: bool = False


@dataclass(frozen=True, slots=True)
class CauseRow:
    cause: str
    status: str
    phase: str | None  # the diagnosis phase (doctor/why/order.py), latency rows only
    checks: tuple[RuleCheck, ...]

    @property
    def worst(self) -> Severity | None:
        return max((f.severity for c in self.checks for f in c.findings), default=None)


@dataclass(frozen=True, slots=True)
class Differential:
    symptom: str
    level: Level
    requests: bool  # whether requests to engines were allowed
    rows: tuple[CauseRow, ...]
    host: dict[str, str] = field(default_factory=dict)
    started_at: str = ""
    duration_s: float = 0.0
    rule_errors: tuple[str, ...] = ()

    def with_status(self, status: str) -> tuple[CauseRow, ...]:
        return tuple(r for r in self.rows if r.status == status)

    @property
    def likely(self) -> tuple[CauseRow, ...]:
        """The confirmed causes, worst first, then in diagnosis order."""
        confirmed = self.with_status(CONFIRMED)
        return tuple(sorted(confirmed, key=lambda r: -(r.worst or 0)))

    def exit_code(self) -> int:
        """As scan's, over the findings of this symptom: 0 none at warning or above, 1 a
        warning, 2 a critical one."""
        worst = max((r.worst for r in self.rows if r.worst is not None), default=None)
        if worst is None or worst == Severity.INFO:
            return 0
        return 1 if worst == Severity.WARNING else 2
