"""The diff as one self-contained HTML page (``diff --format html``), as reports/html.py
renders a scan: no script, no external stylesheet, font or image, a Content-Security-Policy
of ``default-src 'none'``, every value escaped by jinja2's autoescape and masked by ``show``
first (reports/common.py; a secret's fact holds neither value and reads "changed").

The page: the verdict line, both sides and whether they are one host in comparable states,
the changes with a before and an after column (best explanation first, each cause id linked
to its playbook further down the page), the findings raised, cleared and unchanged, and each
changed number drawn as a before bar and an after bar with the noise floor it was held to
(reports/charts.py).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jinja2
from markupsafe import Markup

from doctor import display
from doctor.diff.model import (ADDED, CHANGED, IMPROVEMENT, INCOMPLETE, NO_CHANGE, NOT_COMPARABLE,
                               REGRESSION, REMOVED, SECRET, Diff, Fact)
from doctor.diff.noise import ABSOLUTE, MEASURED, THROUGHPUT
from doctor.i18n import current, t
from doctor.values import finite_float
from doctor.vocabulary import CAUSES
from reports.charts import Bar, bars
from reports.common import show
from reports.diff_common import (counts, engine_state_text, entity_of, figure, grouped, identity_text,
                                 rows, severity_text, side_text, status_word, value, verdict_text,
                                 whole_text)
from reports.html import _playbook  # one renderer of a playbook's sections for both pages

BADGE = {REGRESSION: "critical", IMPROVEMENT: "ok", NO_CHANGE: "ok", NOT_COMPARABLE: "warning"}
# Plots of changed numbers: each is a few hundred bytes of SVG; an 8-GPU host whose every
# figure moved has 24 bandwidths, and a page of more says no more than the table does.
MAX_PLOTS = 24
TITLE_CHARS = 70  # 12 px bold text is about 7.5 px a character, GPU UUIDs' digits more: a plot is 560 px wide
# The system's fonts, CJK ones included (the page stays offline: no web font); the scan's
# page (reports/html.py) uses the same stack
FONT_STACK = ('system-ui, -apple-system, "Segoe UI", "PingFang SC", "Hiragino Sans GB", "Microsoft YaHei", '
              '"Noto Sans CJK SC", "Source Han Sans SC", "WenQuanYi Micro Hei", sans-serif')
HTML_LANG = {"en": "en", "zh_CN": "zh-CN"}  # the language's BCP 47 tag for <html lang>


def _unit(fact: Fact) -> str:
    """The unit a fact's label ends with ("HBM copy (D2D), GB/s" → GB/s; the Chinese label's
    full-width comma too), else its label."""
    head, sep, tail = fact.label.replace("，", ", ").rpartition(", ")
    if sep and tail and len(tail) <= 12:
        return tail
    if fact.kind == THROUGHPUT:
        return "tokens/s"
    return fact.label


def _band(fact: Fact, before: float) -> tuple[float, float] | None:
    """The values around ``before`` that the after side had to leave to count as CHANGED."""
    if fact.kind not in MEASURED or fact.floor is None:
        return None
    if fact.kind in ABSOLUTE:
        width = ABSOLUTE[fact.kind]
        return max(before - width, 0.0), before + width
    return before * (1 - fact.floor), before * (1 + fact.floor)


def _value(fact: Fact, side: str) -> str:
    """One side's value as the scan's page writes numbers (a rate of 2400.0 is 2400)."""
    raw = fact.before if side == "before" else fact.after
    if fact.kind != SECRET and isinstance(raw, float) and math.isfinite(raw):
        return show(display.written(raw))
    return value(fact, side)


def _ratio(fact: Fact) -> str:
    """The ratio and the floor, the floor of an absolute kind in its unit ("floor ±1024 MiB"),
    not as the 0% its relative floor reads."""
    return figure(fact)


def _plot(fact: Fact) -> Markup:
    before, after = float(fact.before), float(fact.after)
    unit = _unit(fact)
    band = _band(fact, before)
    if band is None:
        floor_text = t("no noise floor: a setting, any difference is a change")
        marks: tuple[tuple[str, float], ...] = ()
    else:
        name = (t("noise floor ±{width:g} {unit}", width=ABSOLUTE[fact.kind], unit=unit)
                if fact.kind in ABSOLUTE else t("noise floor ±{floor:.0%}", floor=fact.floor))
        floor_text = t("{name} around before: {low} to {high}", name=name, low=display.written(band[0]),
                       high=display.written(band[1]))
        marks = ((name, band[0]), (name, band[1]))
    suffix = "" if unit == fact.label else f" {unit}"
    ratio = f" (x{fact.ratio:.2f})" if fact.ratio is not None else ""
    said_before, said_after = side_text("before"), side_text("after")
    rows_ = [Bar(said_before, ((said_before, before),), marks, f"{display.written(before)}{suffix}"),
             Bar(said_after, ((said_after, after),), marks, f"{display.written(after)}{suffix}{ratio}")]
    title = show(t("{label}: {entity}", label=fact.label, entity=entity_of(fact))
                 if entity_of(fact) != fact.id else fact.label)
    if len(title) > TITLE_CHARS:  # a model's path: the plot's <desc> holds the whole id
        title = title[:TITLE_CHARS - 1] + "…"
    desc = show(t("{id}: before {before}, after {after}; {floor}", id=fact.id,
                  before=display.written(before), after=display.written(after) + suffix + ratio,
                  floor=floor_text))
    return Markup(bars(title, desc, show(unit), rows_))  # noqa: S704 (reports/charts.py escapes every text)


def plotted(diff: Diff) -> list[Fact]:
    """The changes whose both sides are numbers, best explanation first (a secret never)."""
    return [f for f in diff.changes if f.status == CHANGED and f.kind != SECRET
            and finite_float(f.before) is not None and finite_float(f.after) is not None]


def _causes(causes: tuple[str, ...]) -> list[tuple[str, str]]:
    """Each cause id shown, and the anchor of its playbook on the page ("" when it has none:
    an id this version does not know)."""
    return [(show(c), f"playbook-{c}" if c in CAUSES else "") for c in causes]


def _row(fact: Fact, many: int) -> dict[str, Any]:
    if many > 1:  # an engine, GPU or model that came or went whole
        return {"status": status_word(fact), "state": fact.status, "id": show(entity_of(fact)),
                "label": whole_text(fact, many), "whole": True, "causes": []}
    row: dict[str, Any] = {
        "status": status_word(fact), "state": fact.status, "id": show(fact.id),
        "label": show(fact.label), "whole": False, "secret": fact.kind == SECRET,
        "before": _value(fact, "before"), "after": _value(fact, "after"), "ratio": _ratio(fact),
        "numbers": finite_float(fact.before) is not None or finite_float(fact.after) is not None,
        "direction": fact.direction, "causes": _causes(fact.causes), "note": ""}
    if fact.kind != SECRET and fact.note and fact.note[:1] in "+-" \
            and fact.status in (ADDED, REMOVED, CHANGED):
        row["note"] = show(fact.note)  # the argv form: + --enforce-eager
    return row


def words() -> dict[str, str]:
    """The page's own words (headings, column names, legends) in the current language; the
    template writes no English of its own."""
    return {
        "page": t("llm-doctor diff: {host} {verdict}"), "heading": t("llm-doctor diff: {host}"),
        "compared": t("What was compared"), "source": t("source"), "host": t("host"),
        "level": t("level"), "taken": t("taken"), "engine": t("engine"), "identity": t("Identity:"),
        "not_comparable": t("Not comparable"), "no_figure": t("no measured figure is judged."),
        "changed": t("What changed (best explanation first)"), "status": t("status"),
        "fact": t("fact"), "before": t("before"), "after": t("after"), "ratio": t("ratio"),
        "causes": t("causes"), "secret": t("changed (neither value is shown)"),
        "none_changed": t("No CHANGED, ADDED or REMOVED fact."),
        "nothing_hosts": t("Nothing compared: two different hosts."),
        "nothing_states": t("Nothing compared: the states are not comparable."),
        "one_side": t("Read on one side only ({n})"), "why": t("why"),
        "figures": t("Changed figures, before and after"),
        "figures_legend": t("Each bar pair is one figure; the dashed ticks are the noise floor around "
                            "the before value\n(a measured figure is CHANGED only outside it). A setting "
                            "has no floor."),
        "unplotted": t("{n} more changed figure(s) not drawn; the table above lists each."),
        "findings": t("Findings"), "raised": t("Raised ({n})"), "cleared": t("Cleared ({n})"),
        "unchanged": t("Unchanged ({n})"), "severity": t("severity"), "rule": t("rule"),
        "cause": t("cause"), "title": t("title"), "none": t("None."), "both_sides": t("On both sides"),
        "totals": t("{same} facts the same, {incomplete} read on one side only (incomplete),\n"
                    "{unchanged} finding(s) on both sides."),
        "missing": t("Not recorded by any probe yet, so not compared: {facts}."),
        "playbooks": t("Playbooks of the causes named"), "playbook": t("Playbook"),
        "playbook_summary": t("What it means, how to confirm and fix it"),
    }


@functools.lru_cache(maxsize=1)  # one a process: its templates compiled once
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                              autoescape=True, trim_blocks=True, lstrip_blocks=True)


def render(diff: Diff, verbose: bool = False) -> str:
    """The page. ``verbose`` lists the findings on both sides too (else only their count)."""
    changes = [_row(f, n) for f, n in grouped(diff)]
    incomplete = [{"id": show(f.id), "label": show(f.label), "before": _value(f, "before"),
                   "after": _value(f, "after"), "note": show(f.note)}
                  for f in rows(diff) if f.status == INCOMPLETE]
    findings = {state: [{"rule": show(d.rule), "key": show(d.key), "severity": show(d.severity),
                         "severity_text": show(severity_text(d.severity)),
                         "title": show(d.title), "cause": _causes((d.cause,))[0]}
                        for d in diff.findings if d.state == state]
                for state in ("raised", "cleared", "unchanged")}
    figures = plotted(diff)
    linked = dict.fromkeys(c for f in diff.changes for c in f.causes)
    linked.update(dict.fromkeys(d.cause for d in diff.findings if d.state != "unchanged"))
    playbooks = [(c, show(c), sections) for c in linked if c in CAUSES and (sections := _playbook(c))]
    n = counts(diff)
    sides = [(side_text(name), {k: show(v) for k, v in (("source", s.source), ("host", s.hostname),
                                                        ("level", s.level), ("taken", s.started_at),
                                                        ("engine", engine_state_text(s.engine_state)))})
             for name, s in (("before", diff.before), ("after", diff.after))]
    return _environment().get_template("diff.html.j2").render(
        verdict=verdict_text(diff.verdict), badge=BADGE.get(diff.verdict, "info"), line=show(diff.line),
        lang=HTML_LANG.get(current(), "en"), font=FONT_STACK, w=words(),
        sides=sides, identity=identity_text(diff.identity), different=diff.identity == "different",
        evidence=show(t("; ").join(diff.identity_evidence)),
        not_comparable=[show(w) for w in diff.not_comparable], compared=bool(diff.facts),
        changes=changes, incomplete=incomplete, findings=findings, verbose=verbose,
        plots=[_plot(f) for f in figures[:MAX_PLOTS]], unplotted=len(figures) - MAX_PLOTS,
        playbooks=playbooks, same=n.get("same", 0), n_incomplete=n.get(INCOMPLETE, 0),
        missing=show(t("; ").join(diff.missing_facts)),
        title=show(diff.after.hostname or diff.before.hostname or "host"))
