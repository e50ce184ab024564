"""What the diff's renderers share: a fact's values and ratio as people read them."""

from __future__ import annotations

import re
from typing import Any

from doctor import display
from doctor.diff.compare import first_line
from doctor.diff.identity import engine_state_text
from doctor.diff.model import (ADDED, CHANGED, IMPROVEMENT, INCOMPLETE, NO_CHANGE,
                               NOT_COMPARABLE, REGRESSION, REMOVED, SAME, SECRET, Diff, Fact)
from doctor.diff.noise import ABSOLUTE
from doctor.i18n import lazy, t, translated
from doctor.model import SEVERITY_WORDS
from reports.common import show

__all__ = ["first_line", "value", "figure", "status_word", "counts", "rows", "verdict_text",
           "identity_text", "whole_text", "state_text", "severity_text", "side_text", "engine_state_text"]

# The data words of the diff (its JSON's enums, docs/diff-schema.json) as a person reads them
VERDICTS = {REGRESSION: lazy("regression likely"), IMPROVEMENT: lazy("improvement likely"),
            NO_CHANGE: lazy("no material change"), NOT_COMPARABLE: lazy("not comparable")}
STATUSES = {SAME: lazy("SAME"), CHANGED: lazy("CHANGED"), ADDED: lazy("ADDED"), REMOVED: lazy("REMOVED"),
            INCOMPLETE: lazy("INCOMPLETE")}
DIRECTIONS = {"worse": lazy("worse"), "better": lazy("better")}
IDENTITIES = {"same": lazy("same"), "different": lazy("different"), "unproven": lazy("unproven")}
STATES = {"raised": lazy("raised"), "cleared": lazy("cleared"), "unchanged": lazy("unchanged")}
SIDES = {"before": lazy("before"), "after": lazy("after")}


def verdict_text(verdict: str) -> str:
    return translated(VERDICTS.get(verdict, verdict))


def identity_text(identity: str) -> str:
    return translated(IDENTITIES.get(identity, identity))


def state_text(state: str) -> str:
    """A finding's state: raised, cleared or unchanged."""
    return translated(STATES.get(state, state))


def severity_text(severity: str) -> str:
    return translated(SEVERITY_WORDS.get(severity, severity))


def side_text(side: str) -> str:
    return translated(SIDES.get(side, side))


def value(fact: Fact, side: str) -> str:
    """One side's value: a secret reads "(secret)", absent reads "—"."""
    if fact.kind == SECRET:
        return t("(secret)")
    raw: Any = fact.before if side == "before" else fact.after
    if raw is None:
        return "—"
    return show(display.text(raw) if isinstance(raw, float) else raw)


def figure(fact: Fact) -> str:
    """The ratio and the floor it was held to, for a number that changed: "x0.50 (floor 10%)"."""
    parts = []
    if fact.ratio is not None:
        parts.append(f"x{fact.ratio:.2f}")
    if fact.kind in ABSOLUTE:  # a floor in its unit, not the 0% its relative floor reads
        parts.append(t("(floor ±{mib:g} MiB)", mib=ABSOLUTE[fact.kind]))
    elif fact.floor is not None:
        parts.append(t("(floor {floor:.0%})", floor=fact.floor))
    return " ".join(parts)


def status_word(fact: Fact) -> str:
    word = translated(STATUSES.get(fact.status, fact.status.upper()))
    if fact.direction:
        word += t(" ({direction})", direction=translated(DIRECTIONS.get(fact.direction, fact.direction)))
    return word


def counts(diff: Diff) -> dict[str, int]:
    out: dict[str, int] = {}
    for fact in diff.facts:
        out[fact.status] = out.get(fact.status, 0) + 1
    return out


def rows(diff: Diff) -> list[Fact]:
    """The changes, then the facts read on one side only (INCOMPLETE), for the tables."""
    return [f for f in diff.facts if f.status not in ("same",)
            and (f.status != INCOMPLETE or f.before is not None or f.after is not None)]


_ENTITY = re.compile(r"^([a-z.]+\[[^\]]*\])\.")


def grouped(diff: Diff) -> list[tuple[Fact, int]]:
    """The changes for a table, with an entity that came or went whole (an engine started,
    a GPU gone) as one row: (its first fact, how many facts it stands for). The JSON keeps
    every fact."""
    changes = list(diff.changes)
    whole: dict[str, str] = {}
    for entity in {m.group(1) for f in changes if (m := _ENTITY.match(f.id))}:
        states = {f.status for f in diff.facts if f.id.startswith(entity + ".")} - {INCOMPLETE}
        if len(states) == 1 and states <= {ADDED, REMOVED}:
            whole[entity] = states.pop()
    out: list[tuple[Fact, int]] = []
    seen: set[str] = set()
    for fact in changes:
        m = _ENTITY.match(fact.id)
        entity = m.group(1) if m else ""
        if entity in whole:
            if entity not in seen:
                seen.add(entity)
                n = sum(1 for f in changes if f.id.startswith(entity + "."))
                out.append((fact, n))
            continue
        out.append((fact, 1))
    return out


def entity_of(fact: Fact) -> str:
    m = _ENTITY.match(fact.id)
    return m.group(1) if m else fact.id


def whole_text(fact: Fact, many: int) -> str:
    """The row of an entity that came or went whole: "5 facts added"."""
    if fact.status == ADDED:
        return t("{n} facts added", n=many)
    if fact.status == REMOVED:
        return t("{n} facts removed", n=many)
    return f"{many} facts {fact.status}"


def change_text(fact: Fact) -> str:
    """A flag's argv form, or a secret's "changed", else before → after."""
    if fact.kind == SECRET:
        return t("changed (neither value is shown)")
    if fact.note and fact.status in (ADDED, REMOVED, "changed") and fact.note[:1] in "+-":
        return show(fact.note)  # an engine's flag as its argv held it: host text
    return f"{value(fact, 'before')} → {value(fact, 'after')}"
