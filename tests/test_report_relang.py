"""A saved scan says its text in the reader's language, not the scanner's (issue 29 §2).

A real scan of a recorded host is saved in one language and rendered in the other by
``llm-doctor report --lang``: findings' titles and remediations, probes' summaries and
skip reasons. The expected words come from elsewhere than the values the scan carries: a
rule's title from the rule's own Chinese template, a summary from the probe's ``summary``
called on the record while the process speaks Chinese, a skip reason from the probe run
again while it speaks Chinese. A scan saved before the values came renders as it was
saved with one line that says so; hostile values in a saved scan read as the text beside
them, never as a template filled with the process's objects.
"""

from __future__ import annotations

import copy
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from doctor.commands.setup import load_setup, open_host, scan_options
from doctor.i18n import Speaking, set_lang, t
from doctor.i18n.text import Unsafe, fill, from_json, render
from doctor.model import Skip
from doctor.scan import scan
from probes.registry import PROBES
from reports import json_report
from tests.conftest import FIXTURE_HOSTS, REPO

HOST = "h100-thermal-88c"  # a critical and a warning finding, GPU and engine probes
ENGINE_HOST = "healthy-epyc-9654-vllm"  # every probe's summary re-renders exactly
CJK = re.compile(r"[\u4e00-\u9fff]")
SPECS = {s.name: s for s in PROBES}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "doctor.commands.entry", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LANG": "C"})


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """The recorded host scanned by the command line, saved in English and in Chinese."""
    tmp = tmp_path_factory.mktemp("relang")
    out = {}
    for lang in ("en", "zh_CN"):
        path = tmp / f"{lang}.json"
        done = _cli("scan", "--replay", str(FIXTURE_HOSTS / HOST), "--no-requests",
                    "--format", "json", "-o", str(path), "--lang", lang)
        assert done.returncode in (0, 1, 2), done.stderr
        out[lang] = path
    return out


def _report(scan_file: Path, lang: str, tmp: Path) -> tuple[str, str]:
    page = tmp / f"{scan_file.stem}.{lang}.html"
    done = _cli("report", str(scan_file), "-o", str(page), "--lang", lang)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return html.unescape(page.read_text()), done.stderr


def _zh_skip(name: str) -> str:
    """The probe's skip reason on HOST, the probe run again while the process speaks Chinese."""
    rules, config = load_setup(None)
    host = open_host(str(FIXTURE_HOSTS / HOST))
    options = scan_options(config, None, host=host, no_requests=True)
    with Speaking("zh_CN"):
        try:
            SPECS[name].run(host, options)
        except Skip as exc:
            return str(exc)
    raise AssertionError(f"{name} ran")


def test_an_english_scan_reads_in_chinese(saved, tmp_path):
    data = json.loads(saved["en"].read_text())
    assert data["lang"] == "en" and data["findings"]
    page, _ = _report(saved["en"], "zh_CN", tmp_path)
    rules, _ = load_setup(None)
    by_id = {r.id: r for r in rules}
    for finding in data["findings"]:
        assert finding["title"] not in page
        zh_remedy = by_id[finding["rule"]].remediation_in("zh_CN")
        assert html.unescape(zh_remedy)[:40] in page
        assert CJK.search(finding["title_msg"]["texts"]["zh_CN"])
        assert finding["title_msg"]["texts"]["zh_CN"] in page
    # probes that need no other's data: run again alone, they skip as they did in the scan
    skipped = [p for p in data["probes"] if p["status"] == "skipped" and "reason_msg" in p
               and not SPECS[p["name"]].needs and not SPECS[p["name"]].after]
    assert len(skipped) >= 2
    for probe in skipped:
        said = _zh_skip(probe["name"])
        assert CJK.search(said) and said in page, probe["name"]
    # summaries as the probes say them in Chinese (the next test holds the values to that)
    summaries = [json_report.text_of(p, "summary", "en", "zh_CN") for p in data["probes"]
                 if p["status"] == "ok" and p.get("summary_msg")]
    assert sum(bool(CJK.search(s)) for s in summaries) >= 5
    assert all(html.unescape(s) in page for s in summaries if "<" not in s)


def test_a_chinese_scan_reads_in_english(saved, tmp_path):
    zh = json.loads(saved["zh_CN"].read_text())
    en = json.loads(saved["en"].read_text())
    assert zh["lang"] == "zh_CN"
    page, _ = _report(saved["zh_CN"], "en", tmp_path)
    for mine, theirs in zip(zh["findings"], en["findings"]):
        assert CJK.search(mine["title"]) and mine["title"] not in page
        assert theirs["title"] in page and theirs["remediation"] in page
    for theirs in en["probes"]:
        if theirs.get("summary") and theirs["status"] == "ok":
            assert theirs["summary"] in page, theirs["name"]
        if theirs["status"] == "skipped":
            assert theirs["reason"] in page, theirs["name"]


def test_every_summary_re_renders_as_the_probe_says_it_in_chinese():
    rules, config = load_setup(None)
    host = open_host(str(FIXTURE_HOSTS / ENGINE_HOST))
    report = scan(host, scan_options(config, None, host=host, no_requests=True), PROBES, rules,
                  config)
    data = json.loads(json.dumps(json_report.to_dict(report)))
    said = 0
    for result, probe in zip(report.probes, data["probes"]):
        if result.status != "ok" or SPECS[result.name].summary is None:
            continue
        with Speaking("zh_CN"):
            want = SPECS[result.name].summary(result.record)
        assert json_report.text_of(probe, "summary", "en", "zh_CN") == want, result.name
        said += bool(CJK.search(want))
    assert said >= 5


