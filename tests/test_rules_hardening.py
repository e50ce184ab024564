"""Rule files that are wrong in type, encoding, size or nesting are clear errors, never tracebacks.

Every case ends in a RuleError naming the file, the line and the rule (exit 3 from the
command line), or, for what only shows when a rule runs, in a rule_errors entry naming
the rule. Cases are grouped by the class of input, as issue 5 §2 lists them.
"""

from __future__ import annotations

import os
import re
import textwrap

import pytest

from probes.registry import by_name
from doctor.rules.loader import MAX_RULES_PER_FILE, RuleError, load_file

GOOD = textwrap.dedent("""\
    [[rule]]
    id = "my-fd-rule"
    cause = "fd-limit-low"
    symptoms = ["crash-under-concurrency"]
    severity = "warning"
    probes = ["host.limits"]
    each = "host.limits.processes"
    when = "item.nofile_soft is not None and item.nofile_soft < params.min"
    for = "5m"
    title = "{process} has {n}"
    remediation = "raise it"
    playbook = "fd-limit-low"
    [rule.params]
    min = 100000
    [rule.evidence]
    process = "item.comm"
    n = "item.nofile_soft"
    """)


def write(tmp_path, text: str | bytes, name: str = "rules.toml"):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def error_of(tmp_path, text: str | bytes) -> str:
    path = write(tmp_path, text)
    with pytest.raises(RuleError) as err:
        load_file(path, by_name())
    message = str(err.value)
    assert message.startswith(str(path)), message
    return message


