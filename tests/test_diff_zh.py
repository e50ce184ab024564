"""llm-doctor diff in Chinese: pairs of recorded hosts (tests/fixtures/build_diff_hosts.py)
compared and rendered in zh_CN in every format. Each output holds Chinese and no English
sentence outside code, ids and numbers; the JSON differs from the English one only in its
human-readable text fields; the HTML page says it is zh-CN and uses the system's CJK fonts."""

from __future__ import annotations

import copy
import functools
import html as html_lib
import io
import json
import re

import jsonschema
import pytest
from rich.console import Console

from doctor.diff.compare import compare
from doctor.diff.model import Diff
from doctor.i18n import Speaking
from reports import diff_html, diff_json, diff_markdown, diff_terminal
from reports.json_report import to_dict
from reports.markdown import mdtext
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.test_fixtures import replay

SCHEMA = json.loads((REPO / "docs" / "diff-schema.json").read_text())
CJK = re.compile(r"[\u4e00-\u9fff]")
# (before, after, different_hosts): a measured figure and a setting that moved; an engine
# flag added and its finding raised; sysctls changed with no finding; two different hosts
PAIRS = [("l40s-8x-acs-off", "diff-l40s-8x-gpu4-held", False),
         ("vllm-v1-calm", "diff-vllm-v1-enforce-eager", False),
         ("healthy-epyc-9654-vllm", "diff-epyc-9654-swappiness-thp", False),
         ("l40s-8x-acs-off", "diff-vllm-v1-enforce-eager", False),
         ("fix-epyc-9654-vllm-systemd", "diff-vllm-v1-enforce-eager", True)]
IDS = [f"{a}..{b}" for a, b, _ in PAIRS]
# what a diff says in words (docs/diff-schema.json): the rest is data, the same in both languages
TEXT_FIELDS = {"line", "not_comparable"}
FACT_TEXT = {"label", "note"}


@functools.cache
def _saved(name: str) -> str:
    with Speaking("en"):  # taken in English whichever language the test speaks
        return json.dumps(to_dict(replay(FIXTURE_HOSTS / name)))


def saved(name: str) -> dict:
    """The host's scan as a saved JSON scan, taken in English (a scan saved yesterday)."""
    return json.loads(_saved(name))


