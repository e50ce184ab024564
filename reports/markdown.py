"""The Markdown report, for incident tickets and chat: rendered from a jinja2 template."""

from __future__ import annotations

import jinja2

from doctor.model import ScanReport
from reports.json_report import to_dict
from reports.summaries import summary


def _cell(value: object) -> str:
    """A value safe inside a Markdown table cell."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def render(report: ScanReport) -> str:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=False,  # Markdown, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["mdcell"] = _cell
    env.filters["mdcode"] = lambda text: f"`{text}`"
    data = to_dict(report)
    for probe, result in zip(data["probes"], report.probes):
        probe["summary"] = summary(result)
    counts = {s: sum(1 for f in data["findings"] if f["severity"] == s)
              for s in ("critical", "warning", "info")}
    return env.get_template("report.md.j2").render(counts=counts, **data)
