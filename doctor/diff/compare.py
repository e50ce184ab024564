"""Two saved scans compared: the facts, the findings, and the verdict.

The verdict, decided in this order:

* ``not comparable`` (exit 3): two different hosts (without ``different_hosts``), or states
  that cannot be judged against each other (doctor/diff/identity.py); no figure is judged.
* ``regression likely`` (exit 2): a measured figure worse beyond its noise floor, a finding
  raised at warning or above, or a setting changed the way its cause names as bad (a PCIe
  width down, ``--enforce-eager`` added, swappiness up).
* ``improvement likely`` (exit 0): none of those, and a figure better beyond its floor, a
  finding cleared, or a setting changed the good way.
* ``no material change``: exit 0, or 1 when a fact that bears on a cause changed with no
  known good way (a driver version): a change at warning, for a person to read.

The changes are ordered by how well each explains the difference: a measured figure first
(it is the difference), then a change linked to a cause of a finding raised or cleared,
then one in its cause's bad or good direction, then one that bears on a cause, then the
rest; within a rank the larger ratio first.
"""

from __future__ import annotations

import math
from dataclasses import replace
from collections.abc import Mapping
from typing import Any

from doctor.diff import identity as ident
from doctor.diff.facts import Records, not_recorded, readings
from doctor.diff.links import link
from doctor.diff.model import (ADDED, CHANGED, FLAG, IMPROVEMENT, INCOMPLETE, NO_CHANGE,
                               NOT_COMPARABLE, REGRESSION, REMOVED, SAME, SECRET, Diff, Fact,
                               FindingDelta, Reading, Side)
from doctor.diff.noise import LATENCY, MEASURED, floor_of, outside
from doctor.i18n import lazy, t, translated
from doctor.model import Severity
from doctor.saved_scan import SavedFinding, SavedScan, typed
from doctor.redact import MASK, redact_text
from doctor.values import is_finite

SEVERITY_RANK = {s.label: int(s) for s in Severity}
# a probe's status (a saved scan's data) as a note says it
PROBE_STATUS = {"ok": lazy("ok"), "skipped": lazy("skipped"), "error": lazy("error"),
                "timeout": lazy("timeout")}


def _percentile(fact_id: str) -> float | None:
    for p, q in (("_p99_", 0.99), ("_p95_", 0.95), ("_p50_", 0.5)):
        if p in fact_id:
            return q
    return None


def _secret(value: Any) -> bool:
    return isinstance(value, str) and (MASK in value or redact_text(value) != value)


def _ratio(before: Any, after: Any) -> float | None:
    if is_finite(before) and is_finite(after) and before != 0:
        return round(after / before, 4)
    return None


def _argv(reading: Reading, before: Any, after: Any) -> str:
    """The flag's change as an argv diff: ``+ --enforce-eager``, ``- --block-size 16``; an
    environment variable's (its flag ends in ``=``) as ``+ HCCL_CONNECT_TIMEOUT=60``."""
    def words(value: Any) -> str:
        if value is True:
            return reading.flag
        return f"{reading.flag}{value}" if reading.flag.endswith("=") else f"{reading.flag} {value}"
    out = []
    if before not in (None, False):
        out.append(f"- {words(before)}")
    if after not in (None, False):
        out.append(f"+ {words(after)}")
    return "; ".join(out)


