"""The Markdown report, for incident tickets and chat: rendered from a jinja2 template.

Text from the host reaches a viewer that renders Markdown (and often HTML), so it goes
through a filter: ``mdtext`` for prose and table cells (control characters escaped, and
the characters that would start a link, tag, emphasis, code span or table cell shown as
themselves), ``mdcode`` for a code span (a fence longer than any backtick run inside).
"""

from __future__ import annotations

import functools
import re

import jinja2

from doctor.i18n import current, t
from doctor.model import ScanReport
from doctor.vocabulary import SYMPTOM_WORDS, symptom_words
from reports.common import evidence_text, probe_rows, probe_summary, severity_word, show, status_word
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


def mdsymptom(value: object) -> str:
    """A symptom row id as a code span, and in a translated report the row's words after it."""
    code = mdcode(value)
    if current() == "en" or not isinstance(value, str) or value not in SYMPTOM_WORDS:
        return code
    return f"{code} {mdtext(symptom_words(value))}"


def verdict_word(verdict: object) -> str:
    return t("ok") if verdict == "ok" else severity_word(verdict)


def kind_word(kind: object) -> str:
    """``recorded`` or ``live`` (a host's kind) as the report's language says it."""
    return {"recorded": t("recorded"), "live": t("live")}.get(kind, show(kind)) if isinstance(
        kind, str) else show(kind)


def _words(data: dict, counts: dict[str, int]) -> dict[str, str]:
    """The template's own words in the report's language (the template holds no English)."""
    host = data.get("host") or {}
    return {
        "title": t("llm-doctor report: {hostname}", hostname=mdtext(host.get("hostname", ""))),
        "verdict": t("Verdict:"), "host": t("Host:"), "scan": t("Scan:"),
        "counts": t("{critical} critical, {warning} warning, {info} info", **counts),
        "captured": t(", captured "), "open": t(" ("), "close": t(")"), "comma": t(", "),
        "scan_line": t("level {level}, started {started}, {duration:.1f} s, llm-doctor {version}",
                       level=data["level"], started=mdtext(data["started_at"]),
                       duration=data["duration_s"], version=data["tool"]["version"]),
        "findings": t("Findings"), "no_findings": t("No findings."), "colon": t(": "),
        "rule": t("Rule:"), "cause": t("cause:"), "symptoms": t("symptom rows:"), "do": t("Do:"),
        "playbook": t("Playbook:"), "evidence": t("evidence"), "value": t("value"),
        "rule_errors": t("Rule errors"), "replaced": t("Values JSON cannot hold"),
        "probes": t("Probes"), "probe": t("probe"), "status": t("status"), "time": t("time"),
        "saw": t("what it saw"),
        "grouped": t("Probes of one family skipped for one reason share a row; `--verbose` shows each."),
    }


@functools.lru_cache(maxsize=1)  # one a process: compiling the template took 20 ms a report
def _environment() -> jinja2.Environment:
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
    env.filters["mdsymptom"] = mdsymptom
    env.filters["severity"] = severity_word
    env.filters["status"] = status_word
    return env


def render(report: ScanReport, verbose: bool = False) -> str:
    """The report; ``verbose`` gives every probe its own row (else a family skipped for one
    reason is one row)."""
    env = _environment()
    data = to_dict(report)
    for probe, result in zip(data["probes"], report.probes):
        probe["summary"] = probe_summary(result)
    data["probes"] = probe_rows(data["probes"], verbose)
    data["grouped"] = len(data["probes"]) < len(report.probes)
    counts = {s: sum(1 for f in data["findings"] if f["severity"] == s)
              for s in ("critical", "warning", "info")}
    host = dict(data["host"])
    if "kind" in host:
        host["kind"] = kind_word(host["kind"])
    return env.get_template("report.md.j2").render(
        **{**data, "host": host}, counts=counts, w=_words(data, counts),
        verdict_word=verdict_word(data["verdict"]))
