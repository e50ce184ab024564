"""llm-doctor fix in Chinese: the plans of recorded hosts with planted faults in zh_CN, as a
shell script, a change ticket and JSON. Titles, checks, rollback notes, warnings and headings
read in Chinese; commands, files, sysctl keys and unit names are the English plan's, byte for
byte; the JSON differs from the English one only in its human-readable text."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from datetime import datetime, timezone

import jsonschema
import pytest

from doctor.commands.fix import _scan
from doctor.fix.model import Plan
from doctor.fix.plan import build_plan, to_dict
from doctor.fix.script import EOF_MARK, PRELUDE, _q, prelude_words, to_markdown, to_sh
from doctor.i18n import Speaking
from tests.saved_scans import saved
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.test_diff_zh import CJK, english_runs

NOW = datetime(2026, 12, 1, 19, 41, 0, tzinfo=timezone.utc)
SCHEMA = json.loads((REPO / "docs" / "fix-plan-schema.json").read_text())
# systemd drop-ins, engine flags and sysctls; BIOS and hands-on checklists; a finding with no
# step (another process holds GPU memory); a healthy host (no step at all)
HOSTS = ["fix-epyc-9654-vllm-systemd", "diff-l40s-8x-acs-on", "diff-l40s-8x-gpu0-x8",
         "diff-l40s-8x-gpu4-held", "diff-vllm-v1-enforce-eager", "l40s-8x-acs-off"]
STEP_TEXT = ("title", "check", "verify", "revert", "manual")  # a step's words (the schema's strings)
PLAN_DIR = "/var/lib/llm-doctor/plans/ID"


def _plans(host: str) -> tuple[Plan, Plan]:
    """(English, Chinese) plans of one scan of ``host``."""
    report, rule_probes = _scan(str(FIXTURE_HOSTS / host), None, None, None)
    english = build_plan(saved(report), f"replay {host}", rule_probes, NOW)
    with Speaking("zh_CN"):
        chinese = build_plan(saved(report), f"replay {host}", rule_probes, NOW)
    return english, chinese


def _sh_words(script: str) -> str:
    """What the script says to a person: its comments and ``say`` messages, without the
    shell functions of the prelude (code, checked alone below), the files' contents
    (here-documents) and the commands it runs."""
    script = script.replace(PRELUDE % {"plan_dir": _q(PLAN_DIR), **prelude_words()}, "\n")
    script = re.sub(rf"<<'{EOF_MARK}'\n.*?\n{EOF_MARK}\n", "\n", script, flags=re.S)
    kept = [line for line in script.splitlines()[2:]  # the shebang and the linter's directive
            if line.startswith(("# ", "say ", "if "))]
    return "\n".join(kept)


@pytest.mark.slow
@pytest.mark.parametrize("host", HOSTS)
def test_every_format_speaks_chinese(host):
    _, plan = _plans(host)
    with Speaking("zh_CN"):
        said_by_script = _sh_words(to_sh(plan, PLAN_DIR))
        ticket = to_markdown(plan)
    jsonschema.validate(to_dict(plan), SCHEMA)
    for name, text in (("sh", said_by_script), ("markdown", ticket)):
        assert CJK.search(text), name
        assert english_runs(text) == [], (name, text)
    said = [s.title for s in plan.steps] + [n.why for n in plan.no_steps]
    said += [t for s in plan.steps for t in (s.verify, s.revert, *s.manual)]
    assert all(CJK.search(t) for t in said)
    assert said or "没有步骤" in ticket


def _data_of(plan: Plan) -> dict:
    """The plan's JSON with its human-readable text fields left out."""
    out = copy.deepcopy(to_dict(plan))
    for step in out["steps"]:
        for key in STEP_TEXT:
            step.pop(key)
        for command in step["commands"]:
            command.pop("why")
        if step["flags"]:
            step["flags"].pop("where")
    for no_step in out["no_steps"]:
        no_step.pop("why")
    return out


@pytest.mark.parametrize("host", HOSTS)
def test_the_json_differs_between_languages_only_in_its_text(host):
    english, chinese = _plans(host)
    assert _data_of(chinese) == _data_of(english)
    for en, zh in zip(english.steps, chinese.steps):
        assert zh.files == en.files and zh.live == en.live  # paths, contents, keys and values
        assert [c.argv for c in zh.commands] == [c.argv for c in en.commands]
        assert zh.title != en.title
    assert [n.why for n in chinese.no_steps] != [n.why for n in english.no_steps] or not english.no_steps


def test_the_commands_and_files_of_the_script_are_the_english_ones():
    english, chinese = _plans("fix-epyc-9654-vllm-systemd")
    en_sh = to_sh(english, PLAN_DIR)
    with Speaking("zh_CN"):
        zh_sh = to_sh(chinese, PLAN_DIR)

    def code(script: str) -> list[str]:
        return [line for line in script.splitlines()
                if not line.strip().startswith(("# ", "say ", "if "))]
    assert code(zh_sh) == code(en_sh)
    assert "修复计划" in zh_sh and "请先通读" in zh_sh


@pytest.mark.slow
def test_the_command_line_speaks_chinese(cli):
    host = str(FIXTURE_HOSTS / "fix-epyc-9654-vllm-systemd")
    result = cli("fix", "--replay", host, "--format", "markdown", "--lang", "zh_CN")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# 变更：llm-doctor 修复计划 ")
    assert "LimitNOFILE=1048576" in result.stdout and "| 步骤 | 诊断发现 | 类型 | 风险 |" in result.stdout
    refused = cli("fix", "--replay", host, "--from", "x.json", "--lang", "zh_CN")
    assert refused.returncode != 0 and "只能指定其一" in refused.stderr
    helped = cli("fix", "--help", "--lang", "zh_CN")
    assert helped.returncode == 0 and "生成修复计划" in helped.stdout and "立即执行修改" in helped.stdout


def test_the_prelude_prints_chinese_and_stays_valid_shell():
    with Speaking("zh_CN"):
        words = prelude_words()
        script = to_sh(_plans("fix-epyc-9654-vllm-systemd")[1], PLAN_DIR)
    assert all(CJK.search(text) for text in words.values())
    assert english_runs(" ".join(words.values())) == []
    assert f'say "  {words["run"]}"' in script and "已就位：$1" in script
    checked = subprocess.run(["sh", "-n"], input=script, text=True, capture_output=True, check=False)
    assert checked.returncode == 0, checked.stderr
    english = prelude_words()
    assert english["run"] == "run: $*" and english["in_place_value"] == "in place: $2 = $3"