def _fact(fid: str, b: Reading | None, a: Reading | None, rb: Records, ra: Records,
          judge_numbers: bool) -> Fact:
    one = a or b
    assert one is not None
    causes, good = link(fid)
    kind = one.kind
    vb, va = (b.value if b else None), (a.value if a else None)
    secret = _secret(vb) or _secret(va)
    base: dict[str, Any] = dict(id=redact_text(fid), family=one.family, label=one.label,
                kind=SECRET if secret else kind, causes=causes)
    if b is None or a is None:
        # ADDED or REMOVED only where the side without it looked and found nothing: where
        # its probe did not run (a baseline taken before the start-up kernels, a daemon that
        # skips them while an engine serves) or failed, nothing is known of it there
        given = (rb if b is None else ra).status.get(one.probe)
        present = va if b is None else vb
        if given != "ok" or present is None:
            status = translated(PROBE_STATUS.get(given, given)) if given else t("did not run")
            if given == "ok":
                why = t("{probe} holds no value for it on either side", probe=one.probe)
            elif b is None:
                why = t("not read before: {probe} {status}", probe=one.probe, status=status)
            else:
                why = t("not read after: {probe} {status}", probe=one.probe, status=status)
            return Fact(**base, status=INCOMPLETE, before=None if secret else vb,
                        after=None if secret else va, note=why)
        status = ADDED if b is None else REMOVED
        return Fact(**base, status=status, before=None if secret else vb, after=None if secret else va,
                    score=15.0, note=_argv(one, vb, va) if kind == FLAG else "")
    if vb == va:
        return Fact(**base, status=SAME, before=None if secret else vb, after=None if secret else va)
    if secret:
        return Fact(**base, status=CHANGED, before=None, after=None, score=30.0 if causes else 20.0,
                    note=t("a secret: changed (neither value is shown)"))
    if kind == FLAG and (vb is None or va is None):
        return Fact(**base, status=ADDED if vb is None else REMOVED, before=vb, after=va,
                    direction=good.direction(vb, va) if good else "", score=0.0,
                    note=_argv(one, vb, va))
    if (vb is None) != (va is None):
        return Fact(**base, status=INCOMPLETE, before=vb, after=va,
                    note=t("{probe} did not report it before", probe=one.probe) if vb is None
                    else t("{probe} did not report it after", probe=one.probe))
    numbers = is_finite(vb) and is_finite(va)
    ratio = _ratio(vb, va)
    if kind in MEASURED and numbers:
        assert vb is not None and va is not None  # numbers, both
        if not judge_numbers:
            return Fact(**base, status=INCOMPLETE, before=vb, after=va, ratio=ratio,
                        note=t("not judged: the states are not comparable"))
        busy = "; ".join(t("{side}: {why}", side=side, why=r.contended)
                         for side, r in ((t("before"), b), (t("after"), a)) if r.contended)
        if busy:  # a contended figure measures the neighbours, not the host
            return Fact(**base, status=INCOMPLETE, before=vb, after=va, ratio=ratio,
                        note=t("not judged: measured under contention ({busy})", busy=busy))
        floor = floor_of(kind, (b.spread, a.spread), (b.samples, a.samples),
                         _percentile(fid) if kind == LATENCY else None)
        if not outside(kind, float(vb), float(va), floor):
            return Fact(**base, status=SAME, before=vb, after=va, ratio=ratio, floor=floor)
        direction = good.direction(vb, va) if good else ""
        return Fact(**base, status=CHANGED, before=vb, after=va, ratio=ratio, floor=floor,
                    direction=direction)
    direction = good.direction(vb, va) if good else ""
    return Fact(**base, status=CHANGED, before=vb, after=va, ratio=ratio, direction=direction,
                note=_argv(one, vb, va) if kind == FLAG else "")


def _score(fact: Fact, raised_or_cleared: set[str]) -> float:
    if fact.status in (SAME, INCOMPLETE):
        return 0.0
    magnitude = abs(math.log(fact.ratio)) if fact.ratio and fact.ratio > 0 else 0.0
    if fact.kind in MEASURED:
        return 100.0 + min(magnitude, 5.0)
    if set(fact.causes) & raised_or_cleared:
        return 80.0 + min(magnitude, 5.0)
    if fact.direction:
        return 60.0 + min(magnitude, 5.0)
    if fact.causes:
        return 40.0 + min(magnitude, 5.0)
    return 20.0 if fact.status == CHANGED else 15.0


def _findings(before: SavedScan, after: SavedScan) -> tuple[FindingDelta, ...]:
    def index(report: SavedScan) -> dict[tuple[str, str], SavedFinding]:
        return {(f.rule, f.key): f for f in report.findings}
    fb, fa = index(before), index(after)
    out = []
    for key in sorted(fb.keys() | fa.keys()):
        f = fa.get(key) or fb[key]
        state = "unchanged" if key in fb and key in fa else ("raised" if key in fa else "cleared")
        if state == "unchanged" and fa[key].severity > fb[key].severity:
            state = "raised"  # a warning become critical is a new problem
        out.append(FindingDelta(redact_text(key[0]), redact_text(key[1]), f.cause, state,
                                f.severity.label, redact_text(f.title())))  # in this diff's language
    order = {"raised": 0, "cleared": 1, "unchanged": 2}
    return tuple(sorted(out, key=lambda d: (order[d.state], -SEVERITY_RANK.get(d.severity, 0), d.rule)))


def taken_at(report: SavedScan | Mapping[str, Any]) -> str:
    """When the side's state was taken (``SavedScan.taken_at``)."""
    return as_scan(report).taken_at


def as_scan(report: SavedScan | Mapping[str, Any]) -> SavedScan:
    """The typed scan of a side: a saved scan read (reports/json_report.py ``read``) as it
    is, a scan's JSON data (``to_dict``, or ``check``'s) typed."""
    return report if isinstance(report, SavedScan) else typed(report)


