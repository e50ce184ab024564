"""Evaluates rules against probe records and turns matches into findings.

Each rule runs in its own bounded evaluator (doctor/rules/sandbox.py): a rule that goes past
RULE_TIME_LIMIT_S, or builds values too large, becomes a ``rule_errors`` entry naming it,
and the other rules still run. Work is linear in the number of items a rule walks.

A value a record lacks is None. A condition that compares or computes with one is not met
for that item (it is not judged, never a rule error), and evidence computed from one is
None, which the title leaves out or shows with its reason (doctor/rules/titles.py).
"""

from __future__ import annotations

import ast
import dataclasses
import time
from typing import Any

from doctor.config import Config
from doctor.model import Finding, ProbeResult, Severity
from doctor.rules.expressions import chain_of
from doctor.rules.loader import DEFAULT_KEY_FIELDS, Rule
from doctor.rules.sandbox import Evaluator, FeatureNotAvailable, LimitExceeded
from doctor.vocabulary import FIRST_CAUSES
from doctor.i18n import LANGS, Speaking
from doctor.i18n.text import Localized, localized, said
from doctor.rules.titles import render

RULE_TIME_LIMIT_S = 2.0  # wall time for one rule over all its items; real rules take < 10 ms
MAX_KEY_CHARS = 200
MAX_ERROR_CHARS = 300