def edited(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


# --- the value of a field has the wrong type ---------------------------------------

WRONG_TYPES = [
    # (old text, new text, the line the error names, what it says)
    ('id = "my-fd-rule"', "id = 5", 2, "rule '#1': 'id' must be a non-empty string, not number 5"),
    ('id = "my-fd-rule"', "id = 1979-05-27", 2, "'id' must be a non-empty string, not date/time 1979-05-27"),
    ('id = "my-fd-rule"', 'id = "my rule\\u001b[2J"', 2, "'id' = 'my rule\\x1b[2J': use lowercase letters, digits"),
    ('cause = "fd-limit-low"', "cause = 7", 3, "rule 'my-fd-rule': 'cause' must be a non-empty string, not number 7"),
    ('symptoms = ["crash-under-concurrency"]', "symptoms = 3", 4, "'symptoms' must be an array of strings"),
    ('symptoms = ["crash-under-concurrency"]', "symptoms = [3]", 4, "'symptoms' must be an array of strings"),
    ('symptoms = ["crash-under-concurrency"]', "symptoms = {a = 1}", 4, "'symptoms' must be an array of strings"),
    ('symptoms = ["crash-under-concurrency"]', 'symptoms = "slowdown"', 4, "'symptoms' must be an array of strings"),
    ('severity = "warning"', "severity = 2", 5, "'severity' must be a non-empty string, not number 2"),
    ('probes = ["host.limits"]', "probes = [5]", 6, "'probes' must be a non-empty array of strings"),
    ('probes = ["host.limits"]', "probes = 1979-05-27T07:32:00", 6, "not date/time 1979-05-27 07:32:00"),
    ('probes = ["host.limits"]', "probes = {x = 1}", 6, "'probes' must be a non-empty array of strings"),
    ('each = "host.limits.processes"', "each = 5", 7, "'each' must be a non-empty expression string, not int 5"),
    ('for = "5m"', "for = 5", 9, "'for' must be a duration like \"30s\", \"5m\" or \"1h\", not number 5"),
    ('for = "5m"', 'for = "5 minutes"', 9, "'for' must be a duration"),
    ('title = "{process} has {n}"', "title = 5", 10, "'title' must be a non-empty string, not number 5"),
    ('title = "{process} has {n}"', "title = [1]", 10, "'title' must be a non-empty string, not array"),
    ('remediation = "raise it"', "remediation = true", 11, "'remediation' must be a non-empty string, not boolean true"),
    ('playbook = "fd-limit-low"', "playbook = 1.5", 12, "'playbook' must be a non-empty string, not number 1.5"),
    ('playbook = "fd-limit-low"', 'playbook = "../../etc/passwd"', 12, "'playbook' = '../../etc/passwd': use letters"),
    ("[rule.params]\nmin = 100000", "params = [1, 2]", 13, "'params' must be a table ([rule.params]), not array"),
    ("min = 100000", "min = 100000\n5 = 1", 15, "'params.5': a params name must be a word"),
    ("min = 100000", "min = 100000\nwhen_ = 1979-05-27", 15, "'params.when_' must be a number, string, boolean or an array of them, not date/time"),
    ("min = 100000", "min = 100000\nbad = nan", 15, "'params.bad' must be a number, string, boolean"),
    ("min = 100000", "min = 100000\nnested = {a = 1}", 15, "'params.nested' must be a number"),
    ('process = "item.comm"', "process = 5", 16, "'evidence.process' must be a non-empty expression string, not int 5"),
    ('process = "item.comm"', 'process = ["item.comm"]', 16, "'evidence.process' must be a non-empty expression string"),
    ('[rule.params]\nmin = 100000\n[rule.evidence]\nprocess = "item.comm"\nn = "item.nofile_soft"',
     'evidence = ["item.comm"]\n[rule.params]\nmin = 100000', 13,
     "'evidence' must be a table ([rule.evidence]), not array"),
]


@pytest.mark.parametrize("old,new,line,message", WRONG_TYPES, ids=[c[1][:30] for c in WRONG_TYPES])
def test_a_field_of_the_wrong_type_names_file_line_and_rule(tmp_path, old, new, line, message):
    text = edited(old, new)
    got = error_of(tmp_path, text)
    assert f"rules.toml:{line}: rule '" in got, got
    assert message in got


def test_a_rule_table_where_an_array_of_tables_is_expected_and_the_reverse(tmp_path):
    single = GOOD.replace("[[rule]]", "[rule]").replace("[rule.params]", "[rule.params]")
    assert "rules.toml:1: 'rule' must be [[rule]] tables (an array of tables), not table" in error_of(tmp_path, single)
    assert "'rule' must be [[rule]] tables (an array of tables), not number 5" in error_of(tmp_path, "rule = 5\n")
    assert "rules.toml:1: rule #1 must be a [[rule]] table, not number 1" in error_of(tmp_path, "rule = [1, 2]\n")


def test_unknown_top_level_keys_and_duplicates_in_one_file(tmp_path):
    assert "rules.toml:1: unknown top-level key or table 'rulez' (did you mean 'rule'?)" in \
        error_of(tmp_path, "rulez = 1\n" + GOOD)
    got = error_of(tmp_path, GOOD + GOOD)
    assert "rules.toml:18: rule id 'my-fd-rule' is already defined at" in got


# --- encoding, nesting, size -------------------------------------------------------

def test_non_utf8_bytes_name_the_line_and_column(tmp_path):
    data = GOOD.encode().replace(b"raise it", b"raise \xff it")
    assert "rules.toml:11: byte 0xff at column 22 is not UTF-8; save the file as UTF-8" in error_of(tmp_path, data)


def test_toml_nested_thousands_deep_is_an_error_not_a_recursion(tmp_path):
    deep = "x = " + "[" * 5000 + "]" * 5000 + "\n"
    assert "rules.toml:1: arrays or tables nested too deeply" in error_of(tmp_path, deep)
    tables = "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n"
    assert "rules.toml:1: arrays or tables nested too deeply" in error_of(tmp_path, tables)


@pytest.mark.parametrize("expression,message", [
    ("(" * 300 + "1" + ")" * 300, "'when' is not a valid expression"),
    ("not " * 300 + "True", "'when' nests more than 40 levels deep; write it flatter"),
    ("1" + " + 1" * 900, "'when' nests more than 40 levels deep"),
    ("-" * 3000 + "1", "'when' is not a valid expression: nested too deeply"),
    ("1 + " * 1200 + "1", "'when' is 4801 characters long; the limit is 4000"),
    ("(lambda: 1)()", "'when': Lambda is not available in a rule expression"),
    ("(x := 5)", "'when': NamedExpr is not available"),
    ("item.comm.__class__", "'when': '.__class__': names starting with _ are not available"),
    ("(1).__class__.__mro__", "names starting with _ are not available"),
    ("'a\\x00b'", None),  # a NUL inside a string literal is fine
])
def test_expressions_nested_hundreds_deep_or_too_long_are_errors(tmp_path, expression, message):
    text = edited('when = "item.nofile_soft is not None and item.nofile_soft < params.min"',
                  f"when = '''{expression}'''")
    if message is None:
        load_file(write(tmp_path, text), by_name())
        return
    got = error_of(tmp_path, text)
    assert "rules.toml:8: rule 'my-fd-rule': " in got
    assert message in got


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "huge"])
def test_a_rule_file_that_is_not_a_small_regular_file_is_refused_before_reading(tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "rules.toml"
        os.mkfifo(path)  # nobody writes: reading it would wait forever
    elif kind == "device":
        path = "/dev/zero"  # reading it never ends
    elif kind == "directory":
        path = tmp_path
    else:
        path = write(tmp_path, "# " + "x" * (4 << 20) + "\n")
    with pytest.raises(RuleError) as err:
        load_file(path, by_name())
    expected = {"fifo": "is not a regular file", "device": "is not a regular file",
                "directory": "is a directory", "huge": "the limit is 4,194,304 bytes (4 MiB)"}[kind]
    assert expected in str(err.value)


@pytest.mark.slow
def test_more_rules_than_the_limit_is_an_error_naming_the_first_one_over(tmp_path):
    text = "".join(GOOD.replace("my-fd-rule", f"r{i}") for i in range(MAX_RULES_PER_FILE + 1))
    got = error_of(tmp_path, text)
    line = 1 + MAX_RULES_PER_FILE * GOOD.count("\n")
    assert f"rules.toml:{line}: {MAX_RULES_PER_FILE + 1} rules in one file; the limit is 1000" in got


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_thousand_rules_load_in_linear_time(tmp_path):
    """Quadratic line lookup made 3,000 rules take minutes; linear takes about a second."""
    text = "".join(GOOD.replace("my-fd-rule", f"r{i}") for i in range(MAX_RULES_PER_FILE))
    rules = load_file(write(tmp_path, text), by_name())
    assert len(rules) == MAX_RULES_PER_FILE
    assert rules[-1].source.endswith(f":{1 + (MAX_RULES_PER_FILE - 1) * GOOD.count(chr(10))}")
    # an error in the last rule still names its own line
    broken = text[:text.rindex('severity = "warning"')] + 'sevrity = "warning"' + \
        text[text.rindex('severity = "warning"') + len('severity = "warning"'):]
    line = (MAX_RULES_PER_FILE - 1) * GOOD.count("\n") + 5
    assert f"rules.toml:{line}: rule 'r999': unknown field 'sevrity'" in error_of(tmp_path, broken)


# --- titles: a field names a value, never reaches through it ------------------------

@pytest.mark.parametrize("title,message", [
    ("{process.__class__}", "{process.__class__} at column 1: a title field is {label} or {label:spec}"),
    ("{process[0]}", "{process[0]} at column 1: a title field is {label} or {label:spec}"),
    ("x {process!r}", "{process!r} at column 3"),
    ("{process} {", "'{' at column 11 is never closed; write '{{' for a literal brace"),
    ("{process} }", "unmatched '}' at column 11; write '}}' for a literal brace"),
    ("{process:{n}}", "is not a plain format spec"),
    ("{n:>999999999}", "'>999999999' is not a plain format spec"),
    ("{}", "{} at column 1: a title field is {label}"),
    ("{count}", "title uses {count}, which is neither an evidence label nor a parameter"),
])
def test_a_title_that_reaches_through_a_value_is_refused_when_it_loads(tmp_path, title, message):
    got = error_of(tmp_path, edited('title = "{process} has {n}"', f"title = '{title}'"))
    assert "rules.toml:10: rule 'my-fd-rule': " in got
    assert message in got


def test_format_map_escape_cannot_read_the_environment(tmp_path):
    """str.format_map followed attributes: {f.__globals__[os].environ} printed secrets."""
    os.environ["LLM_DOCTOR_TEST_SECRET"] = "s3cret"
    try:
        text = edited('title = "{process} has {n}"',
                      "title = '{process.__init__.__globals__[os].environ[LLM_DOCTOR_TEST_SECRET]}'")
        got = error_of(tmp_path, text)
        assert "s3cret" not in got and "a title field is {label} or {label:spec}" in got
    finally:
        del os.environ["LLM_DOCTOR_TEST_SECRET"]


def test_titles_allow_labels_params_specs_and_literal_braces(tmp_path):
    from doctor.rules.titles import parse, render

    template = parse("{{lit}} {a:>6.2f} {b} {c:,} {d:.1f}", ["a", "b", "c", "d"])
    assert render(template, {"a": 0.5, "b": ["x", "y"], "c": 1048576, "d": None}) == \
        "{lit}   0.50 x, y 1,048,576 —"  # a None field is never "None" (tests/test_no_none.py)
    assert len(render(parse("{a}", ["a"]), {"a": "x" * 10_000})) == 200


# --- format versions ----------------------------------------------------------------

def test_rule_format_1_is_read_and_others_are_named(tmp_path):
    assert len(load_file(write(tmp_path, "format = 1\n" + GOOD), by_name())) == 1
    got = error_of(tmp_path, "# site rules\nformat = 2\n" + GOOD)
    assert re.search(r"rules.toml:2: this file is written in rule format 2, newer than "
                     r"llm-doctor \S+ reads rule format 1; upgrade llm-doctor", got), got
    assert "this file says rule format 0, which does not exist or is no longer read" in \
        error_of(tmp_path, "format = 0\n" + GOOD)
    assert "'format' must be a whole number (format = 1), not string '1'" in \
        error_of(tmp_path, "format = '1'\n" + GOOD)


# --- for the daemon: the `for` window in seconds, an item's identity ----------------

def test_for_is_parsed_into_seconds(tmp_path):
    for text, seconds in (("30s", 30.0), ("5m", 300.0), ("1h", 3600.0)):
        (rule,) = load_file(write(tmp_path, edited('for = "5m"', f'for = "{text}"')), by_name())
        assert rule.for_s == seconds and rule.for_ == text
    (rule,) = load_file(write(tmp_path, edited('for = "5m"\n', "")), by_name())
    assert rule.for_s is None


def test_key_needs_each_and_is_checked_like_any_expression(tmp_path):
    no_each = edited('each = "host.limits.processes"\n', "").replace("item.", "host.limits.engine_count + 0 if False else None and ")
    got = error_of(tmp_path, no_each.replace('for = "5m"', 'for = "5m"\nkey = "1"'))
    assert "rule 'my-fd-rule': 'key' names the item a finding is about: it needs 'each'" in got
    got = error_of(tmp_path, edited('for = "5m"', 'for = "5m"\nkey = "item.pdi"'))
    assert "rules.toml:10: rule 'my-fd-rule': 'key': 'item' has no field 'pdi' (did you mean 'pid'?)" in got


# --- through the command line: exit 3, one line, no traceback -----------------------

@pytest.mark.machine  # scans this machine (tests/tiers.py)
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_rules_check_and_scan_rules_exit_3_with_file_and_line(tmp_path, cli):
    bad = write(tmp_path, GOOD.encode().replace(b"raise it", b"raise \xff it"), "latin1.toml")
    newer = write(tmp_path, "format = 2\n" + GOOD, "newer.toml")
    title = write(tmp_path, GOOD.replace("{process} has {n}", "{process.__class__}"), "title.toml")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    cases = [
        (("rules", "check", str(bad)), "latin1.toml:11: byte 0xff at column 22 is not UTF-8"),
        (("rules", "check", str(newer)), "newer.toml:1: this file is written in rule format 2"),
        (("rules", "check", str(title)), "title.toml:10: rule 'my-fd-rule': {process.__class__}"),
        (("rules", "check", str(fifo)), "fifo.toml: the rule file is not a regular file"),
        (("scan", "--rules", "/dev/zero", "--no-progress"), "/dev/zero: the rule file is not a regular file"),
    ]
    for argv, message in cases:
        result = cli(*argv, timeout=60)
        assert result.returncode == 3, (argv, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_rules_check_of_3000_rules_says_split_it_quickly(tmp_path, cli):
    text = "".join(GOOD.replace("my-fd-rule", f"r{i}") for i in range(3000))
    result = cli("rules", "check", str(write(tmp_path, text)), timeout=60)
    assert result.returncode == 3
    assert "3000 rules in one file; the limit is 1000: split it into several files" in result.stderr
