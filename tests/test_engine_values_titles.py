"""A title never says None, for every rule in checks/, whatever value its records lack.

Every firing case of tests/rule_cases/ is taken again with each value its records give
made absent (None), one at a time and all of an item's numbers at once: as a probe reports
a figure an engine page holds as NaN, or that a host does not have. Each rule then stays
silent or fires with a title that says neither None nor "nan"/"inf", and no rule ends in a
rule error: what is missing is left out of the title ({? …}) or shows why it is missing.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import types
import typing

import pytest

from doctor._toml import tomllib
from doctor.rules.evaluate import evaluate
from doctor.rules.loader import element_type, optional_inner
from probes.registry import by_name
from tests.test_rule_cases import CASES, RULES, results_for

NOT_A_NUMBER = re.compile(r"\bNone\b|(?<![\w-])(?:nan|NaN|inf|Infinity)(?![\w-])")


def _leaves(data, path=()):
    """Paths to every scalar of a case's records (not the record names themselves)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from _leaves(value, (*path, i))
    elif len(path) > 1:
        yield path


def _without(records, paths):
    out = copy.deepcopy(records)
    for path in paths:
        parent = out
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict):
            parent.pop(path[-1], None)  # left out: None, as tests/test_rule_cases.py fills it
        else:
            parent[path[-1]] = None
    return out


def firing_cases():
    for path in sorted(CASES.glob("*.toml")):
        for case in tomllib.loads(path.read_text())["case"]:
            if case["expect"]:
                yield pytest.param(path.stem, case, id=f"{path.stem}: {case['name']}")


def _may_be_none(path) -> bool:
    """Whether the record field at ``path`` (probe, field, index, field, ...) is Optional:
    only those a probe can report missing (a kind or an endpoint is always there)."""
    tp: typing.Any = typing.get_type_hints(by_name()[path[0]].run)["return"]
    for step in path[1:]:
        tp = optional_inner(tp)
        if isinstance(step, int):
            tp = element_type(tp)
        elif dataclasses.is_dataclass(tp):
            tp = typing.get_type_hints(tp).get(step)
        else:
            return False
    return type(None) in typing.get_args(tp) and isinstance(tp, (types.UnionType, typing._UnionGenericAlias))  # type: ignore[attr-defined]


def _variants(records):
    leaves = [leaf for leaf in _leaves(records) if _may_be_none(leaf)]
    for leaf in leaves:
        yield "/".join(map(str, leaf)), _without(records, [leaf])
    numbers = [leaf for leaf in leaves if isinstance(_get(records, leaf), (int, float))
               and not isinstance(_get(records, leaf), bool)]
    if numbers:
        yield "every number", _without(records, numbers)


def _get(data, path):
    for step in path:
        data = data[step]
    return data


@pytest.mark.parametrize("rule_id,case", list(firing_cases()))
def test_a_rule_given_records_with_missing_values_never_titles_none(rule_id, case):
    rule = RULES[rule_id]
    problems = []
    for what, records in _variants(case["records"]):
        try:
            results = results_for(records)
        except (AssertionError, TypeError, ValueError):
            continue  # a record that cannot be built without it (a nested key): no case
        findings, errors = evaluate([rule], results)
        problems += [f"{what} missing: rule error {e}" for e in errors]
        problems += [f"{what} missing: title {f.title!r}" for f in findings
                     if NOT_A_NUMBER.search(f.title)]
    assert problems == [], "\n".join(problems[:20])


def test_the_check_finds_what_it_looks_for():
    for title in ("block size 1 wastes None of the KV cache; use None", "KV nan% full",
                  "throughput inf tok/s"):
        assert NOT_A_NUMBER.search(title), title
    for title in ("GPU inf-cpu-07 idle", "wastes 0.35 of the KV cache", "vllm at 127.0.0.1"):
        assert not NOT_A_NUMBER.search(title), title
