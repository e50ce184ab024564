"""What every renderer of ``llm-doctor why`` shares: the verdict line, a row's status and
phase in words, and the lines that say why a row is what it is. Every string from a record
goes through ``show`` (reports/common.py): shown, never obeyed."""

from __future__ import annotations

from doctor.i18n import t, translated
from doctor.i18n.text import render
from doctor.model import Finding
from doctor.why.model import CONFIRMED, NOT_CHECKED, RULED_OUT, CauseRow, Differential, RuleCheck
from doctor.why.order import PHASE_WORDS
from reports.common import evidence_text, severity_word, show, symptom_text

MAX_NAMED = 6  # causes named in the verdict line before "…"


def status_text(status: str) -> str:
    words = {CONFIRMED: t("confirmed"), RULED_OUT: t("ruled out"), NOT_CHECKED: t("not checked")}
    return words.get(status, show(status))


def phase_text(phase: str | None) -> str:
    return translated(PHASE_WORDS[phase]) if phase in PHASE_WORDS else t("other causes")


def _named(rows: tuple[CauseRow, ...]) -> str:
    names = [show(r.cause) for r in rows[:MAX_NAMED]]
    return ", ".join(names) + (", …" if len(rows) > MAX_NAMED else "")


def verdict(diff: Differential) -> str:
    """"most likely: …; ruled out: n; not checked: …", the differential in one line."""
    likely = diff.likely
    if likely:
        head = t("most likely: {causes}", causes=", ".join(
            t("{cause} ({severity})", cause=show(r.cause), severity=severity_word(r.worst.label))
            if r.worst is not None else show(r.cause) for r in likely))
    else:
        head = t("nothing confirmed")
    unchecked = diff.with_status(NOT_CHECKED)
    tail = t("; ruled out: {count}", count=len(diff.with_status(RULED_OUT)))
    tail += (t("; not checked: {count} ({causes})", count=len(unchecked), causes=_named(unchecked))
             if unchecked else t("; not checked: none"))
    return head + tail


def heading(diff: Differential) -> str:
    return t("llm-doctor why {symptom}", symptom=symptom_text(diff.symptom))


def context(diff: Differential) -> str:
    host = show(diff.host.get("hostname", "?"))
    source = (t("recorded {captured_at}", captured_at=show(diff.host.get("captured_at", "")))
              if diff.host.get("kind") == "recorded" else t("live"))
    requests = t("requests to engines allowed") if diff.requests else t("no requests to engines")
    return t("{host} ({source}), level {level}, {requests}, {duration:.1f} s", host=host,
             source=source, level=diff.level.name.lower(), requests=requests,
             duration=diff.duration_s)


def finding_lines(f: Finding) -> list[str]:
    evidence = ", ".join(f"{show(k)}={evidence_text(v, (f.missing or {}).get(k))}"
                         for k, v in f.evidence.items())
    return [t("{severity}: {title}", severity=severity_word(f.severity.label),
              title=show(render(f.title))),
            t("evidence: {evidence}", evidence=evidence),
            t("fix: {remediation}", remediation=show(render(f.remediation))),
            t("playbook: llm-doctor playbook {cause}", cause=show(f.cause))]


def check_lines(check: RuleCheck) -> list[str]:
    """Why one rule is confirmed, ruled out or not checked, one line a part."""
    lines: list[str] = []
    for f in check.findings:
        lines += finding_lines(f)
    if check.why is not None:
        lines.append(show(render(check.why)))
    for item in check.items:
        said = t("; ").join(show(render(p)) for p in item.parts)
        lines.append(t("{item}: {why}", item=show(item.item), why=said) if item.item else said)
    if check.more_items:
        lines.append(t("… and {count} more item(s)", count=check.more_items))
    return lines


def commands(row: CauseRow) -> list[str]:
    """The commands that would check a row's rules, each once."""
    seen: list[str] = []
    for check in row.checks:
        if check.status == NOT_CHECKED and check.command and check.command not in seen:
            seen.append(check.command)
    return seen


def row_lines(row: CauseRow) -> list[str]:
    """A row's lines; a cause with several rules names each rule before its lines."""
    lines: list[str] = []
    many = len(row.checks) > 1
    for check in row.checks:
        own = check_lines(check)
        if many:
            lines.append(t("rule {rule} ({status}):", rule=show(check.rule),
                           status=status_text(check.status)))
            lines += ["  " + line for line in own]
        else:
            lines += own
    return lines
