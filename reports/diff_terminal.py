"""The diff on a terminal (rich): the verdict first, then the changes best explanation first,
the findings raised and cleared, and what could not be compared.

Every string goes in as a ``Text`` through ``show`` (reports/common.py), never as markup.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from doctor.diff.model import IMPROVEMENT, INCOMPLETE, NO_CHANGE, NOT_COMPARABLE, REGRESSION, Diff, Side
from doctor.i18n import t
from reports.common import show
from reports.diff_common import (change_text, counts, engine_state_text, entity_of, figure, grouped,
                                 identity_text, severity_text, state_text, status_word, verdict_text,
                                 whole_text)

STYLE = {REGRESSION: "bold red", IMPROVEMENT: "bold green", NO_CHANGE: "bold green",
         NOT_COMPARABLE: "bold yellow"}
FINDING_STYLE = {"raised": "red", "cleared": "green", "unchanged": "dim"}


def _side(side: Side) -> dict[str, str]:
    return {"source": show(side.source), "host": show(side.hostname), "level": show(side.level),
            "taken": show(side.started_at), "engine": engine_state_text(side.engine_state)}


def render(diff: Diff, console: Console, verbose: bool = False) -> None:
    console.print(Text.assemble((verdict_text(diff.verdict).upper(), STYLE[diff.verdict]), " — ",
                                show(diff.line)))
    console.print(Text(t("before: {source} ({host}, {level}, {taken}, engine {engine})",
                         **_side(diff.before))))
    console.print(Text(t("after:  {source} ({host}, {level}, {taken}, engine {engine})",
                         **_side(diff.after))))
    console.print(Text(t("identity: {identity} — {evidence}", identity=identity_text(diff.identity),
                         evidence=show(t("; ").join(diff.identity_evidence))), style="dim"))
    for why in diff.not_comparable:
        console.print(Text(t("not comparable: {why}", why=show(why)), style="yellow"))
    changes = diff.changes
    if changes:
        table = Table(title=t("What changed (best explanation first)"), show_lines=False, expand=False)
        for column in (t("status"), t("fact"), t("change"), t("ratio"), t("causes")):
            table.add_column(column, overflow="fold")
        for fact, many in grouped(diff):
            if many > 1:  # an engine, GPU or model that came or went whole
                table.add_row(Text(status_word(fact)), Text(show(entity_of(fact))),
                              Text(whole_text(fact, many)),
                              Text(""), Text(""))
                continue
            table.add_row(Text(status_word(fact)), Text(f"{show(fact.id)}\n{show(fact.label)}"),
                          Text(change_text(fact)), Text(figure(fact)),
                          Text(show(", ".join(fact.causes))))
        console.print(table)
    elif diff.comparable:
        console.print(Text(t("no CHANGED, ADDED or REMOVED fact"), style="green"))
    moved = [d for d in diff.findings if d.state != "unchanged" or verbose]
    if moved:
        table = Table(title=t("Findings"), expand=False)
        for column in ("", t("severity"), t("rule"), t("title")):
            table.add_column(column, overflow="fold")
        for d in moved:
            table.add_row(Text(state_text(d.state), style=FINDING_STYLE[d.state]),
                          Text(severity_text(d.severity)),
                          Text(show(d.rule + (f" [{d.key}]" if d.key else ""))), Text(show(d.title)))
        console.print(table)
    unchanged = sum(1 for d in diff.findings if d.state == "unchanged")
    n = counts(diff)
    console.print(Text(t("{same} facts the same, {incomplete} read on one side only (incomplete), "
                         "{unchanged} finding(s) on both sides", same=n.get("same", 0),
                         incomplete=n.get(INCOMPLETE, 0), unchanged=unchanged), style="dim"))
    if verbose:
        for fact in diff.facts:
            if fact.status == INCOMPLETE:
                console.print(Text(t("incomplete: {id}: {note}", id=show(fact.id), note=show(fact.note)),
                                   style="dim"))
    if diff.missing_facts:
        console.print(Text(t("not recorded by any probe yet, so not compared: {facts}",
                             facts=show(t("; ").join(diff.missing_facts))), style="dim"))
