"""The JSON report: a documented, versioned schema (docs/report-schema.json).

``schema_version`` changes only when a field is removed or changes meaning; new fields
may appear in any release.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from doctor import __version__
from doctor.model import ScanReport

SCHEMA_VERSION = 1


def to_dict(report: ScanReport) -> dict[str, Any]:
    worst = report.worst
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "llm-doctor", "version": __version__},
        "host": report.host,
        "level": report.level.name.lower(),
        "started_at": report.started_at,
        "duration_s": report.duration_s,
        "verdict": worst.label if worst is not None else "ok",
        "exit_code": report.exit_code(),
        "probes": [
            {
                "name": p.name,
                "status": p.status,
                "reason": p.reason,
                "duration_s": round(p.duration_s, 3),
                "data": dataclasses.asdict(p.record) if p.record is not None else None,
            }
            for p in report.probes
        ],
        "findings": [
            {
                "rule": f.rule,
                "cause": f.cause,
                "symptoms": list(f.symptoms),
                "severity": f.severity.label,
                "title": f.title,
                "evidence": f.evidence,
                "remediation": f.remediation,
                "playbook": f.playbook,
            }
            for f in report.findings
        ],
        "rule_errors": report.rule_errors,
    }


def render(report: ScanReport) -> str:
    return json.dumps(to_dict(report), indent=2, default=str) + "\n"
