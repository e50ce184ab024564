"""After ``--apply``: each step fixed, not fixed, or needing a restart, by a second scan
with the probes the plan's findings came from (its ``report`` typed, as a saved scan is)."""

from __future__ import annotations

from doctor.fix.apply import Outcome
from doctor.fix.model import Plan
from doctor.i18n import lazy, translated
from doctor.saved_scan import SavedScan

FIXED = "fixed"
NOT_FIXED = "not fixed"
NEEDS_RESTART = "needs a restart"
NOT_APPLIED = "not applied"
UNKNOWN = "unknown"
# The verdicts as a person reads them (verify.json keeps the words above: they are data)
SAID = {FIXED: lazy("fixed"), NOT_FIXED: lazy("not fixed"), NEEDS_RESTART: lazy("needs a restart"),
        NOT_APPLIED: lazy("not applied"), UNKNOWN: lazy("unknown")}


def said(verdict: str) -> str:
    return translated(SAID.get(verdict, verdict))


def judge(plan: Plan, outcomes: list[Outcome], report: SavedScan) -> dict[str, str]:
    """Step id -> verdict. A step whose finding is gone is fixed; one still raised is not,
    unless its change takes only when the engine restarts (a unit's LimitNOFILE)."""
    raised = {(f.rule, f.key) for f in report.findings}
    ran = {p.name: p.status for p in report.probes}
    done = {o.step: o.status for o in outcomes}
    out = {}
    for step in plan.steps:
        if done.get(step.id) not in ("applied", "in place"):
            out[step.id] = NOT_APPLIED
        elif (step.rule, step.key) in raised:
            out[step.id] = NEEDS_RESTART if step.restart_to_take else NOT_FIXED
        elif not step.probes or any(ran.get(p) != "ok" for p in step.probes):
            out[step.id] = UNKNOWN  # a probe of the plan failed: its silence proves nothing
        else:
            out[step.id] = FIXED
    return out
