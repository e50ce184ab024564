"""A plan from a saved scan: one step per finding that has a fix, and why for the others."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import datetime, timezone
from enum import Enum

from doctor.fix.catalogue import Scan, build
from doctor.fix.model import NoStep, Plan, Step


def build_plan(report: dict, source: str, rule_probes: dict[str, tuple[str, ...]],
               now: datetime | None = None, only: tuple[str, ...] = ()) -> Plan:
    """``rule_probes``: each rule's probes (the verify scan runs those of the steps' rules);
    ``only``: rule ids to keep (all when empty)."""
    now = now or datetime.now(timezone.utc)
    scan = Scan(report, now.strftime("%Y-%m-%d"))
    findings = [f for f in report.get("findings") or ()
                if isinstance(f, dict) and isinstance(f.get("rule"), str) and isinstance(f.get("cause"), str)
                and (not only or f["rule"] in only)]
    steps: list[Step] = []
    no_steps: list[NoStep] = []
    for finding in findings:
        built = build(finding, scan)
        if isinstance(built, Step):
            steps.append(dataclasses.replace(built, id=f"{len(steps) + 1:02d}-{built.rule}",
                                             probes=tuple(rule_probes.get(built.rule, ()))))
        else:
            no_steps.append(built)
    host = report.get("host")
    host = host if isinstance(host, dict) else {}
    hostname = str(host.get("hostname") or "unknown host")
    digest = hashlib.sha256("\n".join([hostname] + [s.finding for s in steps]).encode()).hexdigest()[:6]
    probes = sorted({p for s in steps for p in s.probes})
    return Plan(id=f"{now.strftime('%Y%m%dT%H%M%SZ')}-{digest}",
                created_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"), host=hostname, source=source,
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
