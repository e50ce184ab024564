"""A broken rule or config is a clear error naming the file, the rule id and the position."""

from __future__ import annotations

import textwrap

import pytest

from doctor.config import ConfigError, check_against_rules, load_config
from probes.registry import by_name
from doctor.rules.loader import RuleError, builtin_files, load_file, load_rules
from tests.builtin_rules import builtin_rules

GOOD = """
[[rule]]
id = "my-fd-rule"
cause = "fd-limit-low"
symptoms = ["crash-under-concurrency"]
severity = "warning"
probes = ["host.limits"]
each = "host.limits.processes"
when = "item.nofile_soft is not None and item.nofile_soft < params.min"
title = "{process} has {n}"
remediation = "raise it"
playbook = "fd-limit-low"
[rule.params]
min = 100000
[rule.evidence]
process = "item.comm"
n = "item.nofile_soft"
"""


def write(tmp_path, text, name="rules.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path, text):
    return load_file(write(tmp_path, text), by_name())


def test_builtin_rules_load():
    rules = load_rules(builtin_files(), by_name())
    assert {"fd-limit-low", "process-limit-low", "network-backlog-small", "swap-active",
            "cpu-powersave-governor", "cpu-contention", "host-memory-bandwidth-low",
            "model-on-slow-disk"} <= {r.id for r in rules}


def test_a_good_user_rule_loads(tmp_path):
    (rule,) = load(tmp_path, GOOD)
    assert rule.id == "my-fd-rule" and rule.params == {"min": 100000}


@pytest.mark.parametrize("edit,message", [
    (("severity = ", "sevrity = "), "rules.toml:6: rule 'my-fd-rule': unknown field 'sevrity' (did you mean 'severity'?)"),
    (("item.nofile_soft < params.min", "item.nofile_sfot < params.min"), "'item' has no field 'nofile_sfot' (did you mean 'nofile_soft'?)"),
    (("params.min\"", "params.minimum\""), "no parameter 'minimum' (did you mean 'min'?)"),
    (("host.limits.processes", "host.limit.processes"), "no probe 'host.limit' (did you mean 'limits'?)"),
    (('cause = "fd-limit-low"', 'cause = "fd-limits-low"'), "rules.toml:4: rule 'my-fd-rule': unknown cause id 'fd-limits-low' (did you mean 'fd-limit-low'?)"),
    (('"crash-under-concurrency"', '"crash"'), "unknown symptom row 'crash'"),
    (('severity = "warning"', 'severity = "bad"'), "severity 'bad' is not one of info, warning, critical"),
    (('probes = ["host.limits"]', 'probes = ["host.limitz"]'), "no probe 'host.limitz' (did you mean 'host.limits'?)"),
    (("{process} has {n}", "{process} has {count}"), "title uses {count}, which is neither an evidence label nor a parameter"),
    (("item.nofile_soft < params.min", "item.nofile_soft < < params.min"), "'when' is not a valid expression at column"),
    (("item.nofile_soft < params.min", "__import__('os')"), "unknown name '__import__'"),
    (("item.nofile_soft < params.min", "host.limits.processes.nofile_soft < 5"),
     "'host.limits.processes' is a list: take its items with each"),
])
def test_a_broken_rule_names_file_rule_and_position(tmp_path, edit, message):
    old, new = edit
    assert old in GOOD
    with pytest.raises(RuleError) as err:
        load(tmp_path, GOOD.replace(old, new, 1))
    assert str(tmp_path / "rules.toml") in str(err.value)
    assert message in str(err.value)


def test_missing_field(tmp_path):
    with pytest.raises(RuleError, match="rule 'my-fd-rule': missing field 'playbook'"):
        load(tmp_path, GOOD.replace('playbook = "fd-limit-low"\n', ""))


def test_invalid_toml_gives_the_line(tmp_path):
    with pytest.raises(RuleError, match=r"not valid TOML: .*line 3"):
        load(tmp_path, "[[rule]]\nid = 'x'\nwhen = oops\n")


def test_duplicate_rule_id(tmp_path):
    path = write(tmp_path, GOOD.replace("my-fd-rule", "fd-limit-low"))
    with pytest.raises(RuleError, match="rule id 'fd-limit-low' is already defined at"):
        load_rules([*builtin_files(), path], by_name())


@pytest.mark.slow
def test_rule_check_cli_reports_a_typo_without_traceback(tmp_path, cli):
    path = write(tmp_path, GOOD.replace("severity = ", "sevrity = "))
    result = cli("rules", "check", str(path))
    assert result.returncode == 3
    assert "unknown field 'sevrity'" in result.stderr
    assert "Traceback" not in result.stderr
    ok = cli("rules", "check", str(write(tmp_path, GOOD, "good.toml")))
    assert ok.returncode == 0 and "1 rule(s) ok: my-fd-rule" in ok.stdout


# --- config -----------------------------------------------------------------------

RULES = builtin_rules()


def config_error(tmp_path, text):
    path = write(tmp_path, text, "llm-doctor.toml")
    with pytest.raises(ConfigError) as err:
        check_against_rules(load_config(path), RULES)
    return str(err.value)


def test_config_overrides_are_checked(tmp_path):
    path = write(tmp_path, "[rules.fd-limit-low]\nmin_nofile = 100000\nseverity = 'critical'\n", "c.toml")
    check_against_rules(load_config(path), RULES)  # no error
    msg = config_error(tmp_path, "[rules.fd-limit-lo]\nmin_nofile = 1\n")
    assert "llm-doctor.toml:1: [rules.fd-limit-lo]: no such rule (did you mean 'fd-limit-low'?)" in msg
    msg = config_error(tmp_path, "\n[rules.fd-limit-low]\nmin_nofil = 1\n")
    assert "llm-doctor.toml:3: rules.fd-limit-low.min_nofil: rule 'fd-limit-low' has no parameter 'min_nofil' (did you mean 'min_nofile'?)" in msg
    msg = config_error(tmp_path, "[rules.fd-limit-low]\nmin_nofile = 'lots'\n")
    assert "must be a int like the default (16384), not 'lots'" in msg
    msg = config_error(tmp_path, "[rules.swap-active]\nseverity = 'urgent'\n")
    assert "must be info, warning or critical" in msg


def test_config_unknown_table_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match=r"c.toml:1: unknown table \[rule\] \(did you mean 'rules'\?\)"):
        load_config(write(tmp_path, "[rule]\nx = 1\n", "c.toml"))
    with pytest.raises(ConfigError, match=r"not valid TOML"):
        load_config(write(tmp_path, "[rules\n", "c.toml"))
    with pytest.raises(ConfigError, match=r"unknown key scan.levle \(did you mean 'level'\?\)"):
        load_config(write(tmp_path, "[scan]\nlevle = 'quick'\n", "c.toml"))


@pytest.mark.machine  # scans this machine: a server of another test would change what it finds
@pytest.mark.slow
def test_config_threshold_changes_what_fires(tmp_path, cli):
    """A raised threshold makes fd-limit-low fire on a shell that is fine by default."""
    config = write(tmp_path, "[rules.fd-limit-low]\nmin_nofile = 2000000\n", "c.toml")
    result = cli("scan", "--level", "quick", "--format", "json", "--config", str(config),
                 "--no-progress")
    import json

    rules = [f["rule"] for f in json.loads(result.stdout)["findings"]]
    assert "fd-limit-low" in rules
    disabled = write(tmp_path, "[rules.fd-limit-low]\nmin_nofile = 2000000\nenabled = false\n", "d.toml")
    result = cli("scan", "--level", "quick", "--format", "json", "--config", str(disabled),
                 "--no-progress")
    assert "fd-limit-low" not in [f["rule"] for f in json.loads(result.stdout)["findings"]]


def test_the_example_in_docs_rules_md_loads(tmp_path):
    from tests.conftest import REPO

    text = (REPO / "docs" / "rules.md").read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    (rule,) = load(tmp_path, example)
    assert rule.id == "engine-fd-limit-below-site-standard"
