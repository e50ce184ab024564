"""'rules export --prometheus --fleet' writes rules that promtool checks, and its unit tests
(tests/promtool/fleet_rules_test.yml) pass: each recording rule has its value, each outlier
alert fires for the outlier only, never for healthy hosts, a group under three hosts, or
across GPU models and drivers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.daemon_helpers import need

RULES = "llm-doctor-fleet-rules.yml"


def _export(cli, folder: Path, *extra: str) -> Path:
    out = folder / RULES
    result = cli("rules", "export", "--prometheus", "--fleet", "-o", str(out), *extra)
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow
def test_fleet_rules_pass_promtool_check_rules(cli, tmp_path):
    promtool = need("promtool", "prometheus")
    out = _export(cli, tmp_path)
    check = subprocess.run([promtool, "check", "rules", str(out)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout


@pytest.mark.slow
def test_promtool_fleet_rule_tests_pass(cli, tmp_path):
    promtool = need("promtool", "prometheus")
    _export(cli, tmp_path)
    shutil.copy(REPO / "tests/promtool/fleet_rules_test.yml", tmp_path)
    run = subprocess.run([promtool, "test", "rules", "fleet_rules_test.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.slow
def test_every_recording_rule_and_outlier_alert_has_a_promtool_case(cli, tmp_path):
    text = _export(cli, tmp_path).read_text()
    cases = (REPO / "tests/promtool/fleet_rules_test.yml").read_text()
    records = [line.split(": ", 1)[1] for line in text.splitlines() if "- record: " in line]
    alerts = [line.split(": ", 1)[1] for line in text.splitlines() if "- alert: " in line]
    assert len(alerts) == 5 and all(r.startswith(("job:", "instance")) for r in records)
    assert [r for r in records if f"expr: {r}" not in cases] == []
    assert [a for a in alerts if f"alertname: {a}" not in cases] == []


@pytest.mark.slow
def test_the_threshold_the_for_and_the_job_are_flags(cli, tmp_path):
    text = _export(cli, tmp_path, "--outlier-ratio", "0.7", "--outlier-for", "0s",
                   "--job", "inference-hosts").read_text()
    block = text.split("alert: LlmDoctorFleetHbmBandwidthOutlier\n", 1)[1].split("- alert:", 1)[0]
    assert "< 0.7 and" in block and "for:" not in block and ">= 3" in block
    assert r'job=\"inference-hosts\"' in text and r'job=\"llm-doctor\"' not in text
    default = _export(cli, tmp_path).read_text()
    assert "< 0.8 and" in default and "for: 15m" in default


@pytest.mark.slow
def test_bad_fleet_flags_are_refused_with_a_named_error(cli):
    for flags, named in ((("--fleet", "--outlier-ratio", "1.5"), "--outlier-ratio"),
                         (("--fleet", "--outlier-ratio", "0"), "--outlier-ratio"),
                         (("--fleet", "--outlier-for", "soon"), "--outlier-for"),
                         (("--outlier-ratio", "0.7"), "--fleet"),
                         (("--fleet", "--rules", "checks/host.toml"), "--rules")):
        result = cli("rules", "export", "--prometheus", *flags)
        assert result.returncode == 3, (flags, result.stderr)
        assert named in result.stderr and "Traceback" not in result.stderr, result.stderr
