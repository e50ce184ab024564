"""A config file of the wrong shape is exit 3 with the file, the line and the key; never a traceback."""

from __future__ import annotations

import os

import pytest

from doctor.config import ConfigError, check_against_rules, find_config, load_config
from tests.builtin_rules import builtin_rules

RULES = builtin_rules()


def error_of(tmp_path, text: str | bytes) -> str:
    path = tmp_path / "c.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ConfigError) as err:
        check_against_rules(load_config(path), RULES)
    message = str(err.value)
    assert message.startswith(str(path)), message
    return message


@pytest.mark.parametrize("text,message", [
    ("scan = 5\n", "c.toml:1: 'scan' must be a table ([scan] with level, model_dirs, rule_files), not a number"),
    ("rules = 5\n", "c.toml:1: 'rules' must hold tables ([rules.<rule id>]), not a number"),
    ("rules = [1]\n", "c.toml:1: 'rules' must hold tables ([rules.<rule id>]), not a array"),
    ("[scan]\nrule_files = [5]\n", "c.toml:2: scan.rule_files must be an array of paths (strings)"),
    ("[scan]\nrule_files = 'a.toml'\n", "c.toml:2: scan.rule_files must be an array of paths (strings), e.g. rule_files = [\"/models/llama\"], not string 'a.toml'"),
    ("[scan]\nmodel_dirs = [['x']]\n", "c.toml:2: scan.model_dirs must be an array of paths (strings)"),
    ("[scan]\nmodel_dirs = [{a = 1}]\n", "c.toml:2: scan.model_dirs must be an array of paths"),
    ("[scan]\nmodel_dirs = ['']\n", "c.toml:2: scan.model_dirs must be an array of paths"),
    ("[scan]\nlevel = 5\n", "c.toml:2: scan.level = 5; use quick, standard or full"),
    ("[scan]\nlevel = 'fast'\n", "c.toml:2: scan.level = 'fast'; use quick, standard or full"),
    ("[scan]\nlevel = 1979-05-27\n", "c.toml:2: scan.level = datetime.date(1979, 5, 27); use quick"),
    ("[rules]\nx = 5\n", "c.toml:2: rules.x must be a table ([rules.x] with the rule's parameters), not a number"),
    ("\n[rules]\nfd-limit-low = 'off'\n", "c.toml:3: rules.fd-limit-low must be a table"),
    ("[rules.fd-limit-low]\nenabled = 'no'\n", "c.toml:2: rules.fd-limit-low.enabled: must be true or false"),
    ("[rules.fd-limit-low]\nseverity = 2\n", "c.toml:2: rules.fd-limit-low.severity: must be info, warning or critical"),
    ("[rules.fd-limit-low]\n\nmin_nofile = [1]\n", "c.toml:3: rules.fd-limit-low.min_nofile: must be a int like the default (16384), not [1]"),
    ("[rules.fd-limit-low]\nmin_nofile = 1979-05-27\n", "rules.fd-limit-low.min_nofile: must be a int like the default"),
    ("[rules.fd-limit-low]\nmin_nofile = true\n", "rules.fd-limit-low.min_nofile: must be a int like the default (16384), not True"),
    ("x = " + "[" * 5000 + "]" * 5000 + "\n", "c.toml:1: arrays or tables nested too deeply"),
])
def test_a_value_of_the_wrong_type_names_the_line_and_key(tmp_path, text, message):
    assert message in error_of(tmp_path, text)


def test_non_utf8_config(tmp_path):
    got = error_of(tmp_path, b"[scan]\nlevel = 'qu\xe9ck'\n")
    assert "c.toml:2: byte 0xe9 at column 12 is not UTF-8; save the file as UTF-8" in got


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_a_config_that_is_a_fifo_a_device_or_huge_is_refused(tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "c.toml"
        os.mkfifo(path)
    elif kind == "device":
        path = "/dev/zero"
    else:
        path = tmp_path / "c.toml"
        path.write_text("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(ConfigError, match="is not a regular file|the limit is 1,048,576 bytes"):
        load_config(find_config(str(path)))


def test_a_fifo_named_llm_doctor_toml_in_the_working_directory_is_refused_not_skipped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("llm-doctor.toml")
    with pytest.raises(ConfigError, match="llm-doctor.toml: the config file is not a regular file"):
        load_config(find_config(None))


def test_a_good_config_still_loads(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[scan]\nlevel = 'quick'\nmodel_dirs = ['/m']\nrule_files = []\n\n"
                    "[rules.\"fd-limit-low\"]\nmin_nofile = 100000.5\nseverity = 'critical'\n"
                    "enabled = false\n")
    config = load_config(path)
    check_against_rules(config, RULES)
    assert config.scan["model_dirs"] == ["/m"] and config.rules["fd-limit-low"]["enabled"] is False


@pytest.mark.slow
@pytest.mark.parametrize("text,message", [
    ("scan = 5\n", "c.toml:1: 'scan' must be a table"),
    ("[scan]\nrule_files = [5]\n", "c.toml:2: scan.rule_files must be an array of paths"),
    ("[scan]\nmodel_dirs = [['x']]\n", "c.toml:2: scan.model_dirs must be an array of paths"),
    ("[rules]\nx = 5\n", "c.toml:2: rules.x must be a table"),
])
def test_the_cli_exits_3_with_the_key(tmp_path, cli, text, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    result = cli("rules", "--config", str(path))
    assert result.returncode == 3, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
