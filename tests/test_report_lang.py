"""The reports in both languages, on recorded hosts: the JSON report says its ``lang`` and
is otherwise the same apart from the text for people; the terminal report's tables line up
in Chinese at 80 and 120 columns (rich measures a CJK character as two cells); the HTML
page declares its language and a system CJK font stack, and asks for nothing outside it.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from rich.cells import cell_len
from rich.console import Console

from doctor.commands.setup import load_setup, open_host, scan_options
from doctor.i18n import Speaking
from doctor.model import ScanReport
from doctor.scan import scan
from probes.registry import PROBES
from reports import html, json_report, markdown, terminal
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.zh_text import without_text

SCHEMA = json.loads((REPO / "docs" / "report-schema.json").read_text())
# a GPU host with a critical finding, an engine host, a host whose probes mostly skip
HOSTS = ("h100-thermal-88c", "healthy-epyc-9654-vllm", "l40s-2socket-no-dev-char")
CJK_FONTS = ('font-family: system-ui, -apple-system, "Segoe UI", "PingFang SC", '
             '"Hiragino Sans GB", "Microsoft YaHei", "Noto Sans CJK SC", "Source Han Sans SC", '
             '"WenQuanYi Micro Hei", sans-serif')


def _scan(host: str, lang: str) -> ScanReport:
    with Speaking(lang):
        rules, config = load_setup(None)
        recorded = open_host(str(FIXTURE_HOSTS / host))
        return scan(recorded, scan_options(config, None, host=recorded, no_requests=True),
                    PROBES, rules, config)


@pytest.fixture(scope="module")
def scans() -> dict[tuple[str, str], ScanReport]:
    return {(host, lang): _scan(host, lang) for host in HOSTS for lang in ("en", "zh_CN")}


@pytest.mark.slow
@pytest.mark.parametrize("host", HOSTS)
def test_json_is_the_same_in_both_languages_but_its_text_and_lang(scans, host):
    with Speaking("en"):
        en = json.loads(json_report.render(scans[host, "en"]))
    with Speaking("zh_CN"):
        zh = json.loads(json_report.render(scans[host, "zh_CN"]))
    assert en["lang"] == "en" and zh["lang"] == "zh_CN"
    for data in (en, zh):
        jsonschema.validate(data, SCHEMA)
    assert without_text(zh) == without_text(en)
    assert en.keys() == zh.keys()


def test_a_saved_report_reads_with_and_without_lang(scans, tmp_path):
    with Speaking("zh_CN"):
        data = json_report.to_dict(scans[HOSTS[0], "zh_CN"])
    older = {k: v for k, v in data.items() if k != "lang"}
    for name, saved in (("with.json", data), ("without.json", older)):
        path = tmp_path / name
        path.write_text(json.dumps(saved))
        assert json_report.load(path, ValueError) == saved
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**data, "lang": "fr"}))
    with pytest.raises(ValueError, match=r"wrong.json: lang: expected one of \"en\", \"zh_CN\""):
        json_report.load(wrong, ValueError)


def _table_lines(text: str) -> list[list[str]]:
    """The probe table's lines: from its header (the line above the ━ rule) to the last
    line before the caption or the end; each table of the report a list."""
    lines = text.splitlines()
    tables = []
    for i, line in enumerate(lines):
        if set(line.strip()) <= set("━╇") and "╇" in line:
            body = [lines[i - 1], line]
            for row in lines[i + 1:]:
                if "│" not in row:
                    break
                body.append(row)
            tables.append(body)
    return tables


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("host", HOSTS)
def test_terminal_tables_line_up_in_chinese(scans, host, width):
    console = Console(width=width, record=True, force_terminal=False, color_system=None)
    with Speaking("zh_CN"):
        terminal.render(scans[host, "zh_CN"], console)
    text = console.export_text()
    assert re.search(r"[\u4e00-\u9fff]", text), "the report is not in Chinese"
    for line in text.splitlines():
        assert cell_len(line) <= width, line
    tables = _table_lines(text)
    assert tables, text
    for table in tables:
        # every line of the table (header, rule, rows) is as wide as its rule
        assert {cell_len(line) for line in table} == {cell_len(table[1])}, table
        columns = [i for i, c in enumerate(table[1]) if c == "╇"]
        for line in table[2:]:  # the column separators stand at the same display columns
            assert [cell_len(line[:i]) for i, c in enumerate(line) if c == "│"] == [
                cell_len(table[1][:i]) for i in columns], line


@pytest.mark.parametrize("host", HOSTS)
def test_html_declares_its_language_and_a_cjk_font_stack(scans, host):
    with Speaking("zh_CN"):
        zh = html.render(scans[host, "zh_CN"])
    with Speaking("en"):
        en = html.render(scans[host, "en"])
    assert '<html lang="zh-CN">' in zh and '<html lang="en">' in en
    for page in (zh, en):
        assert CJK_FONTS in page
        assert "@font-face" not in page and "url(" not in page
        assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page)
    assert "<h2>诊断发现</h2>" in zh and "<h2>Findings</h2>" in en


def test_symptom_rows_carry_their_words_in_chinese(scans):
    report = scans["h100-thermal-88c", "zh_CN"]
    symptom = report.findings[0].symptoms[0]
    console = Console(width=200, record=True, color_system=None)
    with Speaking("zh_CN"):
        from doctor.vocabulary import symptom_words

        words = symptom_words(symptom)
        terminal.render(report, console)
        page = html.render(report)
        md = markdown.render(report)
    assert re.search(r"[\u4e00-\u9fff]", words)
    assert f"{symptom} {words}" in console.export_text()
    assert f"`{symptom}` {words}" in md
    assert f"<code>{symptom}</code> {words}" in page


def test_english_reports_name_no_chinese(scans):
    console = Console(width=120, record=True, color_system=None)
    with Speaking("en"):
        report = scans[HOSTS[0], "en"]
        terminal.render(report, console)
        texts = [console.export_text(), markdown.render(report), html.render(report)]
    for text in texts:
        assert not re.search(r"[\u4e00-\u9fff]", text)