def plain(value: Any) -> Any:
    """A record as dicts, lists and scalars: what expressions see (``item.comm``).

    Like ``dataclasses.asdict`` without its deep copy of every leaf: records are frozen
    and hold plain values, so sharing the leaves is safe and cheap.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def namespace(results: list[ProbeResult],
              problems: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """{"host": {"limits": {...record as dict...}}} from the probes that ran ok.

    A record nested too deeply to convert (a recorded host's free-form values) is left
    out, with a line in ``problems``; the rules that need it then report a rule error.
    """
    roots: dict[str, dict[str, Any]] = {}
    for result in results:
        if result.status == "ok" and result.record is not None:
            root, _, rest = result.name.partition(".")
            try:
                roots.setdefault(root, {})[rest] = plain(result.record)  # table tests pass dicts
            except RecursionError:
                if problems is not None:
                    problems.append(f"probe '{result.name}': its record is nested too deeply "
                                    "for rules to read")
    return roots


def item_key(item: Any) -> str:
    """An item's identity without a `key` expression: its pid, uuid, name or path field."""
    if isinstance(item, dict):
        for name in DEFAULT_KEY_FIELDS:
            if item.get(name) is not None:
                return str(item[name])
        return ""
    return str(item) if isinstance(item, (str, int, float)) else ""


def _absent_field(tree: ast.expr, names: dict[str, Any]) -> tuple[dict, str] | None:
    """The record (a dict) and the name of the first field the expression reads that is None
    and has a ``missing`` reason; None when no record says."""
    chains = (chain_of(node) for node in ast.walk(tree) if isinstance(node, ast.Attribute))
    for chain in chains:
        if not chain or chain[0] not in names:
            continue  # a comprehension's own name (p.a for p in ...), or a function
        parent: Any = names[chain[0]]
        for part in chain[1:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or parent.get(chain[-1], 0) is not None:
            continue
        missing = parent.get("missing")
        reason = missing.get(chain[-1]) if isinstance(missing, dict) else None
        if isinstance(reason, str) and reason:
            return parent, chain[-1]
    return None


def missing_reason(tree: ast.expr, names: dict[str, Any]) -> str | None:
    """Why an expression's value is None: the ``missing`` entry of the first record field the
    expression reads that is None and has one (``item.read_mbps`` → the item's
    ``missing["read_mbps"]``, "not measured at level quick"); None when no record says."""
    found = _absent_field(tree, names)
    return found[0]["missing"][found[1]] if found else None


def none_set(tree: ast.expr, names: dict[str, Any]) -> bool:
    """Whether that None is a value, not a failed read: the record lists the field in its
    ``unset`` (no CPU quota, an unlimited process limit). The rules still do not judge it (a
    condition cannot tell); `why` rules the cause out on it."""
    found = _absent_field(tree, names)
    unset = found[0].get("unset") if found else None
    return isinstance(unset, (list, tuple)) and found is not None and found[1] in unset


def rule_items(rule: Rule, ev: Evaluator, ok: set[str] | None = None) -> list[Any]:
    """The items a rule judges one by one: those of its ``each`` expression's list (a
    mapping's keys) when its probes ran ok, then those of each ``each_also`` path whose probe
    ran ok (``ok`` None: every probe the names hold); ``[None]`` for a rule without ``each``
    (one judgement of the whole record). A value that is no collection is the rule's error
    (TypeError)."""
    if not rule.each:
        return [None]
    sources = []
    if ok is None or set(rule.probes) <= ok:
        sources.append((rule.compiled["each"], rule.each))
    for i, (path, probe) in enumerate(zip(rule.each_also, rule.also_probes)):
        if probe in (ok if ok is not None else ()):
            sources.append((rule.compiled[f"each_also.{i}"], path))
    items: list[Any] = []
    for tree, source in sources:
        value = ev.run(tree, source)
        if value is None:
            continue
        if not isinstance(value, (list, tuple, set, frozenset, dict)):
            raise TypeError(f"'each' gave a {type(value).__name__}, not a list of items")
        items.extend(value)
    return items


def _of_absent(exc: Exception) -> bool:
    """Whether an expression failed only because a value it used is absent (None): a
    comparison or arithmetic with None, as Python words it."""
    return "NoneType" in str(exc)


def roots_for(rule: Rule, roots: dict, ok: set[str]) -> dict:
    """``roots`` with the rule's own probes that did not run as None, for a rule that runs on
    ``each_also``'s items alone (another vendor's host): ``gpu.memory.engine_count`` is then
    absent there, as any value the host does not report, not a rule error."""
    if set(rule.probes) <= ok:
        return roots
    out = dict(roots)
    for probe in rule.probes:
        if probe not in ok:
            family, _, name = probe.partition(".")
            out[family] = {**out.get(family, {}), name: None}
    return out


def run_or_absent(ev: Evaluator, compiled: Any, source: str) -> Any:
    """The expression's value; None when a value it needs is absent. A record's figure that
    is no number (NaN on an engine page, a field the host does not have) is None: it is not
    judged, and no rule fails on it; any other error is the rule's own."""
    try:
        return ev.run(compiled, source)
    except (TypeError, FeatureNotAvailable) as exc:  # '.field' of None: "not available on a NoneType value"
        if _of_absent(exc):
            return None
        raise


def _matches(rule: Rule, roots: dict, params: dict, severity: Severity,
             time_limit_s: float, ok: set[str] | None = None) -> list[Finding]:
    ev = Evaluator({**roots, "params": params, "item": None}, time_limit_s)
    findings = []
    for item in rule_items(rule, ev, ok):
        ev.names["item"] = item
        if not run_or_absent(ev, rule.compiled["when"], rule.when):
            continue  # not met, or not judged: a value the condition needs is absent
        level = severity
        if rule.critical_when and run_or_absent(ev, rule.compiled["critical_when"],
                                                 rule.critical_when):
            level = Severity.CRITICAL
        evidence = {label: run_or_absent(ev, rule.compiled[f"evidence.{label}"], expr)
                    for label, expr in rule.evidence.items()}
        missing = {label: reason for label, value in evidence.items() if value is None
                   and (reason := missing_reason(rule.compiled[f"evidence.{label}"],
                                                 ev.names))}
        key = ""
        if rule.each:
            key = ev.run(rule.compiled["key"], rule.key) if rule.key else item_key(item)
        findings.append(Finding(
            rule=rule.id,
            cause=rule.cause,
            symptoms=rule.symptoms,
            severity=level,
            title=said(_title(rule, {**params, **evidence}, missing)),
            evidence=evidence,
            remediation=said(localized({lang: rule.remediation_in(lang) for lang in LANGS})),
            playbook=f"playbooks/{rule.playbook}.md",
            key=str(key)[:MAX_KEY_CHARS],
            missing=missing,
        ))
    return findings


def _title(rule: Rule, fields: dict[str, Any], missing: dict[str, str]) -> Localized:
    """The title filled from the rule's template in each language: a finding carries them
    all, and a report says the one it speaks (a saved scan re-renders without the rule)."""
    texts = {}
    for lang in LANGS:
        with Speaking(lang):  # an absent value's word ("—", a reason) in that language
            texts[lang] = render(rule.title_in(lang), fields, missing)
    return localized(texts)


def _message(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, LimitExceeded) else str(exc)
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 1] + "…"


def evaluate(rules: list[Rule], results: list[ProbeResult], config: Config | None = None,
             time_limit_s: float = RULE_TIME_LIMIT_S) -> tuple[list[Finding], list[str]]:
    """Findings (worst first) and the rules that failed to evaluate, as messages."""
    config = config or Config()
    findings: list[Finding] = []
    errors: list[str] = []
    roots = namespace(results, errors)
    ok = {r.name for r in results if r.status == "ok"}
    for rule in rules:
        override = config.rules.get(rule.id, {})
        if not override.get("enabled", True) or not rule.evaluated_with(ok):
            continue
        params = {**rule.params, **{k: v for k, v in override.items() if k in rule.params}}
        severity = Severity[override["severity"].upper()] if "severity" in override else rule.severity
        started = time.monotonic()
        try:
            findings.extend(_matches(rule, roots_for(rule, roots, ok), params, severity,
                                     time_limit_s, ok))
        except LimitExceeded as exc:
            errors.append(f"rule '{rule.id}' ({rule.source}): stopped: {exc} "
                          f"(after {time.monotonic() - started:.1f} s); simplify its expressions")
        except Exception as exc:  # noqa: BLE001 - a user's rule may fail on any data it did not expect
            errors.append(f"rule '{rule.id}' ({rule.source}): {_message(exc)}")
    findings.sort(key=lambda f: (-f.severity, f.cause not in FIRST_CAUSES, f.rule))
    return findings, errors
