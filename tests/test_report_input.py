"""``llm-doctor report FILE`` takes a saved scan as someone else's input.

What ``scan --format json`` writes, ``report`` reads and renders, for every committed
recorded host. Anything else (not UTF-8, a FIFO, /dev/zero, a directory, too large, NaN,
1e999, a 5,000-digit integer, nesting 100,000 deep, a record 900 deep, any field of the
wrong type) is refused before the renderer sees it: exit 3 and one line naming the file
and the JSON path (``findings[0].evidence``), never a traceback or a hang. The hand check
(reports/json_report.py ``check``) agrees with docs/report-schema.json on every field the
schema types, which a mutation of every path of a real report tests.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from doctor.config import ConfigError
from doctor.model import Level, ProbeResult, ScanOptions, ScanReport
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.registry import PROBES
from reports.html import render_data
from reports.json_report import SAVED_DEPTH, check, load
from reports.json_report import render as render_json
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.builtin_rules import builtin_rules
from tests.daemon_helpers import finding

SCHEMA = json.loads((REPO / "docs" / "report-schema.json").read_text())
HOSTS = ("vllm-v1-kv-pressure", "h100-sxm-8x-nvswitch", "this-vm-epyc-2cpu")
SECRET = "sk-PLANTED-report-input-5e1"


def _scan(host: str, level: str = "standard") -> str:
    result = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "scan", "--replay",
                             str(FIXTURE_HOSTS / host), "--level", level, "--format", "json",
                             "--no-progress"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode in (0, 1, 2), result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def scans() -> dict[str, dict]:
    return {host: json.loads(_scan(host)) for host in HOSTS}


def _write(tmp_path: Path, doc) -> Path:
    path = tmp_path / "scan.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


# --------------------------------------------------------------------------- our own outputs


def _written(host: str) -> str:
    """What ``scan --replay HOST --level quick --format json`` writes, made in this process
    (a command line a host made this test a minute of interpreter starts)."""
    recorded = RecordedHost(FIXTURE_HOSTS / host)
    options = ScanOptions(level=Level.QUICK,
                          model_dirs=tuple(recorded.manifest["host"].get("model_dirs", [])))
    return render_json(scan(recorded, options, PROBES, builtin_rules()))


@pytest.mark.slow
@pytest.mark.parametrize("host", sorted(p.name for p in FIXTURE_HOSTS.iterdir() if p.is_dir()))
def test_every_committed_hosts_report_loads_and_renders(host, tmp_path):
    path = _write(tmp_path, _written(host))
    data = load(path, ConfigError)
    jsonschema.validate(data, SCHEMA)
    assert render_data(data).startswith("<!DOCTYPE html>")


def test_a_record_nested_deeper_than_the_writer_keeps_still_loads(tmp_path):
    deep: object = 1
    for _ in range(900):
        deep = {"x": deep}
    report = ScanReport(host={"kind": "live", "hostname": "h"}, level=Level.QUICK,
                        started_at="2026-01-01T00:00:00Z", duration_s=0.1,
                        probes=[ProbeResult("host.deep", "ok", 0.1, None, {"deep": deep})],
                        findings=[finding(nested=[[[[deep]]]])])
    path = _write(tmp_path, render_json(report))  # to_dict cuts it at its depth
    assert "nested deeper than" in render_data(load(path, ConfigError))


# --------------------------------------------------------------------------- hostile files


def _with(scan: dict, where: list, value) -> dict:
    doc = json.loads(json.dumps(scan))
    parent = doc
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    return doc


def _deep(n: int) -> object:
    value: object = 1
    for _ in range(n):
        value = {"x": value}
    return value


WRONG = [  # (what, where, value, the JSON path and words the message must hold)
    ("evidence a list", ["findings", 0, "evidence"], [1, 2], "findings[0].evidence: expected an object"),
    ("probe name 5", ["probes", 0, "name"], 5, "probes[0].name: expected a string"),
    ("probe name not dotted", ["probes", 0, "name"], "../x", "probes[0].name: expected a probe name"),
    ("duration_s text", ["duration_s"], "1", "duration_s: expected a number"),
    ("duration_s negative", ["probes", 1, "duration_s"], -1, "probes[1].duration_s: expected a number"),
    ("host a string", ["host"], "h", "host: expected an object"),
    ("findings an object", ["findings"], {}, "findings: expected an array"),
    ("symptom a number", ["findings", 0, "symptoms"], ["slowdown", 5], "findings[0].symptoms[1]: expected a string"),
    ("severity unknown", ["findings", 0, "severity"], "fatal", "findings[0].severity: expected one of"),
    ("status a number", ["probes", 2, "status"], 1, "probes[2].status: expected one of"),
    ("exit_code true", ["exit_code"], True, "exit_code: expected one of"),
    ("level unknown", ["level"], "fast", "level: expected one of"),
    ("data a list", ["probes", 0, "data"], ["x"], "probes[0].data: expected an object"),
    ("reason an object", ["probes", 0, "reason"], {"a": 1}, "probes[0].reason: expected a string or null"),
    ("rule_errors holds a list", ["rule_errors"], [["x"]], "rule_errors[0]: expected a string"),
    ("tool name", ["tool", "name"], "other", "tool.name: expected one of"),
    ("missing field", ["findings", 0], {"rule": "x"}, "findings[0]: the field 'cause' is missing"),
    ("record 900 deep", ["probes", 0, "data"], {"a": _deep(900)}, "probes[0].data.a.x"),
    ("replaced_values item", ["replaced_values"], [5], "replaced_values[0]: expected an object"),
    ("secret in a wrong value", ["probes", 0, "name"], f"--api-key {SECRET}", "probes[0].name"),
    ("secret in the path", ["probes", 0, "data"], {f"HF_TOKEN={SECRET}": _deep(80)}, "HF_TOKEN=***"),
]


@pytest.mark.slow
@pytest.mark.parametrize("what,where,value,said", WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_field_is_named_with_its_json_path(cli, tmp_path, scans, what, where, value, said):
    path = _write(tmp_path, _with(scans["vllm-v1-kv-pressure"], where, value))
    result = cli("report", str(path), "-o", str(tmp_path / "out.html"), timeout=60)
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith(f"llm-doctor: {path}: ") and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and SECRET not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.html").exists()


def _numbers(text: str, word: str) -> str:
    return text.replace('"duration_s": 0.', f'"duration_s": {word}, "_was": 0.', 1)


BAD_FILES = [  # (what, how to make it, words the message must hold)
    ("not UTF-8", lambda t, s: t.write_bytes(s.encode().replace(b'"verdict"', b'"verd\xffict"')),
     "is not UTF-8"),
    ("empty", lambda t, s: t.write_bytes(b""), "not valid JSON"),
    ("not JSON", lambda t, s: t.write_text(s[:-40]), "not valid JSON"),
    ("an array", lambda t, s: t.write_text("[1, 2]"), "not an llm-doctor JSON report"),
    ("another version", lambda t, s: t.write_text(s.replace('"schema_version": 1', '"schema_version": 2')),
     "not an llm-doctor JSON report"),
    ("nested 100,000 deep", lambda t, s: t.write_text("[" * 100_000 + "]" * 100_000), "nested deeper than"),
    ("5,000-digit integer", lambda t, s: t.write_text(_numbers(s, "9" * 5000)), "an integer of 5000 digits"),
    ("integer of 2^63", lambda t, s: t.write_text(_numbers(s, str(2**63))), "beyond a 64-bit integer"),
    ("integer of 20 digits", lambda t, s: t.write_text(_numbers(s, str(2**64))), "an integer of 20 digits"),
    ("NaN", lambda t, s: t.write_text(_numbers(s, "NaN")), "NaN (not JSON"),
    ("-Infinity", lambda t, s: t.write_text(_numbers(s, "-Infinity")), "-Infinity (not JSON"),
    ("1e999", lambda t, s: t.write_text(_numbers(s, "1e999")), "1e999 (beyond any float)"),
    ("a directory", lambda t, s: (t.unlink(missing_ok=True), t.mkdir()), "is a directory"),
    ("a FIFO", lambda t, s: (t.unlink(missing_ok=True), os.mkfifo(t)), "not a regular file"),
    ("a link to /dev/zero", lambda t, s: (t.unlink(missing_ok=True), t.symlink_to("/dev/zero")),
     "not a regular file"),
    ("a link to itself", lambda t, s: (t.unlink(missing_ok=True), t.symlink_to(t.name)), "cannot read"),
    ("too large", lambda t, s: os.truncate(t, 33 << 20), "the limit is"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what,make,said", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_hostile_file_is_refused_with_its_name(cli, tmp_path, scans, what, make, said):
    path = _write(tmp_path, json.dumps(scans["this-vm-epyc-2cpu"], indent=2))
    make(path, path.read_text() if path.is_file() else "")
    result = cli("report", str(path), "-o", str(tmp_path / "out.html"), timeout=30)
    assert result.returncode == 3, result.stderr
    assert str(path) in result.stderr and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_dev_zero_itself_is_refused(cli, tmp_path):
    result = cli("report", "/dev/zero", "-o", str(tmp_path / "out.html"), timeout=30)
    assert result.returncode == 3 and "/dev/zero" in result.stderr and "not a regular file" in result.stderr


def test_fields_the_schema_leaves_open_cannot_break_the_page(tmp_path, scans):
    """New top-level fields (the schema allows them), the names the page itself uses, GPU
    pairs of odd types, and records of any shape still render."""
    doc = json.loads(json.dumps(scans["h100-sxm-8x-nvswitch"]))
    doc.update({"counts": 5, "charts": "x", "alert": [1], "topology": None, "future_field": {"a": 1}})
    topology = next(p for p in doc["probes"] if p["name"] == "gpu.topology")
    topology["data"]["pairs"][0]["a"] = [1]  # unhashable where a GPU index goes
    topology["data"]["pairs"][1]["b"] = "GPU1"  # and a string beside integers
    doc["probes"][0]["data"] = {"a": [{"b": [None, True, 1.5, {"c": []}]}], "": "", "x y": {}}
    doc["findings"].append({"rule": "gpu-thermal-throttling", "cause": "gpu-thermal-throttling",
                            "symptoms": [], "severity": "info",
                            "title": "t", "evidence": {"a": {"b": [1, {"c": None}]}, "gpu": [0]},
                            "remediation": "", "playbook": "", "key": ""})
    html = render_data(check(doc, "x.json", ConfigError))
    assert html.startswith("<!DOCTYPE html>") and "future_field" not in html


# --------------------------------------------------------------------------- the schema, path by path


def _paths(doc, prefix=()):
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:3]):
            out += _paths(value, (*prefix, i))
    return out


VALUES = ["x", "", 5, -1, 0, 1.5, True, None, [], {}, ["x"], [5], {"a": 1}, "host.x", "ok", 1]


VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _agree(doc: dict, path: tuple, render: bool) -> None:
    try:
        check(doc, "scan.json", ConfigError)
        ours = None
    except ConfigError as exc:
        ours = str(exc)
    theirs = VALIDATOR.is_valid(doc)
    # one documented difference: a host without a kind is what to_dict writes for a report
    # built by hand, so the reader takes it
    kind_missing = "kind" not in doc.get("host", {}) if isinstance(doc.get("host"), dict) else False
    if kind_missing and ours is None:
        return
    # another: a finding's rule and cause must be known ids (the schema holds their grammar
    # only), since fix and the fleet act on them
    if path[-1:] in (("rule",), ("cause",)) and theirs and ours and (
            "unknown cause" in ours or "no rule" in ours):
        return
    assert (ours is None) == theirs, (path, ours)
    if ours is None and render:
        render_data(doc)  # what the check lets through, the page renders


@pytest.mark.slow
@pytest.mark.parametrize("host", HOSTS)
def test_the_check_agrees_with_the_schema_on_every_typed_field(host, scans):
    scan = scans[host]
    typed = [p for p in _paths(scan) if p and (len(p) <= 3 or p[0] in ("tool", "host")
                                               or (len(p) == 4 and p[2] == "symptoms"))]
    rng = random.Random(host)
    for path in typed:
        for value in VALUES:
            _agree(_with(scan, list(path), value), path, render=rng.random() < 0.05)
        if len(path) > 1:  # and the field removed
            doc = json.loads(json.dumps(scan))
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            del parent[path[-1]]
            _agree(doc, path, render=True)


@pytest.mark.slow
@pytest.mark.parametrize("host", HOSTS)
def test_any_value_inside_a_record_or_evidence_renders(host, scans):
    """The schema leaves records and evidence open: every value there reaches the page."""
    scan = scans[host]
    rng = random.Random(host)
    inside = [p for p in _paths(scan) if len(p) > 3 and p[2] in ("data", "evidence")]
    for path in rng.sample(inside, min(150, len(inside))):
        value = rng.choice([*VALUES, _deep(SAVED_DEPTH - len(path) - 1), [[1, 2], [3, 4]],
                            {"a": 1, "b": 2, "level": "x"}, f"--api-key {SECRET}"])
        doc = _with(scan, list(path), value)
        html = render_data(check(doc, "scan.json", ConfigError))
        assert SECRET not in html, path
