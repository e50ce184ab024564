"""'rules export --prometheus --lang zh_CN': the alerts' annotations in Chinese, every label,
expression and alert name as in English, and the file still passes promtool."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.daemon_helpers import need


def _export(cli, tmp_path, lang: str) -> str:
    out = tmp_path / f"rules.{lang}.yml"
    result = cli("rules", "export", "--prometheus", "-o", str(out), "--lang", lang)
    assert result.returncode == 0, result.stderr
    return out.read_text(encoding="utf-8")


def _machine_lines(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if not re.match(r"\s*(summary|description):", line)]


@pytest.mark.slow
def test_the_rules_speak_chinese_and_promtool_passes_them(cli, tmp_path):
    promtool = need("promtool", "prometheus")
    zh, en = _export(cli, tmp_path, "zh_CN"), _export(cli, tmp_path, "en")
    assert _machine_lines(zh) == _machine_lines(en)
    descriptions = [line for line in zh.splitlines() if line.strip().startswith("description:")]
    assert descriptions and all(re.search(r"[\u4e00-\u9fff]", line) for line in descriptions)
    assert "\\u" not in zh  # readable, not escaped
    check = subprocess.run([promtool, "check", "rules", str(tmp_path / "rules.zh_CN.yml")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "SUCCESS" in check.stdout, check.stdout + check.stderr
