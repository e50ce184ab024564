"""One verdict for a scheduler from the daemon's state: OK, a problem, or unknown.

Every adapter asks the same question of the state file (doctor/daemon/state.py): is this
host, or one family of it (gpu, engine, host), fit for work? The answer is

* UNKNOWN when the state cannot be trusted (absent, broken, stale, from the future), or when
  a probe of the family failed or timed out, or none of the family is listed at all, and
  nothing at ``min_severity`` was found: a GPU probe that errored or hung is not a healthy
  GPU, and a report without GPU probes says nothing of the GPUs (a daemon's report lists
  every probe, the skipped ones too);
* PROBLEM when a finding of the family is at ``min_severity`` or worse: the worst one, the
  first of equals in the rules' order, is the one named;
* OK otherwise.

``line`` is what a scheduler shows: it starts with a stable id (the rule id, or ``ok`` /
``unknown``) and fits ``width`` characters. Its words from the state (titles, reasons, probe
names, why the state is unknown) are ``masked``: the line lands where many can read it (a
node condition, a drain reason, slurmd's log). A rule id is one the state's reader lets
through (doctor/daemon/state.py ``rule_id_ok``: never ``ok…`` or ``unknown…``); any other,
from a state not read from a file, is shown as ``INVALID_RULE``.
"""

from __future__ import annotations

import enum
import unicodedata
from dataclasses import dataclass, field

from doctor.daemon.state import State, rule_id_ok
from doctor.i18n import t
from doctor.model import Severity
from doctor.redact import redact_text
from doctor.saved_scan import SavedFinding, typed

MAX_TEXT = 2048  # of one text from the state: more than any line shows, cut before masking
INVALID_RULE = "invalid-rule-id"
FAILED = ("error", "timeout")  # a probe's statuses that leave its family unknown


class Status(enum.IntEnum):
    """Ordered as exit codes: NPD's custom plugin protocol reads 0, 1 and 2 so."""

    OK = 0
    PROBLEM = 1
    UNKNOWN = 2


@dataclass(frozen=True, slots=True)
class Verdict:
    status: Status
    line: str
    finding: SavedFinding | None = None  # the finding named, for PROBLEM
    problems: list[SavedFinding] = field(default_factory=list)  # all at min_severity+


def cut(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters (an ellipsis where it is cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:max(0, width - 1)].rstrip() + "…"


def masked(text: object) -> str:
    """Text from the state as an adapter may print it: its first ``MAX_TEXT`` characters,
    every control or format character (an escape, a NUL, a bidi override, a lone surrogate)
    a blank, masked as reports mask text (doctor.redact: ``--api-key ***``), on one line.
    The blanks come before the masking, so that ``--api-key\\x1b[0msk-…`` is still a flag
    and its value."""
    flat = "".join(" " if unicodedata.category(c)[0] == "C" else c
                   for c in str(text)[:MAX_TEXT])
    return " ".join(redact_text(flat).split())


def rule_word(finding: SavedFinding) -> str:
    """The finding's rule id as the first word of a problem line."""
    return finding.rule if rule_id_ok(finding.rule) else INVALID_RULE


def judge(state: State, family: str | None = None, min_severity: Severity = Severity.WARNING,
          width: int = 80) -> Verdict:
    """The verdict on ``family`` (None: the whole host) from ``state``: its report typed
    (doctor/saved_scan.py; the state's reader checked it), its text said in the adapter's
    language (the state is written in English and carries each text's value)."""
    what = family or "host"
    if state.unknown:
        return Verdict(Status.UNKNOWN, cut(f"unknown {masked(state.unknown)}", width))
    scan = typed(state.report)
    mine = [f for f in scan.findings
            if family is None or state.families.get(f.rule, "host") == family]
    problems = [f for f in mine if f.severity >= min_severity]
    if problems:
        worst = max(f.severity for f in problems)
        first = next(f for f in problems if f.severity == worst)
        more = t(" (+{count} more)", count=len(problems) - 1) if len(problems) > 1 else ""
        line = t("{rule} {severity}: {title}", rule=rule_word(first),
                 severity=worst.word, title=masked(first.title()))
        if more and len(line) + len(more) > width:
            line = cut(line, width - len(more))
        return Verdict(Status.PROBLEM, cut(line + more, width), first, problems)
    probes = [p for p in scan.probes if family is None or p.family == family]
    failed = [p for p in probes if p.status in FAILED]
    if failed:
        p = failed[0]
        return Verdict(Status.UNKNOWN, cut(t("unknown {probe} failed: {reason}",
                                             probe=masked(p.name),
                                             reason=masked(p.reason() or p.status)), width))
    if not probes:
        return Verdict(Status.UNKNOWN, cut(t("unknown {family}: the state lists no probe of "
                                             "this family", family=what), width))
    ran = sum(p.status == "ok" for p in probes)
    if not ran:  # a CPU node's GPU family, or a GPU node whose driver is gone
        skipped = probes[0]
        return Verdict(Status.OK, cut(t("ok {family}: no probe ran ({probe}: {reason})",
                                        family=what, probe=masked(skipped.name),
                                        reason=masked(skipped.reason() or t("skipped"))),
                                      width))
    return Verdict(Status.OK, cut(t("ok {family}: {ran} probes ran, nothing at {severity} or "
                                    "worse ({age:.0f}s ago)", family=what, ran=ran,
                                    severity=min_severity.word, age=state.age_s),
                                  width))
