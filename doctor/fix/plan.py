"""A plan from a saved scan: one step per finding that has a fix, and why for the others."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import datetime, timezone
from enum import Enum

from doctor.fix.catalogue import ONCE_PER_SCAN, build
from doctor.fix.model import NoStep, Plan, Step
from doctor.fix.saved import Scan
from doctor.fix.text import input_text, one_line, safe_id
from doctor.i18n import t
from doctor.saved_scan import SavedScan

# The most steps a plan holds. A plan is a script a person reads before running it as root;
# a real scan gives at most one step per rule with a step and GPU or engine: the rules with
# a step (34 today, 26 a stop ago) times 8 GPUs is 272, below it with room for the rules to
# come (tests/test_fix_script_hostile.py checks). Past it the saved scan is not one host's
# findings: it is refused, not cut.
MAX_STEPS = 512


class PlanTooLarge(Exception):
    """A saved scan asks for more steps than a plan holds; the message says how many."""


def build_plan(report: SavedScan, source: str, rule_probes: dict[str, tuple[str, ...]],
               now: datetime | None = None, only: tuple[str, ...] = ()) -> Plan:
    """``report``: the scan, typed (reports/json_report.py ``read`` for a saved one, or
    doctor/saved_scan.py ``typed`` of ``to_dict``); ``rule_probes``: each rule's probes (the verify scan runs those of the steps' rules);
    ``only``: rule ids to keep (all when empty).

    Linear in the findings. A step's id is its place and a name the catalogue owns: the
    rule's id where it is one of ``rule_probes``' (the rules llm-doctor loaded), else its
    cause's (a key of BUILDERS); never the scan's text. A step that would make the same
    changes as one before it (a finding listed twice) is not repeated."""
    now = now or datetime.now(timezone.utc)
    scan = Scan(report, now.strftime("%Y-%m-%d"))
    findings = [f for f in report.findings if not only or f.rule in only]
    steps: list[Step] = []
    no_steps: list[NoStep] = []
    made: dict[tuple, str] = {}  # a step's changes → the id of the step that makes them
    once: dict[str, str] = {}    # a cause of ONCE_PER_SCAN → the id of its step
    for finding in findings:
        if finding.cause in once:  # its step is the scan's, made already: not built again
            no_steps.append(NoStep(input_text(finding.rule), input_text(finding.key),
                                   finding.cause, t("the same changes as step {id}", id=once[finding.cause])))
            continue
        built = build(finding, scan)
        if not isinstance(built, Step):
            no_steps.append(built)
            continue
        changes = (built.files, built.live, built.commands)
        if any(changes) and changes in made:
            no_steps.append(NoStep(built.rule, built.key, built.cause,
                                   t("the same changes as step {id}", id=made[changes])))
            continue
        if len(steps) == MAX_STEPS:
            raise PlanTooLarge(t("{source}: more than {max} findings with a step: not one host's "
                                 "scan (a plan is read before it runs; split the scan with --only RULE)",
                                 source=one_line(source), max=MAX_STEPS))
        rule = safe_id(finding.rule)
        name = rule if rule is not None and rule in rule_probes else built.cause  # a BUILDERS key
        step = dataclasses.replace(built, id=f"{len(steps) + 1:02d}-{name}",
                                   probes=tuple(rule_probes.get(rule, ())) if rule else ())
        steps.append(step)
        if step.cause in ONCE_PER_SCAN:
            once[step.cause] = step.id
        if any(changes):
            made[changes] = step.id
    hostname = input_text(report.host.get("hostname") or "") or "unknown host"
    digest = hashlib.sha256("\n".join([hostname] + [s.finding for s in steps]).encode()).hexdigest()[:6]
    probes = sorted({p for s in steps for p in s.probes})
    return Plan(id=f"{now.strftime('%Y%m%dT%H%M%SZ')}-{digest}",
                created_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"), host=hostname, source=one_line(source),
                probes=tuple(probes), steps=tuple(steps), no_steps=tuple(no_steps))


def to_dict(plan: Plan) -> dict:
    """The plan as docs/fix-plan-schema.json has it."""
    def plain(value):
        if isinstance(value, Enum):
            return value.value
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return value

    out = plain(plan)
    out["schema_version"] = 1
    for step, raw in zip(out["steps"], plan.steps):
        step["finding"] = raw.finding
    return out
