"""``llm-doctor why`` as one self-contained HTML page: the verdict, then a table of the
candidate causes. Every text is escaped (markupsafe), as the scan's HTML report does."""

from __future__ import annotations

from markupsafe import Markup, escape

from doctor.i18n import current, t
from doctor.why.model import Differential
from reports.why_common import commands, context, heading, phase_text, row_lines, status_text, verdict

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}
table{border-collapse:collapse;width:100%}td,th{border:1px solid #ccc;padding:.4em;
vertical-align:top;text-align:left}.confirmed{background:#fde2e1}.not-checked{background:#f4f4f4}
.ruled-out{background:#e6f4ea}code{white-space:pre-wrap}"""


def _cell(lines: list[str]) -> Markup:
    return Markup("<br>").join(escape(line) for line in lines)


def render(diff: Differential) -> str:
    rows = []
    for row in diff.rows:
        check = Markup("<br>").join(Markup("<code>{}</code>").format(c) for c in commands(row))
        rows.append(Markup("<tr class=\"{}\"><td>{}</td><td>{}</td><td><code>{}</code></td>"
                           "<td>{}</td><td>{}</td></tr>").format(
            row.status, phase_text(row.phase), status_text(row.status), row.cause,
            _cell(row_lines(row)), check))
    head = Markup("<tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr>").format(
        t("phase"), t("status"), t("cause"), t("what says so"), t("to check"))
    body = Markup("").join(rows) if rows else Markup("<tr><td colspan=5>{}</td></tr>").format(
        t("No rule ties a cause to this symptom."))
    errors = Markup("").join(Markup("<p>{}</p>").format(t("rule error: {error}", error=e))
                             for e in diff.rule_errors)
    page = Markup("<!DOCTYPE html><html lang=\"{}\"><head><meta charset=\"utf-8\"><title>{}</title>"
                  "<style>{}</style></head><body><h1>{}</h1><p><strong>{}</strong></p><p>{}</p>"
                  "<table>{}{}</table>{}</body></html>\n").format(
        current().replace("_", "-"), heading(diff), Markup(STYLE), heading(diff), verdict(diff),
        context(diff), head, body, errors)
    return str(page)
