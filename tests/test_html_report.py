"""The HTML report: self-contained, escaped, secrets redacted; opened in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from doctor.model import Level, ProbeResult, ScanReport, Severity
from probes.host.cpu_load import CpuLoadRecord, ProcessCpu
from reports.html import render
from reports.json_report import render as render_json
from tests.daemon_helpers import finding

SCRIPT = '<script>window.__xss = 1</script><img src="x" onerror="window.__xss = 2">'
SECRET = "sk-SECRET-4f9a1c"


def _report(n_findings: int) -> ScanReport:
    hog = ProcessCpu(4242, "stress", f"stress --cpu 1 --api-key {SECRET}", 0.98, None, False, False)
    record = CpuLoadRecord(0.5, 2, 1.1, (hog,))
    findings = [finding(key=f"stress pid {4000 + i}", cpu_cores=0.98,
                        severity=Severity.CRITICAL if i % 3 == 0 else Severity.WARNING)
                for i in range(n_findings)]
    if n_findings:
        findings[0] = finding(key="stress pid 4242", cpu_cores=0.98, note=SCRIPT,
                              cmdline=f"vllm serve /models/x --api-key {SECRET}")
    return ScanReport(host={"hostname": "gpu-host-1", "kernel": "6.1"}, level=Level.QUICK,
                      started_at="2026-01-01T00:00:00Z", duration_s=0.8,
                      probes=[ProbeResult("host.cpu_load", "ok", 0.52, None, record),
                              ProbeResult("host.memory", "error", 0.01, f"token={SECRET} failed")],
                      findings=findings)


def test_no_external_reference_and_no_script():
    html = render(_report(20))
    assert "<script" not in html  # the evidence's tag is shown escaped, never as markup
    assert "&lt;script&gt;" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "url(" not in html
    assert "default-src 'none'" in html


def test_secrets_are_redacted_everywhere():
    html = render(_report(20))
    assert SECRET not in html
    assert "--api-key ***" in html


def test_playbook_steps_and_probe_table_are_in_the_report():
    html = render(_report(1))
    assert "What it means" in html and "taskset" in html  # playbooks/cpu-contention.md
    assert "host.cpu_load" in html and "status-error" in html


@pytest.mark.slow
def test_report_command_renders_a_saved_json_scan(cli, tmp_path):
    snapshot = tmp_path / "scan.json"
    snapshot.write_text(render_json(_report(3)))
    out = tmp_path / "report.html"
    result = cli("report", str(snapshot), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "gpu-host-1" in out.read_text() and SECRET not in out.read_text()


def test_report_command_names_a_file_that_is_not_a_scan(cli, tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"hello": 1}))
    result = cli("report", str(bad), "-o", str(tmp_path / "x.html"))
    assert result.returncode == 3 and "other.json" in result.stderr and "schema_version" in result.stderr


@pytest.mark.machine  # scans this machine (tests/tiers.py)
@pytest.mark.slow
def test_scan_format_html(cli, tmp_path):
    out = tmp_path / "scan.html"
    result = cli("scan", "--level", "quick", "--format", "html", "-o", str(out), "--no-progress")
    assert result.returncode in (0, 1, 2), result.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")


def _incident() -> str:
    from doctor.daemon.alerts import AlertTracker
    from doctor.daemon.history import History
    from reports.html import render_incident

    history = History(3600)
    for i in range(60):
        history.add(1000.0 + 60 * i, [
            ("llm_doctor_host_top_process_cpu_cores", (("pid", "4242"), ("comm", "stress")), 0.9),
            ("llm_doctor_host_cpu_busy_cores", (), 1.0 + i / 100),
            ("llm_doctor_host_memory_available_bytes", (), 5.0e9),
            ("llm_doctor_host_memory_bandwidth_triad_bytes_per_second", (), 4.0e10 + i % 3 * 1e9),
            ("llm_doctor_host_memory_bandwidth_ceiling_bytes_per_second", (), 2.048e11)])
    report = _report(1)
    alert = AlertTracker({}).observe(report.findings, {"cpu-contention"}, 4600.0).fired[0]
    return render_incident(report, history, alert)


def test_incident_report_plots_the_last_hour_of_the_findings_metrics():
    html = _incident()
    # the finding's cpu_cores and busy_cores, and bandwidth against its ceiling
    assert html.count('class="chart"') == 3  # the scan's own plots are class="plot"
    assert "pid=4242, comm=stress" in html and "available_bytes" not in html
    assert 'class="ceiling"' in html
    assert "Alert firing" in html


def _chromium() -> str:
    path = shutil.which("chromium")
    if not path:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium not installed (apt-get install chromium)")
        pytest.skip("chromium not installed (apt-get install chromium)")
    return path


@pytest.mark.browser
@pytest.mark.timeout(180)
@pytest.mark.parametrize("n_findings", [0, 20, "incident"])
def test_opens_in_headless_chromium_without_errors_or_requests(tmp_path, n_findings):
    sync_api = pytest.importorskip("playwright.sync_api") if os.environ.get("CI") != "true" \
        else __import__("playwright.sync_api", fromlist=["sync_playwright"])
    page_file = tmp_path / "report.html"
    page_file.write_text(_incident() if n_findings == "incident" else render(_report(n_findings)))
    n_findings = 1 if n_findings == "incident" else n_findings
    url = page_file.as_uri()
    requests, console_errors = [], []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"],
                                     timeout=60_000)
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: console_errors.append(str(e)))
            page.goto(url, timeout=30_000)
            page.wait_for_load_state("networkidle", timeout=30_000)
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            assert page.locator(".finding").count() == n_findings
            assert page.evaluate("window.__xss") is None
            text = page.inner_text("body")
            assert SECRET not in text
            if n_findings:
                assert "<script>window.__xss = 1</script>" in text  # shown as text
        finally:
            browser.close()
    assert [r for r in requests if r != url] == []
    assert console_errors == []
