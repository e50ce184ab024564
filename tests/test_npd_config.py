"""``llm-doctor npd --config``: the JSON node-problem-detector loads, checked as NPD checks it.

``npd_load`` is our own reading of kubernetes/node-problem-detector's
``pkg/custompluginmonitor/types/config.go`` (commit 6632ca6, 2026-08-22) and ``types.go``:
the JSON field names of ``CustomPluginConfig``, ``pluginGlobalConfig`` and ``CustomRule``
(Go's decoder would ignore a misspelt one silently, so here it is an error), the defaults of
``ApplyConfiguration`` (timeout 5s, invoke_interval 30s, max_output_length 80, concurrency 3),
its duration parsing (Go's ``time.ParseDuration``), and every check of ``Validate``: plugin
"custom", a positive invoke interval, a rule timeout not above the global one, a rule path
that exists, a permanent rule's condition among the default conditions.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from doctor.fleet import npd
from tests.test_npd import launcher

# the json tags of config.go's structs and pkg/types' Condition (type, reason, message)
TOP_FIELDS = {"plugin", "pluginConfig", "source", "conditions", "rules", "metricsReporting"}
GLOBAL_FIELDS = {"invoke_interval": str, "timeout": str, "max_output_length": int,
                 "concurrency": int, "enable_message_change_based_condition_update": bool,
                 "skip_initial_status": bool}
RULE_FIELDS = {"type": str, "condition": str, "reason": str, "path": str, "args": list,
               "timeout": str, "invoke_interval": str}
CONDITION_FIELDS = {"type": str, "reason": str, "message": str}
DEFAULTS = {"timeout": "5s", "invoke_interval": "30s", "max_output_length": 80,
            "concurrency": 3}
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
           "h": 3600.0}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class Invalid(ValueError):
    pass


def go_duration_s(text: str) -> float:
    """Seconds in a Go duration string ("3s", "1m30s", "0"), as time.ParseDuration reads it."""
    sign, body = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text.lstrip("+"))
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        match = _PART.match(body, pos)
        if not match:
            raise Invalid(f"time: invalid duration {text!r}")
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if not body:
        raise Invalid(f"time: invalid duration {text!r}")
    return sign * total


def _fields(what: str, obj: object, fields: dict | set) -> dict:
    if not isinstance(obj, dict):
        raise Invalid(f"{what} is not an object")
    unknown = set(obj) - set(fields)
    if unknown:
        raise Invalid(f"{what}: fields NPD does not read: {sorted(unknown)}")
    if isinstance(fields, dict):
        for key, kind in fields.items():
            if key in obj and (not isinstance(obj[key], kind) or
                               (kind is int and isinstance(obj[key], bool))):
                raise Invalid(f"{what}.{key}: {obj[key]!r} is not a {kind.__name__}")
    return obj


def npd_load(config: dict) -> dict:
    """config.go's ApplyConfiguration then Validate; the config with its defaults applied."""
    _fields("config", config, TOP_FIELDS)
    glob = {**DEFAULTS, **_fields("pluginConfig", config.get("pluginConfig", {}), GLOBAL_FIELDS)}
    timeout = go_duration_s(glob["timeout"])
    interval = go_duration_s(glob["invoke_interval"])
    conditions = [_fields("condition", c, CONDITION_FIELDS) for c in config.get("conditions", [])]
    rules = [_fields("rule", r, RULE_FIELDS) for r in config.get("rules", [])]
    if config.get("plugin") != "custom":
        raise Invalid(f"NPD does not support {config.get('plugin')!r} plugin")
    if interval <= 0:
        raise Invalid("global invoke interval must be greater than zero")
    for rule in rules:
        if "invoke_interval" in rule and go_duration_s(rule["invoke_interval"]) <= 0:
            raise Invalid(f"rule invoke interval must be greater than zero: {rule}")
        if "timeout" in rule and go_duration_s(rule["timeout"]) > timeout:
            raise Invalid(f"plugin timeout is greater than global timeout: {rule}")
        if not all(isinstance(a, str) for a in rule.get("args", [])):
            raise Invalid(f"rule args must be strings: {rule}")
    for rule in rules:
        if not os.path.exists(rule.get("path", "")):
            raise Invalid(f"rule path {rule.get('path')!r} does not exist")
    types = {c.get("type") for c in conditions}
    for rule in rules:
        if rule.get("type") == "permanent" and rule.get("condition") not in types:
            raise Invalid(f"permanent problem {rule.get('condition')} does not have preset "
                          "default condition")
    return {**config, "pluginConfig": glob}


