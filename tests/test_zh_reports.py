"""Every committed recorded host, scanned in Chinese, renders in every format, and its
terminal, Markdown and HTML reports hold no English sentence outside code, ids and numbers
(tests/zh_text.py says what is stripped)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from doctor.commands.setup import FORMATS, render
from doctor.i18n import Speaking
from doctor.model import Level, ScanOptions
from doctor.rules.loader import builtin_files, load_rules
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.registry import PROBES, by_name
from tests.tiers import sampled
from tests.conftest import FIXTURE_HOSTS
from tests.zh_text import english_runs, has_cjk, visible_text, without_text

HOSTS = sorted(p for p in FIXTURE_HOSTS.iterdir() if (p / "host.toml").is_file())
PROSE = ("terminal", "markdown", "html")


def _replay(path: Path, lang: str):
    with Speaking(lang):
        rules = load_rules(builtin_files(), by_name())
        host = RecordedHost(path)
        meta = host.manifest["host"]
        options = ScanOptions(level=Level.parse(meta.get("level", "full")),
                              model_dirs=tuple(meta.get("model_dirs", [])))
        report = scan(host, options, PROBES, rules)
        return report, {fmt: render(report, fmt, verbose=True) for fmt in FORMATS}


def _prose(fmt: str, text: str) -> str:
    """The report's own words: without the findings' evidence, which is data (label=value,
    the JSON's evidence, the same in every language: values a record keeps in English)."""
    if fmt == "html":
        return visible_text(text)  # evidence values are marked lang="en" there
    if fmt == "terminal":
        return re.sub(r"证据：.*?(?=处置：)", "", text, flags=re.S)
    return re.sub(r"^\| 证据 \| 值 \|\n(?:\|.*\n)*", "", text, flags=re.M)


def test_the_checker_finds_english_and_passes_what_is_never_translated():
    assert english_runs("打开文件数上限 open files limit 低于 16384") == ["open files limit"]
    assert english_runs("`ulimit -n 1048576` fd-limit-low host.limits 1,024 GiB 显存 "
                        "gpu_memory_utilization --max-num-seqs NVIDIA GeForce RTX 4090") == []


@pytest.mark.parametrize("path", sampled(HOSTS))  # a quarter in the floor, all in the suite
def test_a_recorded_host_reads_in_chinese_in_every_format(path):
    report, outputs = _replay(path, "zh_CN")
    assert set(outputs) == set(FORMATS)
    assert json.loads(outputs["json"])["lang"] == "zh_CN"
    problems = []
    for fmt in PROSE:
        text = _prose(fmt, outputs[fmt])
        assert has_cjk(text), fmt
        problems += [f"{fmt}: {run!r}" for run in english_runs(text)]
    assert problems == []


@pytest.mark.slow
@pytest.mark.parametrize("path", HOSTS[::6], ids=[p.name for p in HOSTS[::6]])
def test_json_in_english_and_chinese_differs_only_in_text_and_lang(path):
    _, en = _replay(path, "en")
    _, zh = _replay(path, "zh_CN")
    a, b = json.loads(en["json"]), json.loads(zh["json"])
    assert (a["lang"], b["lang"]) == ("en", "zh_CN")
    assert without_text(a) == without_text(b)
    assert a != b  # the texts differ
