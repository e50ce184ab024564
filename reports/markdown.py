"""The Markdown report, for incident tickets and chat: rendered from a jinja2 template.

Text from the host reaches a viewer that renders Markdown (and often HTML), so it goes
through a filter: ``mdtext`` for prose and table cells (control characters escaped, and
the characters that would start a link, tag, emphasis, code span or table cell shown as
themselves), ``mdcode`` for a code span (a fence longer than any backtick run inside).
"""

from __future__ import annotations

import re

import jinja2

from doctor.model import ScanReport
from reports.common import evidence_text, probe_rows, probe_summary, show
from reports.json_report import to_dict

# CommonMark lets a backslash escape any ASCII punctuation; these are the ones that can
# start markup mid-line: links and images, HTML, code spans, table cells, emphasis. (An
# underscore inside a word starts nothing, so cpu_cores stays readable in the raw text.)
_MARKUP = re.compile(r"([\\`*\[\]<>|])")
_BACKTICKS = re.compile(r"`+")


def mdtext(value: object) -> str:
    """Host text as Markdown prose or a table cell: one line, shown, never obeyed."""
    return _MARKUP.sub(r"\\\1", show(value))


def mdvalue(value: object, reason: object = None) -> str:
    """An evidence value as a table cell: None says why (``reason``, else ``—``)."""
    return _MARKUP.sub(r"\\\1", evidence_text(value, reason))


def mdcode(value: object, in_table: bool = False) -> str:
    """Host text as a code span. GFM splits table cells on ``|`` even inside code spans, so
    a cell's ``|`` is escaped (GFM's own rule); elsewhere it stays as it is."""
    text = show(value)
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    if in_table:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def mdrule(value: object) -> str:
    """A rule file's own Markdown (a remediation with `commands`), kept on one line."""
    text = value if isinstance(value, str) else show(value)
    return show(" ".join(text.splitlines()))


def render(report: ScanReport, verbose: bool = False) -> str:
    """The report; ``verbose`` gives every probe its own row (else a family skipped for one
    reason is one row)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=False,  # Markdown, not HTML: the filters above do its escaping
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["mdtext"] = mdtext
    env.filters["mdcode"] = mdcode
    env.filters["mdcell"] = mdtext
    env.filters["mdcodecell"] = lambda value: mdcode(value, in_table=True)
    env.filters["mdrule"] = mdrule
    env.filters["mdvalue"] = mdvalue
    data = to_dict(report)
    for probe, result in zip(data["probes"], report.probes):
        probe["summary"] = probe_summary(result)
    data["probes"] = probe_rows(data["probes"], verbose)
    data["grouped"] = len(data["probes"]) < len(report.probes)
    counts = {s: sum(1 for f in data["findings"] if f["severity"] == s)
              for s in ("critical", "warning", "info")}
    return env.get_template("report.md.j2").render(counts=counts, **data)
