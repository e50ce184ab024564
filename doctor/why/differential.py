"""The differential: every cause the rules tie to a symptom, confirmed, ruled out or not
checked, from one run's probe results and findings. Pure over records: no probe runs here.

A rule is *confirmed* when it fired (its findings); *not checked* when it is disabled, a
probe it needs did not end ok (the probe's reason, or the level it needs, or the requests
this run may not send), or an item's condition needed a value that was not measured; else
*ruled out*, each item with why its condition is false (doctor/why/explain.py). A cause takes
the first of confirmed, not checked, ruled out that one of its rules has.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from doctor.config import Config
from doctor.i18n.values import m
from doctor.model import Finding, Level, ProbeResult, ProbeSpec
from doctor.rules.evaluate import (RULE_TIME_LIMIT_S, item_key, rule_items,  # the engine's own
                                   roots_for, run_or_absent, namespace)
from doctor.rules.loader import Rule
from doctor.rules.sandbox import Evaluator, LimitExceeded
from doctor.runner import status_text
from doctor.why.explain import Explanation, name_of, why_false
from doctor.why.model import (CONFIRMED, NOT_CHECKED, RULED_OUT, CauseRow, Differential,
                              ItemCheck, RuleCheck)
from doctor.why.order import phase_of, sort_key

MAX_ITEMS = 4  # items shown per rule; the rest are counted
# Items explained part by part per rule (a few evaluations each, within the rule's time
# budget); past them, a process table of thousands is judged by the condition alone.
MAX_EXPLAINED = 200
MAX_LABEL_CHARS = 80


def candidates(symptom: str, rules: Iterable[Rule]) -> list[Rule]:
    """The rules that tie a cause to ``symptom`` (their ``symptoms`` key)."""
    return [r for r in rules if symptom in r.symptoms]


def probes_needed(rules: Iterable[Rule], specs: Mapping[str, ProbeSpec]) -> tuple[str, ...]:
    """The probes the rules read, with the probes those need or follow, in registry order."""
    wanted: set[str] = set()
    todo = [p for r in rules for p in (*r.probes, *r.also_probes)]
    while todo:
        name = todo.pop()
        if name in wanted or name not in specs:
            continue
        wanted.add(name)
        todo += [*specs[name].needs, *specs[name].after]
    return tuple(name for name in specs if name in wanted)


def _blocked(rule: Rule, results: Mapping[str, ProbeResult], specs: Mapping[str, ProbeSpec],
             level: Level, requests: bool, command: str) -> RuleCheck | None:
    """NOT_CHECKED for a rule whose probes did not all end ok, with why and what to run; none
    where a probe of its ``each_also`` ended ok (another vendor's items: judged on those)."""
    ok = {name for name, result in results.items() if result.status == "ok"}
    if rule.also_probes and rule.evaluated_with(ok):
        return None
    for name in rule.probes:
        result, spec = results.get(name), specs.get(name)
        if result is not None and result.status == "ok":
            continue
        if result is None and spec is not None and spec.level > level:
            needed = spec.level.name.lower()
            return RuleCheck(rule.id, NOT_CHECKED,
                             why=m("{probe} runs at level {needed}; this run was at level {level}",
                                   probe=name, needed=needed, level=level.name.lower()),
                             command=f"{command} --level {needed}")
        if result is None:
            return RuleCheck(rule.id, NOT_CHECKED, why=m("{probe} did not run", probe=name))
        if spec is not None and spec.cost is not None and not requests:
            return RuleCheck(rule.id, NOT_CHECKED,
                             why=m("{probe} sends requests to the engine, and this run sends "
                                   "none (--no-requests)", probe=name), command=command)
        return RuleCheck(rule.id, NOT_CHECKED,
                         why=m("{probe} {status}: {reason}", probe=name,
                               status=status_text(result.status), reason=result.reason or ""),
                         skipped=result.status == "skipped")
    return None


def _label(rule: Rule, ev: Evaluator, item: object) -> str:
    """Which item: GPU n where the rule's evidence names a GPU, else its key."""
    if item is None:
        return ""
    if "evidence.gpu" in rule.compiled:
        gpu = run_or_absent(ev, rule.compiled["evidence.gpu"], rule.evidence["gpu"])
        if gpu is not None:
            return f"GPU {gpu}"
    key = ev.run(rule.compiled["key"], rule.key or "") if rule.key else item_key(item)
    return str(key)[:MAX_LABEL_CHARS]


def _judged(rule: Rule, roots: dict, params: dict, level: Level, command: str,
            ok: set[str]) -> RuleCheck:
    """RULED_OUT or NOT_CHECKED for a rule that ran and did not fire: each item explained."""
    ev = Evaluator({**roots_for(rule, roots, ok), "params": params, "item": None}, RULE_TIME_LIMIT_S)
    items = rule_items(rule, ev, ok)
    if not items:
        return RuleCheck(rule.id, RULED_OUT, items=(ItemCheck("", False, (
            m("nothing to judge: {each} is empty", each=name_of(rule.compiled["each"])),)),))
    checks: list[ItemCheck] = []
    reasons: list[str] = []  # the records' reasons for the values not measured
    unexplained = 0  # items past MAX_EXPLAINED: judged by the condition alone, and counted
    for item in items:
        ev.names["item"] = item
        met = run_or_absent(ev, rule.compiled["when"], rule.when)
        if met:
            continue  # it fired on this item: a finding (another symptom's run may show it)
        if len(checks) >= MAX_EXPLAINED:
            if met is None:  # not judged: a value it needs is absent
                checks.append(ItemCheck(_label(rule, ev, item), True, ()))
                reasons.append("")
            else:
                unexplained += 1
            continue
        found: Explanation = why_false(rule.compiled["when"], ev)
        checks.append(ItemCheck(_label(rule, ev, item), found.absent, found.parts))
        if found.absent:
            reasons += found.reasons
    checks.sort(key=lambda c: not c.absent)  # what was not judged first: it decides the row
    shown, more = tuple(checks[:MAX_ITEMS]), max(len(checks) + unexplained - MAX_ITEMS, 0)
    if any(c.absent for c in checks):
        return RuleCheck(rule.id, NOT_CHECKED, items=shown, more_items=more,
                         why=m("a value its condition needs was not measured"),
                         command=command_for(reasons, level, command))
    return RuleCheck(rule.id, RULED_OUT, items=shown, more_items=more)


_QUOTED = re.compile(r"`([^`]{1,200})`")


def command_for(reasons: Iterable[str], level: Level, command: str) -> str | None:
    """What would measure the values a condition lacked, from the records' reasons: a
    command a reason quotes (`llm-doctor load --endpoint URL`), or an option of this one it
    quotes (`--level standard`, `--busy-ok`); else a higher level where a value has no reason
    or its reason names a level; else none (the reasons say why: no GPU, no such page)."""
    reasons = list(reasons)
    for reason in reasons:
        for quoted in _QUOTED.findall(reason):
            if quoted.startswith("llm-doctor "):
                return quoted
            if quoted.startswith("--level ") and _reached(quoted[len("--level "):], level):
                continue  # this run was at that level: the value is absent for another reason
            if quoted.startswith("--"):
                return f"{command} {quoted}"
    if level < Level.FULL and any(not r or "level" in r for r in reasons):
        return f"{command} --level full"
    return None


def check_rule(rule: Rule, results: Mapping[str, ProbeResult], roots: dict,
               findings: tuple[Finding, ...], specs: Mapping[str, ProbeSpec], level: Level,
               requests: bool, config: Config, command: str) -> RuleCheck:
    override = config.rules.get(rule.id, {})
    if not override.get("enabled", True):
        return RuleCheck(rule.id, NOT_CHECKED, why=m("disabled in the config ({file})",
                                                     file=str(config.path)))
    blocked = _blocked(rule, results, specs, level, requests, command)
    if blocked is not None:
        return blocked
    if findings:
        return RuleCheck(rule.id, CONFIRMED, findings=findings)
    params = {**rule.params, **{k: v for k, v in override.items() if k in rule.params}}
    try:
        ok = {name for name, result in results.items() if result.status == "ok"}
        return _judged(rule, roots, params, level, command, ok)
    except LimitExceeded as exc:
        return RuleCheck(rule.id, NOT_CHECKED, why=m("rule error: {error}", error=str(exc)))
    except Exception as exc:  # noqa: BLE001 - a user's rule may fail on data it did not expect
        return RuleCheck(rule.id, NOT_CHECKED, why=m("rule error: {error}",
                                                     error=f"{type(exc).__name__}: {exc}"[:300]))


def _row(symptom: str, cause: str, checks: list[RuleCheck]) -> CauseRow:
    # a rule whose probe skipped (another vendor's, an engine not here) leaves the row to the
    # rules that could judge: the foreign-process cause is ruled out on an NVIDIA host even
    # though its Ascend rule had no npu-smi to read
    deciding = [c for c in checks if not c.skipped] or checks
    statuses = {c.status for c in deciding}
    status = next(s for s in (CONFIRMED, NOT_CHECKED, RULED_OUT) if s in statuses)
    return CauseRow(cause, status, phase_of(symptom, cause), tuple(checks))


def build(symptom: str, rules: Iterable[Rule], results: Iterable[ProbeResult],
          findings: Iterable[Finding], specs: Mapping[str, ProbeSpec], level: Level,
          requests: bool, config: Config | None = None, command: str = "",
          rule_errors: Iterable[str] = ()) -> Differential:
    """The differential of ``symptom`` from one run's results and findings."""
    config = config or Config()
    command = command or f"llm-doctor why {symptom}"
    results = list(results)
    by_name = {r.name: r for r in results}
    roots = namespace(results)
    fired: dict[str, list[Finding]] = {}
    for finding in findings:
        fired.setdefault(finding.rule, []).append(finding)
    per_cause: dict[str, list[RuleCheck]] = {}
    for rule in candidates(symptom, rules):
        per_cause.setdefault(rule.cause, []).append(check_rule(
            rule, by_name, roots, tuple(fired.get(rule.id, ())), specs, level, requests, config,
            command))
    rows = [_row(symptom, cause, checks) for cause, checks in per_cause.items()]
    rows.sort(key=lambda r: sort_key(symptom, r.cause))
    return Differential(symptom, level, requests, tuple(rows), rule_errors=tuple(rule_errors))



def _reached(name: str, level: Level) -> bool:
    try:
        return Level.parse(name.strip()) <= level
    except ValueError:
        return False
