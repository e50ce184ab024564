"""Slurm: what to do with a node, from the verdict on the daemon's state and the node as
``scontrol show node <node> --oneliner`` shows it.

The rules, for a HealthCheckProgram that slurmd runs every HealthCheckInterval (and that it
kills at 60 s):

* a critical finding on a node nobody holds: drain it, ``Reason='llm-doctor: <rule id>
  <title>'`` (the prefix marks the reason as ours);
* a critical finding on a node drained with our reason: nothing when the reason names the same
  rule (idempotent: slurmd runs us again and again), our reason updated when the rule changed;
* a node drained or down for a reason that is not ours (an operator's maintenance, slurmd's
  "Prolog error", "Not responding"): left alone, whatever we found;
* no critical finding any more, on a node drained with our reason: resumed;
* an unknown verdict (state absent, broken, stale, or a probe failed): nothing is changed.
  Our daemon being down says nothing about the node, so it neither drains nor resumes it.

Same finding means the same rule id: a title carries figures (a temperature, a count) that
move from beat to beat, and rewriting the reason each time would be noise in the node's
history.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from doctor.config import ConfigError
from doctor.fleet.verdict import Status, Verdict, masked, rule_word
from doctor.saved_scan import SavedFinding
from doctor.i18n import t

PREFIX = "llm-doctor:"
# slurmctld keeps a node's reason whole, but sinfo -R, sview and most dashboards show a short
# column; one line of 120 keeps the rule id and the gist visible everywhere.
MAX_REASON = 120
# A reason is masked (doctor/fleet/verdict.py ``masked``: it is shown to every user of the
# cluster), goes on the command line --dry-run prints (quoted there with shlex.quote), and
# slurmctld appends " [user@time]" to it: quotes, '$', '`', backslashes, brackets and '!'
# (history expansion where the printed line is pasted: csh expands it even inside single
# quotes) are dropped, whatever the quoting. Chinese (CJK ideographs, CJK and full-width
# punctuation) is kept: a title in Chinese is read in sinfo, and none of it means anything
# to a shell.
_UNSAFE = re.compile(r"[^\x20-\x7e\u3000-\u303f\u4e00-\u9fff\uff01-\uff5e]|[\"'`$\\\[\]!]")
# scontrol -o prints "Key=value" pairs separated by blanks; some values hold blanks
# (OS=Linux 6.1.0 #1 SMP ..., Reason=...), so a value runs to the next " Key=".
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")
# The reason's " [user@2026-12-01T19:37:52]" stamp, added by slurmctld.
_STAMP = re.compile(r"\s*\[[^\[\]\s]*@[0-9T:\-]+\]\s*$")
HELD_BASES = frozenset({"DOWN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE"})
HELD_FLAGS = frozenset({"DRAIN", "FAIL", "MAINT", "REBOOT_REQUESTED", "REBOOT_ISSUED"})


class SlurmError(ConfigError):
    """scontrol missing, failing, or saying something that is not a node (the message names
    it)."""


@dataclass(frozen=True, slots=True)
class Node:
    """One node as ``scontrol show node <name> --oneliner`` shows it."""

    name: str
    state: str  # the whole State= value: IDLE+DRAIN, MIXED, DOWN+NOT_RESPONDING
    reason: str  # without slurmctld's [user@time] stamp; "" when none

    @property
    def base(self) -> str:
        return self.state.partition("+")[0].upper()

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(f.upper() for f in self.state.split("+")[1:] if f)

    @property
    def held(self) -> bool:
        """Drained, draining, down or failed: someone (maybe us) took it out of service."""
        return self.base in HELD_BASES or bool(self.flags & HELD_FLAGS)

    @property
    def ours(self) -> bool:
        return self.reason.startswith(PREFIX)

    @property
    def our_rule(self) -> str:
        """The rule id our reason names ("" when the reason is not ours)."""
        if not self.ours:
            return ""
        words = self.reason[len(PREFIX):].split()
        return words[0] if words else ""


def parse_node(text: str, name: str) -> Node:
    """The node ``name`` from ``scontrol show node <name> --oneliner``'s output."""
    for line in text.splitlines():
        fields = _fields(line)
        if fields.get("NodeName") != name:
            continue
        if "State" not in fields:
            raise SlurmError(t("scontrol shows node {node} without a State= field: {line}",
                               node=name, line=repr(line[:120])))
        reason = fields.get("Reason", "")
        reason = "" if reason in ("(null)", "none") else _STAMP.sub("", reason).strip()
        return Node(name, fields["State"].strip(), reason)
    raise SlurmError(t("scontrol show node {node} does not show node {node}: {output}; is "
                       "--node (or SLURMD_NODENAME) its name in slurm.conf?", node=name,
                       output=repr(" ".join(text.split())[:120])))