def _write_config(tmp_path, *more: str) -> subprocess.CompletedProcess:
    binary = launcher(tmp_path)
    return subprocess.run([str(binary), "npd", "--config", "--binary", str(binary), *more],
                          capture_output=True, text=True, timeout=30, cwd=tmp_path)


def test_the_config_passes_npds_own_checks_and_holds_the_contract(tmp_path):
    out = _write_config(tmp_path, "--state-file", "/var/lib/llm-doctor/state.json")
    assert out.returncode == 0, out.stderr
    loaded = npd_load(json.loads(out.stdout))
    glob = loaded["pluginConfig"]
    assert go_duration_s(glob["timeout"]) < 5  # under NPD's default kill
    assert glob["max_output_length"] == 80 and glob["concurrency"] >= 3
    assert {c["type"] for c in loaded["conditions"]} == {
        "LlmDoctorGPUProblem", "LlmDoctorEngineProblem", "LlmDoctorHostProblem",
        "LlmDoctorNetworkProblem"}
    assert all(c["reason"] and c["message"] for c in loaded["conditions"])
    rules = loaded["rules"]
    assert [r["type"] for r in rules] == ["permanent"] * 4
    families = [r["args"][r["args"].index("--family") + 1] for r in rules]
    assert families == ["gpu", "engine", "host", "net"]
    assert all(re.fullmatch(r"[A-Z][A-Za-z]+", r["reason"]) for r in rules)  # static, CamelCase
    assert all(go_duration_s(r["timeout"]) < 5 for r in rules)
    assert all(r["args"][0] == "npd" and "/var/lib/llm-doctor/state.json" in r["args"]
               for r in rules)


@pytest.mark.parametrize("change, error", [
    (lambda c: c.update(plugin="filelog"), "does not support"),
    (lambda c: c["pluginConfig"].update(invoke_interval="0s"), "greater than zero"),
    (lambda c: c["pluginConfig"].update(timeout="5 seconds"), "invalid duration"),
    (lambda c: c["rules"][0].update(timeout="6s"), "greater than global timeout"),
    (lambda c: c["rules"][0].update(path="/nonexistent/llm-doctor"), "does not exist"),
    (lambda c: c["conditions"].pop(0), "does not have preset default condition"),
    (lambda c: c["pluginConfig"].update(maxOutputLength=80), "fields NPD does not read"),
    (lambda c: c["pluginConfig"].update(max_output_length="80"), "is not a int"),
])
def test_the_checker_refuses_what_npd_refuses(tmp_path, change, error):
    """Our reading of Validate is no rubber stamp: each of its refusals, planted."""
    config = json.loads(_write_config(tmp_path).stdout)
    change(config)
    with pytest.raises(Invalid, match=error):
        npd_load(config)


def test_go_durations_read_as_go_reads_them():
    assert go_duration_s("3s") == 3 and go_duration_s("1m30s") == 90
    assert go_duration_s("500ms") == 0.5 and go_duration_s("0") == 0
    for bad in ("", "3", "s", "3 s", "3sec"):
        with pytest.raises(Invalid):
            go_duration_s(bad)


def test_min_severity_and_binary_reach_the_rules(tmp_path):
    out = _write_config(tmp_path, "--min-severity", "warning")
    config = npd_load(json.loads(out.stdout))
    assert all(r["args"][-2:] == ["--min-severity", "warning"] for r in config["rules"])
    assert all(r["path"] == str(tmp_path / "llm-doctor") for r in config["rules"])


def test_o_writes_the_file_and_an_unwritable_one_is_unknown(tmp_path):
    target = tmp_path / "monitor.json"
    out = _write_config(tmp_path, "-o", str(target))
    assert out.returncode == 0 and out.stdout == ""
    assert json.loads(target.read_text())["source"] == npd.SOURCE
    (tmp_path / "a-dir").mkdir()
    bad = _write_config(tmp_path, "-o", str(tmp_path / "a-dir"))
    assert bad.returncode == 2 and bad.stdout.startswith("unknown "), bad
    assert bad.stderr == f"llm-doctor npd: {tmp_path / 'a-dir'}: cannot write the config: is a directory; name a file inside it\n"

