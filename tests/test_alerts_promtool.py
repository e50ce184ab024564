"""'rules export --prometheus' writes rules that promtool checks and its unit tests pass."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.daemon_helpers import need


def _export(cli, folder: Path, *extra: str) -> Path:
    out = folder / "llm-doctor-rules.yml"
    result = cli("rules", "export", "--prometheus", "-o", str(out), *extra)
    assert result.returncode == 0, result.stderr
    return out


def test_exported_rules_pass_promtool_check_rules(cli, tmp_path):
    promtool = need("promtool", "prometheus")
    out = _export(cli, tmp_path)
    text = out.read_text()
    assert "alert: LlmDoctorCpuContention" in text and "for: 5m" in text
    check = subprocess.run([promtool, "check", "rules", str(out)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout


@pytest.mark.slow
def test_promtool_rule_tests_pass(cli, tmp_path):
    promtool = need("promtool", "prometheus")
    _export(cli, tmp_path)
    shutil.copy(REPO / "tests/promtool/llm_doctor_rules_test.yml", tmp_path)
    run = subprocess.run([promtool, "test", "rules", "llm_doctor_rules_test.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.slow
def test_for_override_from_the_daemon_table(cli, tmp_path):
    config = tmp_path / "llm-doctor.toml"
    config.write_text('[daemon.for]\ncpu-contention = "45s"\n')
    text = _export(cli, tmp_path, "--config", str(config)).read_text()
    block = text.split("alert: LlmDoctorCpuContention", 1)[1].split("- alert:", 1)[0]
    assert "for: 45s" in block


def test_export_needs_a_format(cli):
    result = cli("rules", "export")
    assert result.returncode == 3 and "--prometheus" in result.stderr


@pytest.mark.slow
def test_disabled_rules_are_left_out_and_severity_overrides_kept(cli, tmp_path):
    config = tmp_path / "llm-doctor.toml"
    config.write_text('[rules.cpu-contention]\nenabled = false\n'
                      '[rules.fd-limit-low]\nseverity = "critical"\n')
    text = _export(cli, tmp_path, "--config", str(config)).read_text()
    assert "alert: LlmDoctorCpuContention\n" not in text
    block = text.split("alert: LlmDoctorFdLimitLow", 1)[1].split("- alert:", 1)[0]
    assert 'severity: "critical"' in block


def test_one_alert_per_severity_a_rule_can_find(cli, tmp_path):
    """A rule with critical_when has a warning and a critical alert; an info rule without
    one has none (info findings are for dashboards); the severity label is the alert's own."""
    text = _export(cli, tmp_path).read_text()
    blocks = [b for b in text.split("- alert: ")[1:] if b.startswith("LlmDoctorCpuContention\n")]
    assert ['severity: "warning"' in b for b in blocks] == [True, False]
    assert 'severity: "critical"' in blocks[1] and 'severity=~\\"critical\\"' in blocks[1]
    assert "alert: LlmDoctorNetworkSocketBuffersDefault\n" not in text


@pytest.mark.slow
def test_staleness_fires_from_up_and_absent_not_from_series_that_vanish(cli, tmp_path):
    text = _export(cli, tmp_path).read_text()
    stale = text.split("alert: LlmDoctorStale\n", 1)[1].split("- alert:", 1)[0]
    assert 'up{job=\\"llm-doctor\\"} == 0' in stale and "for: 5m" in stale
    assert 'absent(up{job=\\"llm-doctor\\"})' in text.split("alert: LlmDoctorAbsent\n", 1)[1]


@pytest.mark.slow
def test_export_watches_the_scrape_job_it_is_given(cli, tmp_path):
    text = _export(cli, tmp_path, "--job", "inference-hosts").read_text()
    assert r'up{job=\"inference-hosts\"}' in text and r'job=\"llm-doctor\"' not in text
    refused = cli("rules", "export", "--prometheus", "--job", 'x"} or vector(1) #')
    assert refused.returncode != 0 and "job name" in refused.stderr and "Traceback" not in refused.stderr
