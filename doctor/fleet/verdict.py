"""One verdict for a scheduler from the daemon's state: OK, a problem, or unknown.

Every adapter asks the same question of the state file (doctor/daemon/state.py): is this
host, or one family of it (gpu, engine, host), fit for work? The answer is

* UNKNOWN when the state cannot be trusted (absent, broken, stale, from the future), or when
  a probe of the family failed and nothing at ``min_severity`` was found: a GPU probe that
  errored is not a healthy GPU;
* PROBLEM when a finding of the family is at ``min_severity`` or worse: the worst one, the
  first of equals in the rules' order, is the one named;
* OK otherwise.

``line`` is what a scheduler shows: it starts with a stable id (the rule id, or ``ok`` /
``unknown``) and fits ``width`` characters.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from doctor.daemon.state import State
from doctor.i18n import t
from doctor.model import Severity

_SEVERITIES = {s.label: s for s in Severity}


class Status(enum.IntEnum):
    """Ordered as exit codes: NPD's custom plugin protocol reads 0, 1 and 2 so."""

    OK = 0
    PROBLEM = 1
    UNKNOWN = 2


@dataclass(frozen=True, slots=True)
class Verdict:
    status: Status
    line: str
    finding: dict[str, Any] | None = None  # the finding named, for PROBLEM
    problems: list[dict[str, Any]] = field(default_factory=list)  # all at min_severity+


def severity_of(finding: dict[str, Any]) -> Severity:
    return _SEVERITIES.get(str(finding.get("severity")), Severity.INFO)


def cut(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters (an ellipsis where it is cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:max(0, width - 1)].rstrip() + "…"


def severity_name(severity: Severity) -> str:
    """A severity as people read it in the current language (``label`` is the id)."""
    return {"critical": t("critical"), "warning": t("warning"),
            "info": t("info")}.get(severity.label, severity.label)


def judge(state: State, family: str | None = None, min_severity: Severity = Severity.WARNING,
          width: int = 80) -> Verdict:
    """The verdict on ``family`` (None: the whole host) from ``state``."""
    what = family or "host"
    if state.unknown:
        return Verdict(Status.UNKNOWN, cut(f"unknown {state.unknown}", width))
    mine = [f for f in state.findings if family is None or state.family(f) == family]
    problems = [f for f in mine if severity_of(f) >= min_severity]
    if problems:
        worst = max(severity_of(f) for f in problems)
        first = next(f for f in problems if severity_of(f) == worst)
        more = t(" (+{count} more)", count=len(problems) - 1) if len(problems) > 1 else ""
        line = t("{rule} {severity}: {title}", rule=first.get("rule", "?"),
                 severity=severity_name(worst), title=first.get("title", ""))
        if more and len(line) + len(more) > width:
            line = cut(line, width - len(more))
        return Verdict(Status.PROBLEM, cut(line + more, width), first, problems)
    probes = [p for p in state.probes
              if family is None or str(p.get("name", "")).partition(".")[0] == family]
    failed = [p for p in probes if p.get("status") == "error"]
    if failed:
        p = failed[0]
        return Verdict(Status.UNKNOWN, cut(t("unknown {probe} failed: {reason}", probe=p.get("name"),
                                             reason=p.get("reason") or t("no reason given")),
                                           width))
    ran = sum(p.get("status") == "ok" for p in probes)
    if probes and not ran:  # a CPU node's GPU family, or a GPU node whose driver is gone
        skipped = probes[0]
        return Verdict(Status.OK, cut(t("ok {family}: no probe ran ({probe}: {reason})",
                                        family=what, probe=skipped.get("name"),
                                        reason=skipped.get("reason") or t("skipped")), width))
    return Verdict(Status.OK, cut(t("ok {family}: {ran} probes ran, nothing at {severity} or "
                                    "worse ({age:.0f}s ago)", family=what, ran=ran,
                                    severity=severity_name(min_severity), age=state.age_s),
                                  width))
