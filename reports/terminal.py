"""The terminal report (rich): verdict, findings by severity, then the probes.

Every string goes in as a ``Text`` (never as rich markup, which a command line holding
``[/x]`` would break) and through ``show``, which escapes control characters.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from doctor.i18n import t
from doctor.model import ScanReport, Severity
from doctor.redact import redact_data
from playbooks import path_of
from reports.common import (cut, evidence_text, probe_rows, probe_summary, severity_word, show,
                            status_word, symptom_text)

STYLE = {Severity.CRITICAL: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "cyan"}
STATUS_STYLE = {"ok": "green", "skipped": "dim", "error": "red", "timeout": "red"}


def verdict(report: ScanReport) -> Text:
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in Severity}
    worst = report.worst
    if worst is None or worst == Severity.INFO:
        head = Text(t("OK"), style="bold green")
        tail = t("nothing at warning or above")
    else:
        head = Text(severity_word(worst.label).upper(), style=STYLE[worst])
        tail = t("{critical} critical, {warning} warning", critical=counts[Severity.CRITICAL],
                 warning=counts[Severity.WARNING])
    if counts[Severity.INFO]:
        tail += t(", {info} info", info=counts[Severity.INFO])
    failed = sum(1 for p in report.probes if p.status in ("error", "timeout"))
    if failed:
        tail += t("; {failed} probe(s) failed", failed=failed)
    host = show(report.host.get("hostname", "?"))
    source = (t("recorded {captured_at}", captured_at=show(report.host.get("captured_at", "")))
              if report.host.get("kind") == "recorded" else t("live"))
    return Text.assemble(head, t(" — {tail} — {host} ({source}), level {level}, {duration:.1f} s",
                                 tail=tail, host=host, source=source,
                                 level=report.level.name.lower(), duration=report.duration_s))


def _playbook_line(cause: object) -> str:
    path = path_of(cause)
    if path is None:
        return t("playbook: none for cause {cause} in this llm-doctor", cause=show(cause))
    return t("playbook: llm-doctor playbook {cause}  ({path})", cause=show(cause), path=show(path))


def _findings(report: ScanReport) -> list[RenderableType]:
    blocks: list[RenderableType] = []
    for f in report.findings:
        cause = show(f.cause)
        symptoms = f.symptoms if isinstance(f.symptoms, (list, tuple)) else [f.symptoms]
        # each part is cut (show); their join is cut as well, so that a saved scan's many
        # symptoms or evidence keys are one bounded line to wrap, never megabytes
        rows = cut(t(", ").join(symptom_text(s) for s in symptoms))
        # keys masked like values, and a value under a secret's name whole (doctor/redact.py)
        shown = redact_data(f.evidence if isinstance(f.evidence, dict) else {"value": f.evidence})
        missing = f.missing if isinstance(f.missing, dict) else {}
        evidence = cut(", ".join(f"{show(k)}={evidence_text(v, missing.get(k))}"
                                 for k, v in shown.items()))
        details = [
            Text(t("{rule} · cause {cause} · rows {rows}", rule=show(f.rule), cause=cause, rows=rows),
                 style="dim"),
            Text(t("evidence: {evidence}", evidence=evidence)),
            Text.assemble((t("do: "), "bold"), show(f.remediation)),
            Text(_playbook_line(f.cause), style="dim"),
        ]
        blocks.append(Text.assemble((f"[{severity_word(f.severity.label)}] ", STYLE[f.severity]),
                                    (show(f.title), "bold")))
        blocks += [Padding(line, (0, 0, 0, 2)) for line in details]  # wrapped lines stay indented
        blocks.append(Text(""))
    return blocks


def findings(report: ScanReport) -> Group:
    """The findings alone, as the report shows them (``llm-doctor collective`` prints them
    under its own lines)."""
    return Group(*_findings(report))


def _probes(report: ScanReport, verbose: bool) -> Table:
    table = Table(title=t("Probes"), title_justify="left", show_edge=False, pad_edge=False)
    # a family's row names its probes in braces (engine.{discovery,metrics,…}): folded, it
    # leaves the other columns their room at 80 columns
    table.add_column(t("probe"), overflow="fold", max_width=36)
    table.add_column(t("status"))
    table.add_column(t("time"), justify="right")
    table.add_column(t("what it saw"), overflow="fold")
    rows = probe_rows([{"name": show(p.name), "status": p.status, "duration_s": p.duration_s,
                        "summary": probe_summary(p)} for p in report.probes], verbose)
    for row in rows:
        table.add_row(Text(row["name"]), Text(status_word(row["status"]), style=STATUS_STYLE.get(row["status"], "")),
                      f"{row['duration_s']:.2f}s", Text(row["summary"]))
    if len(rows) < len(report.probes):
        table.caption = t("probes skipped for one reason share a row; --verbose shows each")
        table.caption_justify = "left"
    return table


def render(report: ScanReport, console: Console, verbose: bool = False) -> None:
    """The report; ``verbose`` gives every probe its own row (else a family skipped for one
    reason is one row)."""
    parts: list[RenderableType] = [verdict(report), Text("")]
    parts += _findings(report)
    for message in report.rule_errors:
        parts.append(Text(t("rule error: {message}", message=show(message)), style="red"))
    parts.append(_probes(report, verbose))
    console.print(Group(*parts))
