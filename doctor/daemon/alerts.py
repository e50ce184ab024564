"""The alert lifecycle: pending until a finding has held its rule's ``for``, then firing,
then resolved once it has been clear for ``resolve_after`` evaluations in a row.

An alert's identity is its rule and key (the item a rule with ``each`` names: a pid, a GPU
UUID), so the same fault on the next evaluation is the same alert and two engines are two
alerts. Hysteresis: a value hovering at a threshold, present one evaluation and absent the
next, neither resets a pending alert nor resolves a firing one until it has stayed clear
``resolve_after`` evaluations. A rule that could not be evaluated (its probe failed) leaves
its alerts as they are: missing data is not a recovery.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from doctor import durations
from doctor.model import Finding


def parse_duration(text: str | float | None) -> float:
    """"30s", "5m", "1h" → seconds (doctor/durations.py's grammar, a ValueError naming the
    text otherwise); None → 0 (fires on the first evaluation)."""
    if text is None or text == "":
        return 0.0
    return durations.parse(text)


@dataclass(slots=True)
class Alert:
    rule: str
    key: str
    finding: Finding  # the latest matching finding (evidence, severity)
    since: float  # unix time first seen in this episode
    state: str = "pending"  # pending | firing | resolved
    fired_at: float | None = None
    resolved_at: float | None = None
    last_seen: float = 0.0
    clear_count: int = 0
    last_sent: float = 0.0
    severity: str = ""  # fixed when it fires: Alertmanager tells alerts apart by their labels

    @property
    def identity(self) -> tuple[str, str]:
        return (self.rule, self.key)


@dataclass(slots=True)
class Transitions:
    """What one evaluation changed: alerts that began firing, still fire, or resolved."""

    fired: list[Alert] = field(default_factory=list)
    resolved: list[Alert] = field(default_factory=list)


class AlertTracker:
    def __init__(self, for_s: dict[str, float], resolve_after: int = 2) -> None:
        self.for_s = for_s
        self.resolve_after = max(1, resolve_after)
        self.alerts: dict[tuple[str, str], Alert] = {}

    def observe(self, findings: list[Finding], evaluated_rules: set[str], now: float) -> Transitions:
        """Feed one evaluation: the findings and the rules that could be evaluated."""
        out = Transitions()
        seen = set()
        for finding in findings:
            ident = (finding.rule, finding.identity)
            if ident in seen:
                continue
            seen.add(ident)
            alert = self.alerts.get(ident)
            if alert is None:
                alert = self.alerts[ident] = Alert(ident[0], ident[1], finding, since=now)
            alert.finding, alert.last_seen, alert.clear_count = finding, now, 0
            if alert.state == "pending" and now - alert.since >= self.for_s.get(alert.rule, 0.0):
                alert.state, alert.fired_at = "firing", now
                alert.severity = finding.severity.label
                out.fired.append(alert)
        for ident, alert in list(self.alerts.items()):
            if ident in seen or alert.rule not in evaluated_rules:
                continue
            alert.clear_count += 1
            if alert.clear_count < self.resolve_after:
                continue
            del self.alerts[ident]
            if alert.state == "firing":
                alert.state, alert.resolved_at = "resolved", now
                out.resolved.append(alert)
        return out

    def forget(self, rules: set[str], now: float) -> list[Alert]:
        """After a reload: alerts of rules no longer loaded (or disabled) resolve now."""
        gone = []
        for ident, alert in list(self.alerts.items()):
            if alert.rule not in rules:
                del self.alerts[ident]
                if alert.state == "firing":
                    alert.state, alert.resolved_at = "resolved", now
                    gone.append(alert)
        return gone

    def active(self) -> list[Alert]:
        return list(self.alerts.values())

    def firing(self) -> list[Alert]:
        return [a for a in self.alerts.values() if a.state == "firing"]
