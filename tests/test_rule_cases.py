"""Table tests for every rule: records in, findings out (tests/rule_cases/<rule id>.toml).

A case gives partial probe records; every field it leaves out is None (absent), as a
probe reports a value the host does not have. In ``expect``, the string "None" stands for
None (TOML has no null).
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from doctor import display
from doctor._toml import tomllib
from doctor.rules.evaluate import evaluate
from doctor.model import ProbeResult
from probes.registry import by_name
from doctor.rules.loader import element_type, optional_inner
from tests.builtin_rules import builtin_rules

CASES = Path(__file__).parent / "rule_cases"
RULES = {r.id: r for r in builtin_rules()}


def complete(tp, data):
    """Fill the fields a case leaves out with None, through nested records."""
    tp = optional_inner(tp)
    if dataclasses.is_dataclass(tp) and isinstance(data, dict):
        hints = typing.get_type_hints(tp)
        unknown = set(data) - set(hints)
        assert not unknown, f"{tp.__name__} has no field(s) {unknown}: fix the case"
        return {name: complete(hints[name], data.get(name)) for name in hints}
    if isinstance(data, list):
        return [complete(element_type(tp), item) for item in data]
    return data


def results_for(records: dict) -> list[ProbeResult]:
    specs = by_name()
    out = []
    for name, data in records.items():
        record_type = typing.get_type_hints(specs[name].run)["return"]
        out.append(ProbeResult(name, "ok", 0.0, None, complete(record_type, data)))
    return out


def _none(value):
    if value == "None":
        return None
    if isinstance(value, dict):
        return {k: _none(v) for k, v in value.items()}
    return value


def all_cases():
    for path in sorted(CASES.glob("*.toml")):
        for case in tomllib.loads(path.read_text())["case"]:
            yield pytest.param(path.stem, case, id=f"{path.stem}: {case['name']}")


@pytest.mark.parametrize("rule_id,case", list(all_cases()))
def test_rule_case(rule_id, case):
    rule = RULES[rule_id]
    findings, errors = evaluate([rule], results_for(case["records"]))
    assert errors == []
    expected = case["expect"]
    assert len(findings) == len(expected), [f.title for f in findings]
    for finding, want in zip(findings, expected):
        assert finding.rule == rule_id
        assert finding.cause == rule.cause
        assert finding.symptoms == rule.symptoms
        assert finding.severity.label == want["severity"]
        for key, value in _none(want.get("evidence", {})).items():
            assert finding.evidence[key] == value, key
        assert "{" not in finding.title
        # A title names only what its condition guarantees; the rest sits in optional
        # segments {? …}: no field of a firing case shows "—" (absent) or "None".
        assert display.ABSENT not in finding.title and "None" not in finding.title, finding.title


def test_every_rule_has_a_firing_and_a_silent_case():
    for rule_id in RULES:
        path = CASES / f"{rule_id}.toml"
        assert path.is_file(), f"rule {rule_id} has no table test {path}"
        cases = tomllib.loads(path.read_text())["case"]
        assert any(c["expect"] for c in cases), f"{rule_id}: no case where it fires"
        assert any(not c["expect"] for c in cases), f"{rule_id}: no case where it stays silent"


def test_no_case_file_without_a_rule():
    assert {p.stem for p in CASES.glob("*.toml")} <= set(RULES)
