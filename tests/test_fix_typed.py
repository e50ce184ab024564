"""``fix --from`` reads a saved scan through the one reader (reports/json_report.py ``read``)
and plans from its typed accessors: a finding that lacks what a plan reads is refused by the
reader, as one line with the file and the JSON path, before any plan is built."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from doctor.commands.fix import _scan
from doctor.fix.plan import build_plan
from doctor.fix.script import to_json
from reports.json_report import read
from tests.conftest import FIXTURE_HOSTS

NOW = datetime(2026, 12, 1, 19, 41, 0, tzinfo=timezone.utc)
HOST = "fix-epyc-9654-vllm-systemd"


@pytest.fixture(scope="module")
def scan_file(tmp_path_factory):
    report, rule_probes = _scan(str(FIXTURE_HOSTS / HOST), None, None, None)
    path = tmp_path_factory.mktemp("typed") / "scan.json"
    path.write_text(json.dumps(report))
    return path, rule_probes


def test_a_plan_is_built_from_the_typed_saved_scan(scan_file, cli, tmp_path):
    path, rule_probes = scan_file
    plan = build_plan(read(path, ValueError), "saved scan", rule_probes, NOW)
    assert [s.id for s in plan.steps] == [
        "01-fd-limit-low", "02-gpu-memory-no-headroom", "03-cuda-graphs-disabled",
        "04-network-backlog-small", "05-swap-swappiness-high"]
    out = tmp_path / "plan.json"
    done = cli("fix", "--from", str(path), "--format", "json", "-o", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads(out.read_text())
    mine = json.loads(to_json(plan))["steps"]  # the same plan, its files dated another day
    assert [(s["id"], s["finding"], s["kind"], s["title"], s["flags"]) for s in written["steps"]] == [
        (s["id"], s["finding"], s["kind"], s["title"], s["flags"]) for s in mine]


@pytest.mark.parametrize("field", ["rule", "cause", "evidence", "symptoms", "severity"])
def test_a_finding_without_a_field_the_plan_reads_is_refused_by_the_reader(scan_file, cli, tmp_path,
                                                                            field):
    path, _ = scan_file
    data = json.loads(path.read_text())
    del data["findings"][0][field]
    bad = tmp_path / "partial.json"
    bad.write_text(json.dumps(data))
    out = tmp_path / "plan.sh"
    done = cli("fix", "--from", str(bad), "-o", str(out))
    assert done.returncode == 3 and not out.exists()
    assert "Traceback" not in done.stderr and "KeyError" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"partial.json: findings[0]: the field '{field}' is missing" in done.stderr, done.stderr


def test_a_finding_of_the_wrong_type_is_refused_with_its_path(scan_file, cli, tmp_path):
    path, _ = scan_file
    data = json.loads(path.read_text())
    data["findings"][1]["evidence"] = ["not", "an", "object"]
    bad = tmp_path / "typed.json"
    bad.write_text(json.dumps(data))
    done = cli("fix", "--from", str(bad), "--format", "markdown")
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert "typed.json: findings[1].evidence: expected an object" in done.stderr, done.stderr
