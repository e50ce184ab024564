"""Generated rule files, configs and expressions: a clear error or a result, never a crash.

hypothesis mutates a good rule file and a good config with TOML's own tokens (brackets,
quotes, dates, numbers, bad bytes) and builds expressions from the operations that can
grow values. Every load ends in a loaded rule or a RuleError/ConfigError; every
evaluation in findings or rule_errors, within a bound of time.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doctor.config import ConfigError, check_against_rules, load_config
from doctor.rules.evaluate import evaluate
from probes.registry import by_name
from doctor.rules.loader import RuleError, load_file
from tests.test_rules_bounds import records, rules_of
from tests.test_rules_hardening import GOOD

TOKENS = ["[", "]", "[[", "]]", "{", "}", "=", '"', "'", "'''", '"""', "\n", ",", ".", "5",
          "-1", "1e999", "nan", "1979-05-27", "07:32:00", "true", "[rule]", "[[rule]]",
          "[rule.params]", "[rule.evidence]", "format = 2", "{x.__class__}", "{n:>9999}",
          "item.", "params.", "__class__", "(", ")", "not ", " * 10**9", "\\u0000", "#",
          "x = ", "each = ", "key = ", "for = "]
BYTES = [b"\xff", b"\xc3", b"\x00", b"\r"]

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def mutated(draw, base: str) -> bytes:
    data = bytearray(base.encode())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        choice = draw(st.integers(0, 3))
        if choice == 0:
            data[at:at] = draw(st.sampled_from(TOKENS)).encode()
        elif choice == 1:
            data[at:at + draw(st.integers(1, 20))] = b""
        elif choice == 2:
            data[at:at] = draw(st.sampled_from(BYTES))
        else:
            data[at:at] = draw(st.text(max_size=8)).encode()
    return bytes(data)


@pytest.mark.slow
@FUZZ
@given(mutated(GOOD))
def test_a_mutated_rule_file_loads_or_is_a_rule_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "rules.toml"
    path.write_bytes(data)
    try:
        load_file(path, by_name())
    except RuleError as exc:
        assert str(exc).startswith(str(path))


CONFIG = "[scan]\nlevel = 'quick'\nmodel_dirs = ['/m']\n\n[rules.fd-limit-low]\nmin_nofile = 100000\nseverity = 'critical'\n"


@pytest.mark.slow
@FUZZ
@given(mutated(CONFIG))
def test_a_mutated_config_loads_or_is_a_config_error(tmp_path_factory, data):
    from tests.test_config_hardening import RULES

    path = tmp_path_factory.mktemp("fuzz") / "c.toml"
    path.write_bytes(data)
    try:
        check_against_rules(load_config(path), RULES)
    except ConfigError as exc:
        assert str(exc).startswith(str(path))


LEAVES = ["item.comm", "item.pid", "item.cpu_cores", "1", "'ab\\t'", "10**9", "[0]*100000",
          "host.cpu_load.top", "'x'*99999", "[item.comm]*50000", "None"]
FORMS = ["({} + {})", "({} * {})", "str({})", "[{} for p in {}]", "{}.expandtabs({})",
         "join({})", "sorted({})", "len({})", "({} == {})", "({} in {})", "{}.replace('a', {})",
         "{}.ljust({})", "[{}, {}]", "f'{{{}}}{{{}}}'", "max({})", "({} ** {})", "({} << {})",
         "{{p: {} for p in {}}}", "any({} for p in {})"]


def expressions():
    def extend(inner):
        return st.builds(lambda form, a, b: form.format(a, b) if form.count("{}") == 2 else form.format(a),
                         st.sampled_from(FORMS), inner, inner)
    return st.recursive(st.sampled_from(LEAVES), extend, max_leaves=6)


@pytest.mark.slow
@FUZZ
@given(expressions())
def test_a_generated_expression_evaluates_or_is_a_rule_error_quickly(tmp_path_factory, expression):
    folder = tmp_path_factory.mktemp("fuzz")
    try:
        rules = rules_of(folder, ("item.cpu_cores > 0", expression))
    except RuleError:
        return  # refused when it loads: that is a clear error too
    started = time.monotonic()
    findings, errors = evaluate(rules, records(3), time_limit_s=0.5)
    elapsed = time.monotonic() - started
    assert elapsed < 5, (expression, elapsed)
    assert len(findings) == 3 or (len(errors) == 1 and errors[0].startswith("rule 'r0'")), errors


@pytest.mark.parametrize("expression", [
    "sorted([0] * 100000 + [1] * 100000)",
    "[p for p in [0] * 100000] == [p for p in [0] * 100000]",
    "[0] * 99999 + [1] in [[0] * 100000 for p in [0] * 9]",
])
def test_long_single_operations_are_bounded_too(tmp_path, expression):
    rules = rules_of(tmp_path, ("item.cpu_cores > 0", expression))
    started = time.monotonic()
    findings, errors = evaluate(rules, records(3), time_limit_s=0.5)
    assert time.monotonic() - started < 5
    assert len(findings) + len(errors) >= 1
