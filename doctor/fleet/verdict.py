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
from typing import Any

from doctor.daemon.state import State, rule_id_ok
from doctor.i18n import t
from reports.json_report import text_of
from doctor.model import Severity
from doctor.redact import redact_text

_SEVERITIES = {s.label: s for s in Severity}
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
    finding: dict[str, Any] | None = None  # the finding named, for PROBLEM
    problems: list[dict[str, Any]] = field(default_factory=list)  # all at min_severity+


def severity_of(finding: dict[str, Any]) -> Severity:
    return _SEVERITIES.get(str(finding.get("severity")), Severity.INFO)


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


def rule_word(finding: dict[str, Any]) -> str:
    """The finding's rule id as the first word of a problem line."""
    rule = finding.get("rule")
    return rule if isinstance(rule, str) and rule_id_ok(rule) else INVALID_RULE


def said(state: State, entry: dict[str, Any], key: str) -> str:
    """A title or reason of the state in the adapter's language (the state is written in
    English and carries each text's value: reports/json_report.py ``text_of``)."""
    return text_of(entry, key, state.report.get("lang"))


def judge(state: State, family: str | None = None, min_severity: Severity = Severity.WARNING,
          width: int = 80) -> Verdict:
    """The verdict on ``family`` (None: the whole host) from ``state``."""
    what = family or "host"
    if state.unknown:
        return Verdict(Status.UNKNOWN, cut(f"unknown {masked(state.unknown)}", width))
    mine = [f for f in state.findings if family is None or state.family(f) == family]
    problems = [f for f in mine if severity_of(f) >= min_severity]
    if problems:
        worst = max(severity_of(f) for f in problems)
        first = next(f for f in problems if severity_of(f) == worst)
        first = {**first, "title": said(state, first, "title")}  # a drain reason says it too
        more = t(" (+{count} more)", count=len(problems) - 1) if len(problems) > 1 else ""
        line = t("{rule} {severity}: {title}", rule=rule_word(first),
                 severity=worst.word, title=masked(first["title"]))
        if more and len(line) + len(more) > width:
            line = cut(line, width - len(more))
        return Verdict(Status.PROBLEM, cut(line + more, width), first, problems)
    probes = [p for p in state.probes
              if family is None or str(p.get("name", "")).partition(".")[0] == family]
    failed = [p for p in probes if p.get("status") in FAILED]
    if failed:
        p = failed[0]
        return Verdict(Status.UNKNOWN, cut(t("unknown {probe} failed: {reason}",
                                             probe=masked(p.get("name")),
                                             reason=masked(said(state, p, "reason")
                                                           or p.get("status")
                                                           or t("no reason given"))), width))
    if not probes:
        return Verdict(Status.UNKNOWN, cut(t("unknown {family}: the state lists no probe of "
                                             "this family", family=what), width))
    ran = sum(p.get("status") == "ok" for p in probes)
    if not ran:  # a CPU node's GPU family, or a GPU node whose driver is gone
        skipped = probes[0]
        return Verdict(Status.OK, cut(t("ok {family}: no probe ran ({probe}: {reason})",
                                        family=what, probe=masked(skipped.get("name")),
                                        reason=masked(said(state, skipped, "reason")
                                                      or t("skipped"))),
                                      width))
    return Verdict(Status.OK, cut(t("ok {family}: {ran} probes ran, nothing at {severity} or "
                                    "worse ({age:.0f}s ago)", family=what, ran=ran,
                                    severity=min_severity.word, age=state.age_s),
                                  width))
