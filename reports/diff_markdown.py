"""The diff as Markdown, for tickets and chat: plain text built line by line (the scan's
report uses a template for its many sections; the diff has three tables). Host text goes
through the scan's own filters (reports/markdown.py: ``mdtext``, ``mdcode``)."""

from __future__ import annotations

from doctor.diff.model import INCOMPLETE, Diff
from reports.diff_common import change_text, counts, entity_of, figure, grouped, status_word
from reports.markdown import mdcode, mdtext


def render(diff: Diff, verbose: bool = False) -> str:
    b, a = diff.before, diff.after
    out = [f"# llm-doctor diff: {mdtext(diff.verdict)}", "", f"**{mdtext(diff.verdict)}** — {mdtext(diff.line)}", "",
           "| | source | host | level | taken | engine |", "|---|---|---|---|---|---|"]
    for name, side in (("before", b), ("after", a)):
        out.append(f"| {name} | {mdcode(side.source, True)} | {mdtext(side.hostname)} | "
                   f"{mdtext(side.level)} | {mdtext(side.started_at)} | {mdtext(side.engine_state)} |")
    out += ["", f"Identity: **{diff.identity}** — {mdtext('; '.join(diff.identity_evidence))}", ""]
    for why in diff.not_comparable:
        out.append(f"- not comparable: {mdtext(why)}")
    if diff.not_comparable:
        out.append("")
    changes = diff.changes
    out += ["## What changed", ""]
    if changes:
        out += ["| status | fact | change | ratio | causes |", "|---|---|---|---|---|"]
        for fact, many in grouped(diff):
            if many > 1:  # an engine, GPU or model that came or went whole
                out.append(f"| {mdtext(status_word(fact))} | {mdcode(entity_of(fact), True)} | "
                           f"{many} facts {fact.status} | | |")
                continue
            out.append(f"| {mdtext(status_word(fact))} | {mdcode(fact.id, True)} {mdtext(fact.label)} | "
                       f"{mdtext(change_text(fact))} | {mdtext(figure(fact))} | "
                       f"{mdtext(', '.join(fact.causes))} |")
    else:
        out.append("No CHANGED, ADDED or REMOVED fact.")
    out += ["", "## Findings", ""]
    shown = [d for d in diff.findings if d.state != "unchanged" or verbose]
    if shown:
        out += ["| | severity | rule | title |", "|---|---|---|---|"]
        for d in shown:
            key = f" [{d.key}]" if d.key else ""
            out.append(f"| {d.state} | {mdtext(d.severity)} | {mdcode(d.rule + key, True)} | "
                       f"{mdtext(d.title)} |")
    else:
        out.append("No finding raised or cleared.")
    unchanged = sum(1 for d in diff.findings if d.state == "unchanged")
    n = counts(diff)
    out += ["", f"{n.get('same', 0)} facts the same, {n.get(INCOMPLETE, 0)} read on one side only, "
                f"{unchanged} finding(s) on both sides."]
    if diff.missing_facts:
        out += ["", "Not recorded by any probe yet, so not compared: "
                + mdtext("; ".join(diff.missing_facts)) + "."]
    return "\n".join(out) + "\n"