def english_runs(text: str, shortest: int = 3) -> list[str]:
    """Runs of ``shortest`` or more lowercase English words outside code spans and blocks.

    Code (```…``` and `…`) goes first; any non-ASCII character (Chinese, full-width
    punctuation, arrows, table borders) ends a run; a token with a digit, an upper-case
    letter or any of ``-_./=[]@:+~%`` inside it is an id, a path, a flag, a unit or a
    product name, and ends a run too."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", " ", text)
    runs: list[str] = []
    for segment in re.split(r"[^\x00-\x7f]+", text):
        run: list[str] = []
        for token in segment.split() + [""]:
            word = token.strip("()[],;:.!?\"'*|#")
            if re.fullmatch(r"[a-z]+(?:'[a-z]+)?", word):
                run.append(word)
                continue
            if len(run) >= shortest:
                runs.append(" ".join(run))
            run = []
    return runs


def _rules_texts(diff: Diff, escape=lambda s: s) -> list[str]:
    """The findings' titles: the saved scans' words (the rules' own zh texts, checks/zh_CN/,
    are another area's), left out of what this test reads."""
    return sorted({escape(d.title) for d in diff.findings if d.title}, key=len, reverse=True)


def _without(text: str, parts: list[str]) -> str:
    for part in parts:
        text = text.replace(part, " ")
    return text


def _zh(before: str, after: str, different: bool) -> Diff:
    with Speaking("zh_CN"):
        return compare(saved(before), saved(after), (before, after), different)


def _terminal(diff: Diff) -> str:
    console = Console(record=True, width=400, file=io.StringIO())  # wide: a title is one line
    diff_terminal.render(diff, console, verbose=True)
    return console.export_text()


def _page_text(page: str) -> str:
    """What a reader of the page sees: the body's text, the plots' titles included; the
    playbooks' sections (playbooks/<cause>.zh_CN.md, another area's) left out."""
    body = page[page.index("<body"):]
    body = re.sub(r'<div class="playbook".*?</details></div>', " ", body, flags=re.S)
    body = re.sub(r"<code>.*?</code>", " ", body, flags=re.S)
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", body))


@pytest.mark.slow
@pytest.mark.parametrize("before,after,different", PAIRS, ids=IDS)
def test_every_format_speaks_chinese(before, after, different):
    diff = _zh(before, after, different)
    with Speaking("zh_CN"):
        terminal = _terminal(diff)
        markdown = diff_markdown.render(diff, verbose=True)
        page = diff_html.render(diff, verbose=True)
        data = json.loads(diff_json.render(diff))
    jsonschema.validate(data, SCHEMA)
    titles = _rules_texts(diff)
    texts = {"terminal": _without(terminal, titles),
             "markdown": _without(markdown, _rules_texts(diff, mdtext)),
             "html": _without(_page_text(page), titles)}
    for name, text in texts.items():
        assert CJK.search(text), name
        assert english_runs(text) == [], (name, text)
    said = " ".join([data["line"], *data["identity"]["evidence"], *data["not_comparable"],
                     *(f["label"] + " " + f["note"] for f in data["facts"])])
    assert CJK.search(said) and english_runs(said) == []


def test_the_zh_page_says_its_language_and_uses_system_cjk_fonts():
    diff = _zh("l40s-8x-acs-off", "diff-l40s-8x-gpu4-held", False)
    with Speaking("zh_CN"):
        page = diff_html.render(diff)
    english = diff_html.render(compare(saved("l40s-8x-acs-off"), saved("diff-l40s-8x-gpu4-held")))
    assert '<html lang="zh-CN">' in page and '<html lang="en">' in english
    for text in (page, english):
        assert diff_html.FONT_STACK in text and '"Noto Sans CJK SC"' in text
        assert "@font-face" not in text and "url(" not in text  # no web font: the page stays offline
    assert "<h2>变化了什么（最能解释差异的排在前面）</h2>" in page and "What changed" not in page


def _data_of(data: dict) -> dict:
    """The JSON with its human-readable text fields left out."""
    out = copy.deepcopy(data)
    for key in TEXT_FIELDS:
        out.pop(key)
    out["identity"].pop("evidence")
    for fact in out["facts"]:
        for key in FACT_TEXT:
            fact.pop(key)
    for finding in out["findings"]:  # a finding's title reads in the diff's language too
        finding.pop("title")
    return out


@pytest.mark.parametrize("before,after,different", PAIRS, ids=IDS)
def test_the_json_differs_between_languages_only_in_its_text(before, after, different):
    english = diff_json.to_dict(compare(saved(before), saved(after), (before, after), different))
    with Speaking("zh_CN"):
        chinese = diff_json.to_dict(_zh(before, after, different))
    assert _data_of(chinese) == _data_of(english)
    def words(data: dict) -> list[str]:
        return [data["line"], *data["identity"]["evidence"], *(f["label"] for f in data["facts"])]
    assert any(zh != en and CJK.search(zh) for zh, en in zip(words(chinese), words(english)))
    assert chinese["verdict"] == english["verdict"]  # an enum of the schema: data
    for zh, en in zip(chinese["facts"], english["facts"]):
        assert zh["id"] == en["id"] and zh["status"] == en["status"]
        if en["note"][:1] in "+-":  # the argv form of a flag change is data
            assert zh["note"] == en["note"]


def test_english_reads_as_before():
    diff = compare(saved("vllm-v1-calm"), saved("diff-vllm-v1-enforce-eager"))
    text = diff_markdown.render(diff)
    assert text.startswith("# llm-doctor diff: regression likely")
    assert "| CHANGED (worse) |" in text or "| ADDED (worse) |" in text
    assert not CJK.search(text + _terminal(diff) + diff_html.render(diff))


@pytest.mark.slow
def test_the_command_line_speaks_chinese(cli):
    before, after = (str(FIXTURE_HOSTS / n) for n in ("l40s-8x-acs-off", "diff-l40s-8x-gpu4-held"))
    result = cli("diff", before, after, "--lang", "zh_CN")
    assert result.returncode == 2, result.stderr
    assert result.stdout.startswith("很可能退化 — ")
    missing = cli("diff", before, "/nonexistent/after", "--lang", "zh_CN")
    assert missing.returncode == 3 and "文件或目录不存在" in missing.stderr
    helped = cli("diff", "--help", "--lang", "zh_CN")
    assert helped.returncode == 0 and "对比本机两个状态之间的变化" in helped.stdout
    assert "比较两台不同的主机" in helped.stdout
