"""``llm-doctor why`` as plain text, for a terminal or a file: the verdict line, then each
candidate cause in diagnosis order (grouped by phase for latency rows) with what says so."""

from __future__ import annotations

from doctor.i18n import t
from doctor.why.model import Differential
from reports.common import show
from reports.why_common import commands, context, heading, phase_text, row_lines, status_text, verdict


def render(diff: Differential) -> str:
    out = [heading(diff), verdict(diff), context(diff)]
    phase: object = object()
    width = max((len(status_text(r.status)) for r in diff.rows), default=0)
    for row in diff.rows:
        if row.phase != phase and any(r.phase for r in diff.rows):
            out += ["", phase_text(row.phase)]
        phase = row.phase
        out.append(f"  [{status_text(row.status):<{width}}] {show(row.cause)}")
        out += [f"      {line}" for line in row_lines(row)]
        out += ["      " + t("to check: {command}", command=c) for c in commands(row)]
    if not diff.rows:
        out += ["", t("No rule ties a cause to this symptom.")]
    for error in diff.rule_errors:
        out.append(t("rule error: {error}", error=show(error)))
    return "\n".join(out) + "\n"
