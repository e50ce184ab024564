"""``llm-doctor why`` as Markdown, for tickets and chat: the verdict, then one table row per
candidate cause (status, cause, what says so, what would check it)."""

from __future__ import annotations

from doctor.i18n import t
from doctor.why.model import Differential
from reports.markdown import mdcode, mdtext
from reports.why_common import commands, context, heading, phase_text, row_lines, status_text, verdict


def render(diff: Differential) -> str:
    out = [f"# {mdtext(heading(diff))}", "", f"**{mdtext(verdict(diff))}**", "",
           mdtext(context(diff)), ""]
    if diff.rows:
        phased = any(r.phase for r in diff.rows)
        out += [f"| {t('phase')} | {t('status')} | {t('cause')} | {t('what says so')} | "
                f"{t('to check')} |" if phased else
                f"| {t('status')} | {t('cause')} | {t('what says so')} | {t('to check')} |",
                "|---|---|---|---|---|" if phased else "|---|---|---|---|"]
        for row in diff.rows:
            why = "<br>".join(mdtext(line) for line in row_lines(row))
            check = "<br>".join(mdcode(c, True) for c in commands(row))
            cells = [mdtext(status_text(row.status)), mdcode(row.cause, True), why, check]
            if phased:
                cells.insert(0, mdtext(phase_text(row.phase)))
            out.append("| " + " | ".join(cells) + " |")
    else:
        out.append(t("No rule ties a cause to this symptom."))
    for error in diff.rule_errors:
        out += ["", "- " + t("rule error: {error}", error=mdtext(error))]
    return "\n".join(out) + "\n"
