"""Every built-in rule reads in Chinese (checks/zh_CN/), and a broken translation file is refused.

A zh remediation keeps every command of the English one: each backticked span of the English
text appears in the zh text byte for byte. A translation file that names a rule its English
file lacks, holds a key other than title and remediation, or whose title uses a field the
rule does not define is a RuleError naming the file, the line and the rule.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from doctor.rules.loader import RuleError, builtin_files, load_file, load_rules
from probes.registry import by_name

LANG = "zh_CN"
CODE = re.compile(r"`[^`]+`")
RULES = load_rules(builtin_files(), by_name())

# Fields a probe fills with English words (its record's text, not a rule's expression): the
# zh title words the same fact from other fields.
PROBE_WORDED = {
    "frontend-cpu-bound": {"role"},  # probes/engine/frontend.py ROLES: the zh title names {engine}
    "gpu-fallen-off-the-bus": {"seen_in"},  # probes/gpu/errors.py: marks seen_on_pci, seen_in_kernel_log
}


def test_every_rule_file_has_a_chinese_file_beside_it():
    missing = [p.name for p in builtin_files() if not (p.parent / LANG / p.name).is_file()]
    assert missing == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_rule_has_a_chinese_title_and_remediation(rule):
    texts = rule.texts.get(LANG)
    assert texts is not None, f"{rule.source}: {rule.id} has no {LANG} entry"
    assert texts.title.strip() and texts.remediation.strip()
    assert texts.title != rule.title
    assert texts.remediation != rule.remediation
    # Chinese, not English left in place
    assert re.search(r"[\u4e00-\u9fff]", texts.title), texts.title
    assert re.search(r"[\u4e00-\u9fff]", texts.remediation), texts.remediation


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_chinese_remediation_keeps_every_command(rule):
    zh = rule.texts[LANG].remediation
    lost = [span for span in CODE.findall(rule.remediation) if span not in zh]
    assert lost == [], f"{rule.id}: the zh remediation lacks {lost}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_chinese_title_uses_the_english_fields(rule):
    """A zh title may word a field the English title builds in English (a mark or a number
    beside it), but it drops none of the fields the English title shows, unless that field
    is English words an evidence expression built: the zh title then shows its parts."""
    zh = set(rule.texts[LANG].template.names)
    en = set(rule.template.names)
    english_built = {name for name in en - zh if "'" in rule.evidence.get(name, "")}
    assert en - zh - english_built - PROBE_WORDED.get(rule.id, set()) == set(), f"{rule.id}: the zh title drops {en - zh}"


# A copy of a one-rule file with its translation beside it, broken in one way each.
SOURCE = Path(builtin_files()[0]).parent / "gpu_collective.toml"
GOOD = """
[gpu-allreduce-bandwidth-low]
title = "GPU {gpus}：all-reduce 带宽只有 {busbw_gbps} GB/s"
remediation = "检查 `nvidia-smi topo -p2p rn`。"
"""


def _copy(tmp_path: Path, translation: str) -> Path:
    path = tmp_path / SOURCE.name
    shutil.copy(SOURCE, path)
    (tmp_path / LANG).mkdir()
    (tmp_path / LANG / SOURCE.name).write_text(translation, encoding="utf-8")
    return path


def test_a_good_translation_file_loads(tmp_path):
    [rule] = load_file(_copy(tmp_path, GOOD), by_name())
    assert rule.texts[LANG].remediation == "检查 `nvidia-smi topo -p2p rn`。"
    assert rule.title_in(LANG).names == ("gpus", "busbw_gbps")
    assert rule.title_in("en") == rule.template


@pytest.mark.parametrize(("broken", "line", "said"), [
    (GOOD.replace("[gpu-allreduce-bandwidth-low]", "[gpu-allreduce-bandwith-low]"), 2,
     "no rule of that id"),
    (GOOD + 'severity = "critical"\n', 5, "unknown key 'severity'"),
    (GOOD.replace("{busbw_gbps}", "{bus_gbps}"), 3, "{bus_gbps}"),
    (GOOD.replace('remediation = "检查 `nvidia-smi topo -p2p rn`。"', 'remediation = " "'), 4,
     "'remediation' must be a non-empty string"),
])
def test_a_broken_translation_file_is_refused_naming_file_line_and_rule(tmp_path, broken, line, said):
    path = _copy(tmp_path, broken)
    with pytest.raises(RuleError) as caught:
        load_file(path, by_name())
    message = str(caught.value)
    assert f"{tmp_path / LANG / SOURCE.name}:{line}:" in message
    assert "rule 'gpu-allreduce-bandwi" in message
    assert said in message
