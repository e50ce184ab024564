"""Evaluates rules against probe records and turns matches into findings."""

from __future__ import annotations

import dataclasses
from typing import Any

from simpleeval import EvalWithCompoundTypes

from doctor.config import Config
from doctor.model import Finding, ProbeResult, Severity
from doctor.rules import FUNCTIONS, Rule


def namespace(results: list[ProbeResult]) -> dict[str, dict[str, Any]]:
    """{"host": {"limits": {...record as dict...}}} from the probes that ran ok."""
    roots: dict[str, dict[str, Any]] = {}
    for result in results:
        if result.status == "ok" and result.record is not None:
            root, _, rest = result.name.partition(".")
            record = result.record
            if dataclasses.is_dataclass(record):
                record = dataclasses.asdict(record)
            roots.setdefault(root, {})[rest] = record  # table tests pass plain dicts
    return roots


def _text(value: Any) -> Any:
    """A value as a title shows it: {"powersave": 128} → "powersave×128"."""
    if isinstance(value, dict):
        return ", ".join(f"{k}×{v}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "none"
    return value


def _evaluator(roots: dict, params: dict, item: Any) -> EvalWithCompoundTypes:
    names = {**roots, "params": params, "item": item, "True": True, "False": False, "None": None}
    return EvalWithCompoundTypes(functions=dict(FUNCTIONS), names=names)


def _matches(rule: Rule, roots: dict, params: dict, severity: Severity) -> list[Finding]:
    items = [None]
    if rule.each:
        items = list(_evaluator(roots, params, None).eval(rule.each, rule.compiled["each"]) or [])
    findings = []
    for item in items:
        ev = _evaluator(roots, params, item)
        if not ev.eval(rule.when, rule.compiled["when"]):
            continue
        level = severity
        if rule.critical_when and ev.eval(rule.critical_when, rule.compiled["critical_when"]):
            level = Severity.CRITICAL
        evidence = {label: ev.eval(expr, rule.compiled[f"evidence.{label}"])
                    for label, expr in rule.evidence.items()}
        findings.append(Finding(
            rule=rule.id,
            cause=rule.cause,
            symptoms=rule.symptoms,
            severity=level,
            title=rule.title.format_map({k: _text(v) for k, v in {**params, **evidence}.items()}),
            evidence=evidence,
            remediation=rule.remediation,
            playbook=f"playbooks/{rule.playbook}.md",
        ))
    return findings


def evaluate(rules: list[Rule], results: list[ProbeResult],
             config: Config | None = None) -> tuple[list[Finding], list[str]]:
    """Findings (worst first) and the rules that failed to evaluate, as messages."""
    config = config or Config()
    ok = {r.name for r in results if r.status == "ok"}
    roots = namespace(results)
    findings: list[Finding] = []
    errors: list[str] = []
    for rule in rules:
        override = config.rules.get(rule.id, {})
        if not override.get("enabled", True) or not set(rule.probes) <= ok:
            continue
        params = {**rule.params, **{k: v for k, v in override.items() if k in rule.params}}
        severity = Severity[override["severity"].upper()] if "severity" in override else rule.severity
        try:
            findings.extend(_matches(rule, roots, params, severity))
        except Exception as exc:  # a user's rule may fail on data it did not expect
            errors.append(f"rule '{rule.id}' ({rule.source}): {type(exc).__name__}: {exc}")
    findings.sort(key=lambda f: (-f.severity, f.rule))
    return findings, errors
