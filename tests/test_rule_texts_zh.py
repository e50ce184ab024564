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

from doctor.rules.loader import RuleError, builtin_files, load_file
from probes.registry import by_name
from tests.builtin_rules import builtin_rules

LANG = "zh_CN"
CODE = re.compile(r"`[^`]+`")
RULES = builtin_rules()

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


# What a zh title may show in Latin script: code, ids, paths, URLs, numbers, units, product
# names, and the engines' own error messages in double quotes (what an operator greps the
# log for). What is left must hold no three lowercase Latin words in a row.
QUOTED = re.compile(r'"[^"]*"|`[^`]*`|(?:https?:/)?(?<![\w.])/[^\s"`，。：；（）、]*')
PRODUCTS = {"vllm", "sglang", "tgi", "llama.cpp", "ollama", "nvidia", "nvml", "cuda", "nccl",
            "pcie", "nvlink", "numa", "mig", "mps", "python", "python3", "torch", "docker"}
TOKEN = re.compile(r"[^\s,;:()（）：，；、]+")


def english_run(text: str) -> list[str]:
    """The first run of three plain lowercase Latin words in ``text`` (ids, numbers and
    product names break a run)."""
    run: list[str] = []
    for token in TOKEN.findall(QUOTED.sub(" ", text)):
        if re.fullmatch(r"[a-z]+", token) and token not in PRODUCTS:
            run.append(token)
            if len(run) == 3:
                return run
        else:
            run = []
    return []


# Fields a probe fills with English words for people; they need the probe's own translation.
PROBE_TEXT = {"engine-unreachable": "answer",  # probes/engine/discovery.py Reachability.answer
              # probes/kernels/xnode.py's lines (a child's JSON, quoted as it said them)
              "collective-interface-unusable": "failure",
              "collective-mtu-mismatch": "mismatch",
              "collective-rank-starved": "starved"}


def _firing_cases():
    from tests.test_rule_cases import all_cases
    return [p for p in all_cases() if p.values[1]["expect"]]


@pytest.mark.parametrize("rule_id,case", _firing_cases())
def test_firing_case_reads_in_chinese(rule_id, case):
    """The zh title of every firing table case shows no absent field, no "None", no
    unfilled brace, and no English phrase of its own (three Latin words in a row)."""
    from doctor import display
    from doctor.i18n import Speaking
    from doctor.rules.evaluate import evaluate
    from tests.test_rule_cases import results_for

    rule = next(r for r in RULES if r.id == rule_id)
    with Speaking(LANG):
        findings, errors = evaluate([rule], results_for(case["records"]))
    assert errors == []
    for finding in findings:
        title = finding.title
        assert "{" not in title and display.ABSENT not in title and "None" not in title, title
        assert not re.search(r"[：，；]\s*[；，）]|[：，；]$", title), f"{rule_id}: empty part: {title}"
        if rule_id in PROBE_TEXT:
            title = title.replace(str(finding.evidence[PROBE_TEXT[rule_id]]), "")
        assert english_run(title) == [], f"{rule_id}: English in the zh title: {title}"


def test_a_translation_that_is_a_fifo_or_a_broken_link_is_refused_by_name(tmp_path):
    import os

    from doctor.rules.loader import RuleError, load_file
    from probes.registry import by_name

    rules = tmp_path / "my.toml"
    rules.write_text((Path(__file__).parent.parent / "checks" / "host.toml").read_text())
    (tmp_path / "zh_CN").mkdir()
    target = tmp_path / "zh_CN" / "my.toml"
    os.mkfifo(target)
    with pytest.raises(RuleError, match=r"zh_CN/my.toml: the rule translation file is not a regular file"):
        load_file(rules, by_name())
    target.unlink()
    target.symlink_to(tmp_path / "gone.toml")
    with pytest.raises(RuleError, match=r"zh_CN/my.toml: the rule translation file is a symbolic link"):
        load_file(rules, by_name())


def _rules_with_translation_elsewhere(tmp_path: Path) -> tuple[Path, Path]:
    """A rule file in rules/, and a valid Chinese translation of it in outside/ (which the
    rule file's owner should not be able to have llm-doctor read)."""
    folder, outside = tmp_path / "rules", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    rules = folder / "my.toml"
    rules.write_text((Path(__file__).parent.parent / "checks" / "host.toml").read_text())
    (outside / "my.toml").write_text(
        (Path(__file__).parent.parent / "checks" / "zh_CN" / "host.toml").read_text())
    return rules, outside / "my.toml"


def test_a_translation_that_links_out_of_its_folder_is_refused_by_name(tmp_path):
    from doctor.rules.loader import RuleError, load_file
    from probes.registry import by_name

    rules, elsewhere = _rules_with_translation_elsewhere(tmp_path)
    (rules.parent / "zh_CN").mkdir()
    (rules.parent / "zh_CN" / "my.toml").symlink_to(elsewhere)
    with pytest.raises(RuleError, match=r"rules/zh_CN/my.toml: the rule translation file is a "
                                        r"symbolic link; a translation is a regular file in "):
        load_file(rules, by_name())


def test_a_translation_folder_that_is_a_link_out_is_refused_by_name(tmp_path):
    from doctor.rules.loader import RuleError, load_file
    from probes.registry import by_name

    rules, elsewhere = _rules_with_translation_elsewhere(tmp_path)
    (rules.parent / "zh_CN").symlink_to(elsewhere.parent, target_is_directory=True)
    with pytest.raises(RuleError, match=r"rules/zh_CN/my.toml: the rule translation file is "
                                        r".*outside/my.toml, outside .*rules; "):
        load_file(rules, by_name())


def test_a_translation_of_a_rule_folder_reached_through_a_link_still_loads(tmp_path):
    """The folder itself found through a link (a checkout under a linked home) is its own
    folder: only a way out of it is refused."""
    from doctor.rules.loader import load_file
    from probes.registry import by_name

    rules, elsewhere = _rules_with_translation_elsewhere(tmp_path)
    (rules.parent / "zh_CN").mkdir()
    elsewhere.rename(rules.parent / "zh_CN" / "my.toml")
    (tmp_path / "linked").symlink_to(rules.parent, target_is_directory=True)
    loaded = load_file(tmp_path / "linked" / "my.toml", by_name())
    assert loaded and all("zh_CN" in rule.texts for rule in loaded)
