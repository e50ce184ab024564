"""The HTML report of a recorded H100 at level quick, as a person reads it: a header in
words (no ``machine_id_reason: not-found: …``), one line for what was not measured instead
of an empty box per plot, and an incident report that leads with the finding that opened
the incident."""

from __future__ import annotations

import functools
import re
from dataclasses import replace

from doctor.daemon.alerts import Alert
from doctor.model import Severity
from reports.html import render, render_data, render_incident
from reports.json_report import to_dict
from tests.conftest import FIXTURE_HOSTS
from tests.daemon_helpers import finding
from tests.test_fixtures import replay

H100 = FIXTURE_HOSTS / "h100-thermal-88c"


@functools.cache
def _h100():
    return replay(H100, "quick")


def _header(html: str) -> str:
    return re.findall(r'<p class="meta">(.*?)</p>', html, re.S)[1]


def test_the_header_says_the_host_in_words_and_leaves_out_what_is_simply_absent():
    html = render(_h100())
    header = _header(html)
    assert "_reason" not in header and "not-found" not in header, header
    assert "captured_at" not in header and "kind:" not in header
    assert "recorded host:" in header and "captured: <span" in header and "2026-11-28T09:14:02Z" in header
    assert "h100-pcie-rack4-11" in header


def test_an_identifier_that_could_not_be_read_is_said_as_such():
    data = to_dict(_h100())
    data["host"]["product_uuid_reason"] = ("no-permission: /sys/class/dmi/id/product_uuid "
                                           "(root only)")
    data["host"]["machine_id"] = "0123456789abcdef0123456789abcdef"
    del data["host"]["machine_id_reason"]
    header = _header(render_data(data))
    assert "DMI product UUID: " in header and "not read (no permission): /sys/class/dmi/id/product_uuid" \
        in header, header
    assert "machine id: " in header and "0123456789abcdef0123456789abcdef" in header
    assert "no-permission" not in header


def test_what_was_not_measured_is_one_line_not_an_empty_box_each():
    html = render(_h100())
    assert 'class="plot empty"' not in html  # there were five: STREAM, D2D, PCIe, knee, KV, queue
    (line,) = re.findall(r'<p class="unmeasured">(.*?)</p>', html, re.S)
    for title in ("Host memory bandwidth (STREAM)", "GPU memory bandwidth (device to device)",
                  "Throughput knee", "KV cache use per engine"):  # engine.load skipped: nothing recorded
        assert title in line, line
    assert line.count("gpu.bandwidth did not run") == 1  # two plots, one reason: said once
    assert "GPU temperature against its slowdown and shutdown limits" in html  # drawn: kept
    sections = re.findall(r'<h3 class="section">(.*?)</h3>', html)
    assert sections == ["GPU temperature, clocks and power"], sections  # no empty heading


def test_an_incident_report_leads_with_the_finding_that_opened_it():
    report = _h100()
    hot = next(f for f in report.findings if f.severity == Severity.CRITICAL)
    fd = finding(rule="fd-limit-low", key="engine llama.cpp@127.0.0.1:8080")
    report = replace(report, findings=[hot, fd])
    alert = Alert("fd-limit-low", fd.identity, fd, since=0.0, state="firing")
    html = render_incident(report, None, alert)
    rules = re.findall(r'rule <code>([^<]+)</code>', html)
    assert rules[:2] == ["fd-limit-low", hot.rule], rules
    # the alert's finding held by the hysteresis (not found this evaluation) still leads
    held = render_incident(replace(report, findings=[hot]), None, alert)
    assert re.findall(r'rule <code>([^<]+)</code>', held)[:2] == ["fd-limit-low", hot.rule]
    # a scan's report keeps the rules' order
    assert re.findall(r'rule <code>([^<]+)</code>', render(report))[:2] == [hot.rule, "fd-limit-low"]
