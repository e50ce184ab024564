"""The diff as Markdown, for tickets and chat: plain text built line by line (the scan's
report uses a template for its many sections; the diff has three tables). Host text goes
through the scan's own filters (reports/markdown.py: ``mdtext``, ``mdcode``)."""

from __future__ import annotations

from doctor.diff.model import INCOMPLETE, Diff
from doctor.i18n import t
from reports.diff_common import (change_text, counts, engine_state_text, entity_of, figure, grouped,
                                 identity_text, severity_text, side_text, state_text, status_word,
                                 verdict_text, whole_text)
from reports.markdown import mdcode, mdtext


def render(diff: Diff, verbose: bool = False) -> str:
    b, a = diff.before, diff.after
    verdict = mdtext(verdict_text(diff.verdict))
    out = [t("# llm-doctor diff: {verdict}", verdict=verdict), "", f"**{verdict}** — {mdtext(diff.line)}", "",
           f"| | {t('source')} | {t('host')} | {t('level')} | {t('taken')} | {t('engine')} |",
           "|---|---|---|---|---|---|"]
    for name, side in (("before", b), ("after", a)):
        out.append(f"| {side_text(name)} | {mdcode(side.source, True)} | {mdtext(side.hostname)} | "
                   f"{mdtext(side.level)} | {mdtext(side.started_at)} | "
                   f"{mdtext(engine_state_text(side.engine_state))} |")
    out += ["", t("Identity: **{identity}** — {evidence}", identity=identity_text(diff.identity),
                  evidence=mdtext(t("; ").join(diff.identity_evidence))), ""]
    for why in diff.not_comparable:
        out.append("- " + t("not comparable: {why}", why=mdtext(why)))
    if diff.not_comparable:
        out.append("")
    changes = diff.changes
    out += ["## " + t("What changed"), ""]
    if changes:
        out += [f"| {t('status')} | {t('fact')} | {t('change')} | {t('ratio')} | {t('causes')} |",
                "|---|---|---|---|---|"]
        for fact, many in grouped(diff):
            if many > 1:  # an engine, GPU or model that came or went whole
                out.append(f"| {mdtext(status_word(fact))} | {mdcode(entity_of(fact), True)} | "
                           f"{whole_text(fact, many)} | | |")
                continue
            out.append(f"| {mdtext(status_word(fact))} | {mdcode(fact.id, True)} {mdtext(fact.label)} | "
                       f"{mdtext(change_text(fact))} | {mdtext(figure(fact))} | "
                       f"{mdtext(', '.join(fact.causes))} |")
    else:
        out.append(t("No CHANGED, ADDED or REMOVED fact."))
    out += ["", "## " + t("Findings"), ""]
    shown = [d for d in diff.findings if d.state != "unchanged" or verbose]
    if shown:
        out += [f"| | {t('severity')} | {t('rule')} | {t('title')} |", "|---|---|---|---|"]
        for d in shown:
            key = f" [{d.key}]" if d.key else ""
            out.append(f"| {state_text(d.state)} | {mdtext(severity_text(d.severity))} | "
                       f"{mdcode(d.rule + key, True)} | {mdtext(d.title)} |")
    else:
        out.append(t("No finding raised or cleared."))
    unchanged = sum(1 for d in diff.findings if d.state == "unchanged")
    n = counts(diff)
    out += ["", t("{same} facts the same, {incomplete} read on one side only, {unchanged} finding(s) "
                  "on both sides.", same=n.get("same", 0), incomplete=n.get(INCOMPLETE, 0),
                  unchanged=unchanged)]
    if diff.missing_facts:
        out += ["", t("Not recorded by any probe yet, so not compared: {facts}.",
                      facts=mdtext(t("; ").join(diff.missing_facts)))]
    return "\n".join(out) + "\n"
