"""The alert lifecycle: pending until a finding has held its rule's ``for``, then firing,
then resolved once it has been clear for ``resolve_after`` evaluations in a row.

An alert's identity is its rule and key: what the finding is about that lasts (the
engine's endpoint, the GPU, the command name of a process; never a pid, which a restart or
a short-lived process changes), so the same fault on the next evaluation is the same alert,
two pids of one program are one alert and two engines are two alerts.

Hysteresis, on that identity, twice over:

* a threshold with a clear level: a rule param ``P`` with a ``P_clear`` beside it
  (``min_cpu_cores = 0.5``, ``min_cpu_cores_clear = 0.25``) starts an alert at ``P`` and
  holds it while the rule still matches with ``P`` at ``P_clear`` (``held_findings``), as
  Prometheus' ``X > high or (ALERTS and X > low)`` does: a CPU hog measured at 0.37-0.64
  cores is one alert, not one per crossing of 0.5;
* a clear streak: a finding absent in one evaluation and present in the next neither
  resets a pending alert nor resolves a firing one until it has stayed clear (neither
  found nor held) ``resolve_after`` evaluations in a row.

A rule that could not be evaluated (its probe failed) leaves its alerts as they are:
missing data is not a recovery.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from doctor import durations
from doctor.config import Config
from doctor.model import Finding, ProbeResult, Severity
from doctor.rules.evaluate import evaluate
from doctor.rules.loader import Rule

CLEAR = "_clear"  # a param's clear level: min_cpu_cores_clear is min_cpu_cores's

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
    # the severity labels it fired with, lowest first: Alertmanager tells alerts apart by
    # their labels, so an escalation adds a critical alert beside the warning one (as the
    # exported Prometheus rules do) and both resolve together
    severities: list[str] = field(default_factory=list)

    @property
    def severity(self) -> str:
        """The highest severity it fired with ("" while pending)."""
        return self.severities[-1] if self.severities else ""

    @property
    def identity(self) -> tuple[str, str]:
        return (self.rule, self.key)


@dataclass(slots=True)
class Transitions:
    """What one evaluation changed: alerts that began firing, still fire, or resolved."""

    fired: list[Alert] = field(default_factory=list)
    escalated: list[Alert] = field(default_factory=list)  # firing, now at a higher severity
    resolved: list[Alert] = field(default_factory=list)


def clear_levels(rule: Rule, override: dict | None = None) -> dict[str, object]:
    """The params a rule holds its alerts at: ``{P: value of P_clear}`` for every ``P``
    with a ``P_clear`` beside it, a config override of ``P_clear`` included. Empty for a
    rule without clear levels."""
    override = override or {}
    return {name[:-len(CLEAR)]: override.get(name, value) for name, value in rule.params.items()
            if name.endswith(CLEAR) and name[:-len(CLEAR)] in rule.params}


def held_findings(rules: list[Rule], results: list[ProbeResult], config: Config) -> list[Finding]:
    """What the rules with clear levels still find with each threshold at its clear level:
    the findings that hold an alert already pending or firing (they start none). Rule
    errors are the main evaluation's to report."""
    held_rules, overrides = [], {}
    for rule in rules:
        override = config.rules.get(rule.id, {})
        levels = clear_levels(rule, override)
        if levels:
            held_rules.append(rule)
            overrides[rule.id] = {**override, **levels}
    if not held_rules:
        return []
    found, _ = evaluate(held_rules, results, Config(path=config.path, scan=config.scan,
                                                    rules={**config.rules, **overrides}))
    return found


class AlertTracker:
    def __init__(self, for_s: dict[str, float], resolve_after: int = 2) -> None:
        self.for_s = for_s
        self.resolve_after = max(1, resolve_after)
        self.alerts: dict[tuple[str, str], Alert] = {}

    def observe(self, findings: list[Finding], evaluated_rules: set[str], now: float,
                held: list[Finding] | None = None) -> Transitions:
        """Feed one evaluation: the findings, the rules that could be evaluated, and the
        findings at the rules' clear levels (``held_findings``), which keep an alert of the
        same identity going (pending ones still fire after their ``for``) but start none."""
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
            alert.finding = finding
            self._seen(alert, now, out)
        for finding in held or ():
            ident = (finding.rule, finding.identity)
            if ident not in seen and ident in self.alerts:
                seen.add(ident)
                self._seen(self.alerts[ident], now, out)  # its finding stays the last one found
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

    def _seen(self, alert: Alert, now: float, out: Transitions) -> None:
        alert.last_seen, alert.clear_count = now, 0
        if alert.state == "pending" and now - alert.since >= self.for_s.get(alert.rule, 0.0):
            alert.state, alert.fired_at = "firing", now
            alert.severities = [alert.finding.severity.label]
            out.fired.append(alert)
        elif alert.state == "firing" and alert.finding.severity > Severity[alert.severity.upper()]:
            # a held finding is the last one found, so only a finding found anew escalates
            alert.severities.append(alert.finding.severity.label)
            out.escalated.append(alert)

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