def test_a_scan_saved_before_the_values_renders_as_saved_with_one_line(saved, tmp_path):
    data = json.loads(saved["en"].read_text())
    data.pop("msg_version")
    for entry in data["probes"] + data["findings"]:
        for key in [k for k in entry if k.endswith("_msg")]:
            del entry[key]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    page, stderr = _report(old, "zh_CN", tmp_path)
    lines = [line for line in stderr.splitlines() if "old.json" in line and "en" in line]
    assert len(lines) == 1, stderr
    assert all(f["title"] in page for f in data["findings"])


def test_hostile_values_read_as_the_text_beside_them(saved, tmp_path):
    data = json.loads(saved["en"].read_text())
    good, bad = data["findings"][0], copy.deepcopy(data["findings"][0])
    hostile = [
        {"id": "{x.__class__.__mro__}", "params": {"x": 1}},  # not in the catalogue
        {"id": "{count}x {names}, driver {driver}, CUDA {cuda}", "params": {"count": 1}},
        {"id": "{count}x {names}, driver {driver}, CUDA {cuda}",
         "params": {"count": "x" * 100_000, "names": "a", "driver": "b", "cuda": "c"}},
        {"join": [], "sep": {"join": [], "sep": {"join": [], "sep": {"join": [], "sep": {
            "join": [], "sep": {"join": [], "sep": {"join": [], "sep": {"join": [], "sep": ""}}}}}}}},
        {"id": "ok", "params": {"__class__": {"id": "ok", "params": {}}, "x.y": 1}},
    ]
    findings = []
    for i, value in enumerate(hostile):
        finding = copy.deepcopy(bad)
        finding["title"] = f"hostile title {i}"
        finding["title_msg"] = value
        findings.append(finding)
    data["findings"] = [good, *findings]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(data))
    page, stderr = _report(path, "zh_CN", tmp_path)
    assert good["title_msg"]["texts"]["zh_CN"] in page  # the honest value is said in Chinese
    for i in range(len(hostile)):
        assert f"hostile title {i}" in page
    assert "<class" not in page and "mro" not in page


@pytest.mark.parametrize("template", ["{x.__class__}", "{x[0]}", "{x:{y}}", "{x!a}", "{0}",
                                      "{}", "{x:>99999}"])
def test_only_plain_fields_are_filled(template):
    with pytest.raises(Unsafe):
        fill(template, {"x": "ab", "y": 3})


def test_a_saved_value_needs_a_catalogue_id_and_whole_params():
    value = from_json({"id": "{count}x {names}, driver {driver}, CUDA {cuda}",
                       "params": {"count": 2, "names": "H100", "driver": "550", "cuda": "12.4"}})
    with Speaking("zh_CN"):
        assert render(value) == t("{count}x {names}, driver {driver}, CUDA {cuda}", count=2,
                                  names="H100", driver="550", cuda="12.4")
    assert render(value, "en") == "2x H100, driver 550, CUDA 12.4"
    with pytest.raises(Unsafe):
        from_json({"id": "{count}x {names}, driver {driver}, CUDA {cuda}",
                   "params": {"count": "2"}})
    with pytest.raises(Unsafe):  # a number's format given a string
        from_json({"id": "at most {requests:,} requests, {prompt:,} prompt + {output:,} output "
                         "tokens, ≤ {seconds:.3g} s",
                   "params": {"requests": "x", "prompt": 1, "output": 1, "seconds": 1}})
    assert from_json({"id": "not a message of this llm-doctor", "params": {}}) == \
        "not a message of this llm-doctor"


def test_the_language_a_block_speaks_is_its_threads_own():
    import threading

    seen = []
    with Speaking("zh_CN"):
        thread = threading.Thread(target=lambda: seen.append(t("ok")))
        thread.start()
        thread.join(10)
        mine = t("ok")
    set_lang("en")
    assert seen == ["ok"] and mine != "ok"


@pytest.mark.parametrize("value, where", [
    (["not", "a", "value"], "findings[0].title_msg"),
    ({"id": "ok", "params": {"n": {"texts": {"fr": "x"}}}}, "findings[0].title_msg.params.n.texts"),
    ({"join": "ab", "sep": ""}, "findings[0].title_msg.join"),
])
def test_a_value_of_no_known_shape_is_refused_with_its_path(saved, tmp_path, value, where):
    data = json.loads(saved["en"].read_text())
    data["findings"][0]["title_msg"] = value
    path = tmp_path / "shape.json"
    path.write_text(json.dumps(data))
    done = _cli("report", str(path), "-o", str(tmp_path / "out.html"))
    assert done.returncode == 3 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and f"shape.json: {where}" in done.stderr, done.stderr


def test_a_plans_header_names_the_finding_in_english_whatever_the_scan_spoke(saved):
    from doctor.fix.saved import Scan, header
    from reports.json_report import read

    zh = read(saved["zh_CN"], ValueError)
    en = json.loads(saved["en"].read_text())
    for mine, theirs in zip(zh.findings, en["findings"]):
        said = header(mine, Scan(zh, "2026-12-06"))
        assert theirs["title"] in said and not CJK.search(said)