def _fields(line: str) -> dict[str, str]:
    keys = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for here, after in zip(keys, keys[1:] + [None]):
        end = after.start() if after is not None else len(line)
        key = here.group(1)
        value = line[here.end():end].strip()
        if key == "Reason":  # a reason may hold "a=b": it runs to its [user@time] stamp
            rest = line[here.end():]
            stamp = re.search(r"\s\[[^\[\]\s]*@[0-9T:\-]+\]", rest)
            value = rest[:stamp.start()].strip() if stamp else value
        out.setdefault(key, value)
    return out


def reason_for(finding: SavedFinding) -> str:
    """Our reason for ``finding``: the prefix, its rule id, its title masked, on one safe
    line."""
    rule = rule_word(finding)  # the vocabulary's grammar: nothing to drop
    title = _UNSAFE.sub(" ", masked(finding.title()))  # in the adapter's language
    text = " ".join(f"{PREFIX} {rule} {title}".split())
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3].rstrip() + "..."


@dataclass(frozen=True, slots=True)
class Action:
    """What to run (``update``: scontrol's arguments after ``scontrol``, () for nothing) and
    one line saying why."""

    update: tuple[str, ...]
    says: str


def decide(verdict: Verdict, node: Node) -> Action:
    """The action for ``node`` under ``verdict`` (judged at critical)."""
    held = t("{state} ({reason})", state=node.state, reason=node.reason or t("no reason"))
    if verdict.status is Status.UNKNOWN:
        return Action((), t("{node} left {state}: {verdict}", node=node.name, state=node.state,
                            verdict=verdict.line))
    if verdict.status is Status.PROBLEM:
        assert verdict.finding is not None  # a PROBLEM names its finding
        drain = drain_update(node.name, verdict.finding)
        if not node.held:
            return Action(drain, t("{node} drained: {verdict}", node=node.name,
                                   verdict=verdict.line))
        if not node.ours:
            return Action((), t("{node} left alone, held by another party: {held}; we found "
                                "{verdict}", node=node.name, held=held, verdict=verdict.line))
        if node.our_rule == rule_word(verdict.finding):
            return Action((), t("{node} already drained by llm-doctor: {verdict}",
                                node=node.name, verdict=verdict.line))
        return Action(drain, t("{node} reason updated (was {rule}): {verdict}", node=node.name,
                               rule=node.our_rule, verdict=verdict.line))
    if node.ours and "DRAIN" in node.flags | {node.base} and node.base != "DOWN":
        return Action(resume_update(node.name),
                      t("{node} resumed, {rule} has cleared: {verdict}", node=node.name,
                        rule=node.our_rule, verdict=verdict.line))
    if node.held:
        return Action((), t("{node} left {held}: not ours to resume; {verdict}", node=node.name,
                            held=held, verdict=verdict.line))
    return Action((), t("{node} {state}: {verdict}", node=node.name, state=node.state,
                        verdict=verdict.line))


def drain_update(name: str, finding: SavedFinding) -> tuple[str, ...]:
    return ("update", f"NodeName={name}", "State=DRAIN", f"Reason={reason_for(finding)}")


def resume_update(name: str) -> tuple[str, ...]:
    return ("update", f"NodeName={name}", "State=RESUME")


def shown(scontrol: str, update: tuple[str, ...]) -> str:
    """The scontrol line as a person would type it, every word through shlex.quote (the
    reason as ``Reason='...'``): pasted into a shell, it runs that command and nothing else."""
    words = [f"Reason={shlex.quote(w[len('Reason='):])}" if w.startswith("Reason=")
             else shlex.quote(w) for w in update]
    return " ".join([shlex.quote(scontrol), *words])