def _side(report: SavedScan, source: str, records: Records) -> Side:
    return Side(redact_text(source), redact_text(report.hostname), report.level,
                redact_text(report.taken_at), ident.engine_state(records))


def _shown(value: Any) -> str:
    if value is None:
        return t("absent")
    if isinstance(value, float):  # 2400.0 reads 2400, 0.4792 reads 0.4792
        return f"{value:.6g}"
    return redact_text(str(value))


def first_line(fact: Fact) -> str:
    """A change as one line: its id, and what it went from and to."""
    if fact.note and fact.kind != SECRET and fact.status in (ADDED, REMOVED) and fact.note.startswith(("+", "-")):
        return f"{fact.id}: {fact.note}"
    if fact.kind == SECRET:
        return t("{id}: changed", id=fact.id)
    if fact.status == ADDED:
        return t("{id}: added ({value})", id=fact.id, value=_shown(fact.after))
    if fact.status == REMOVED:
        return t("{id}: removed (was {value})", id=fact.id, value=_shown(fact.before))
    ratio = f", x{fact.ratio:g}" if fact.ratio is not None and fact.kind in MEASURED else ""
    return f"{fact.id}: {_shown(fact.before)} -> {_shown(fact.after)}{ratio}"


def compare(before: SavedScan | Mapping[str, Any], after: SavedScan | Mapping[str, Any],
            sources: tuple[str, str] = ("before", "after"), different_hosts: bool = False) -> Diff:
    """``before`` and ``after``: typed saved scans (reports/json_report.py ``read``), or a
    scan's JSON data (``to_dict``), typed here."""
    before, after = as_scan(before), as_scan(after)
    (rb, facts_b), (ra, facts_a) = readings(before), readings(after)
    sides = _side(before, sources[0], rb), _side(after, sources[1], ra)
    who, evidence = ident.identity(before, after, rb, ra)
    findings = _findings(before, after)
    missing = not_recorded(rb, ra)
    if who == ident.DIFFERENT and not different_hosts:
        line = t("two different hosts ({evidence}): pass --different-hosts to compare them anyway",
                 evidence=t("; ").join(evidence))
        return Diff(NOT_COMPARABLE, line, 3, *sides, who, evidence, False, (line,), (), (),
                    missing)
    why = ident.comparability(before, after, rb, ra)
    facts = [_fact(fid, facts_b.get(fid), facts_a.get(fid), rb, ra, not why)
             for fid in sorted(facts_b.keys() | facts_a.keys())]
    moved = {d.cause for d in findings if d.state in ("raised", "cleared")}
    facts = [_with_score(f, _score(f, moved)) for f in facts]
    facts.sort(key=lambda f: (-f.score, f.id))
    if why:
        return Diff(NOT_COMPARABLE, t("not comparable: {why}", why=t("; ").join(why)), 3, *sides, who, evidence,
                    False, why, tuple(facts), findings, missing)
    verdict, line, code = _verdict(facts, findings)
    return Diff(verdict, line, code, *sides, who, evidence, True, (), tuple(facts), findings,
                missing)


def _with_score(fact: Fact, score: float) -> Fact:
    return replace(fact, score=score)


def _verdict(facts: list[Fact], findings: tuple[FindingDelta, ...]) -> tuple[str, str, int]:
    changes = [f for f in facts if f.status not in (SAME, INCOMPLETE)]
    raised = [d for d in findings if d.state == "raised" and SEVERITY_RANK.get(d.severity, 0) >= 1]
    cleared = [d for d in findings if d.state == "cleared" and SEVERITY_RANK.get(d.severity, 0) >= 1]
    worse = [f for f in changes if f.direction == "worse"]
    better = [f for f in changes if f.direction == "better"]
    if worse or raised:
        first = worse[0] if worse and (not raised or worse[0].score >= 60) else None
        line = first_line(first) if first else t("{rule} raised: {title}", rule=raised[0].rule,
                                                  title=raised[0].title)
        return REGRESSION, line, 2
    if better or cleared:
        line = first_line(better[0]) if better else t("{rule} cleared", rule=cleared[0].rule)
        return IMPROVEMENT, line, 0
    bearing = [f for f in changes if f.causes]
    if bearing:
        return NO_CHANGE, t("{n} change(s) bear on causes, none known to be worse: {first}",
                            n=len(bearing), first=first_line(bearing[0])), 1
    if changes:
        return NO_CHANGE, t("{n} change(s), none that bears on a cause: {first}", n=len(changes),
                            first=first_line(changes[0])), 0
    return NO_CHANGE, t("no fact changed beyond its noise floor, no finding raised or cleared"), 0
