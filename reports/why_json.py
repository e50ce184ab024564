"""``llm-doctor why`` as JSON: ``why_schema_version`` 1 (docs/why.md lists the fields).

Text fields are said in the report's language (``lang``); a finding is the scan report's own
(reports/json_report.py), so a reader of scan's JSON reads these the same way. Every string
is masked for secrets on the way out (``redact_text``), and numbers JSON cannot hold are null.
"""

from __future__ import annotations

import json
from typing import Any

from doctor import __version__
from doctor.i18n import current
from doctor.i18n.text import render as say
from doctor.why.model import CauseRow, Differential, RuleCheck
from reports.common import json_clean
from reports.json_report import finding_dict  # the scan report's finding, field for field
from reports.why_common import commands, phase_text, verdict

WHY_SCHEMA_VERSION = 1


def _check(check: RuleCheck) -> dict[str, Any]:
    return {"rule": check.rule, "status": check.status,
            "findings": [finding_dict(f) for f in check.findings],
            "items": [{"item": i.item, "not_measured": i.absent,
                       "why": [say(p) for p in i.parts]} for i in check.items],
            "more_items": check.more_items,
            "why": say(check.why) if check.why is not None else None,
            "command": check.command}


def _row(row: CauseRow) -> dict[str, Any]:
    return {"cause": row.cause, "status": row.status, "phase": row.phase,
            "phase_text": phase_text(row.phase) if row.phase else None,
            "severity": row.worst.label if row.worst is not None else None,
            "commands": commands(row), "rules": [_check(c) for c in row.checks]}


def to_dict(diff: Differential) -> dict[str, Any]:
    return json_clean({
        "why_schema_version": WHY_SCHEMA_VERSION,
        "tool": {"name": "llm-doctor", "version": __version__},
        "lang": current(),
        "symptom": diff.symptom,
        "host": dict(diff.host),
        "level": diff.level.name.lower(),
        "requests": diff.requests,
        "started_at": diff.started_at,
        "duration_s": diff.duration_s,
        "verdict": verdict(diff),
        "exit_code": diff.exit_code(),
        "causes": [_row(r) for r in diff.rows],
        "rule_errors": list(diff.rule_errors),
    })


def render(diff: Differential) -> str:
    return json.dumps(to_dict(diff), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
