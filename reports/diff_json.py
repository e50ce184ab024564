"""The diff as JSON: a documented, versioned schema (docs/diff-schema.json).

``diff_schema_version`` changes only when a field is removed or changes meaning; new fields
may appear in any release. A secret's fact holds null on both sides, never its value; every
string passes through ``doctor.redact.redact_text`` on the way out (the second lock: the
diff already masks), and numbers JSON cannot hold (NaN, infinities) are null.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from doctor import __version__
from doctor.diff.model import Diff
from reports.common import json_clean

DIFF_SCHEMA_VERSION = 1


def to_dict(diff: Diff) -> dict[str, Any]:
    facts = []
    for fact in diff.facts:
        row = asdict(fact)
        row["causes"] = list(fact.causes)
        row["score"] = round(fact.score, 3)
        facts.append(row)
    data = {
        "diff_schema_version": DIFF_SCHEMA_VERSION,
        "tool": {"name": "llm-doctor", "version": __version__},
        "verdict": diff.verdict,
        "line": diff.line,
        "exit_code": diff.exit_code,
        "before": asdict(diff.before),
        "after": asdict(diff.after),
        "identity": {"result": diff.identity, "evidence": list(diff.identity_evidence)},
        "comparable": diff.comparable,
        "not_comparable": list(diff.not_comparable),
        "changes": [f.id for f in diff.changes],
        "facts": facts,
        "findings": [asdict(d) for d in diff.findings],
        "not_recorded": list(diff.missing_facts),
    }
    return json_clean(data)


def render(diff: Diff) -> str:
    return json.dumps(to_dict(diff), indent=2, allow_nan=False) + "\n"
