"""The diff on a terminal (rich): the verdict first, then the changes best explanation first,
the findings raised and cleared, and what could not be compared.

Every string goes in as a ``Text`` through ``show`` (reports/common.py), never as markup.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from doctor.diff.model import IMPROVEMENT, INCOMPLETE, NO_CHANGE, NOT_COMPARABLE, REGRESSION, Diff
from reports.common import show
from reports.diff_common import change_text, counts, entity_of, figure, grouped, status_word

STYLE = {REGRESSION: "bold red", IMPROVEMENT: "bold green", NO_CHANGE: "bold green",
         NOT_COMPARABLE: "bold yellow"}
FINDING_STYLE = {"raised": "red", "cleared": "green", "unchanged": "dim"}


def render(diff: Diff, console: Console, verbose: bool = False) -> None:
    console.print(Text.assemble((diff.verdict.upper(), STYLE[diff.verdict]), " — ", show(diff.line)))
    b, a = diff.before, diff.after
    console.print(Text(f"before: {show(b.source)} ({show(b.hostname)}, {show(b.level)}, "
                       f"{show(b.started_at)}, engine {b.engine_state})"))
    console.print(Text(f"after:  {show(a.source)} ({show(a.hostname)}, {show(a.level)}, "
                       f"{show(a.started_at)}, engine {a.engine_state})"))
    console.print(Text(f"identity: {diff.identity} — " + show("; ".join(diff.identity_evidence)),
                       style="dim"))
    for why in diff.not_comparable:
        console.print(Text(f"not comparable: {show(why)}", style="yellow"))
    changes = diff.changes
    if changes:
        table = Table(title="What changed (best explanation first)", show_lines=False, expand=False)
        for column in ("status", "fact", "change", "ratio", "causes"):
            table.add_column(column, overflow="fold")
        for fact, many in grouped(diff):
            if many > 1:  # an engine, GPU or model that came or went whole
                table.add_row(Text(status_word(fact)), Text(show(entity_of(fact))),
                              Text(f"{many} facts {fact.status}"), Text(""), Text(""))
                continue
            table.add_row(Text(status_word(fact)), Text(f"{show(fact.id)}\n{show(fact.label)}"),
                          Text(change_text(fact)), Text(figure(fact)),
                          Text(show(", ".join(fact.causes))))
        console.print(table)
    elif diff.comparable:
        console.print(Text("no CHANGED, ADDED or REMOVED fact", style="green"))
    moved = [d for d in diff.findings if d.state != "unchanged" or verbose]
    if moved:
        table = Table(title="Findings", expand=False)
        for column in ("", "severity", "rule", "title"):
            table.add_column(column, overflow="fold")
        for d in moved:
            table.add_row(Text(d.state, style=FINDING_STYLE[d.state]), Text(d.severity),
                          Text(show(d.rule + (f" [{d.key}]" if d.key else ""))), Text(show(d.title)))
        console.print(table)
    unchanged = sum(1 for d in diff.findings if d.state == "unchanged")
    n = counts(diff)
    console.print(Text(f"{n.get('same', 0)} facts the same, {n.get(INCOMPLETE, 0)} read on one side "
                       f"only (incomplete), {unchanged} finding(s) on both sides", style="dim"))
    if verbose:
        for fact in diff.facts:
            if fact.status == INCOMPLETE:
                console.print(Text(f"incomplete: {show(fact.id)}: {show(fact.note)}", style="dim"))
    if diff.missing_facts:
        console.print(Text("not recorded by any probe yet, so not compared: "
                           + show("; ".join(diff.missing_facts)), style="dim"))
