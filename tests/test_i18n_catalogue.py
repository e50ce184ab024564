"""The Chinese catalogue is complete, and keeps up with the product.

Every message the code asks for (``t("…")``, ``lazy("…")``, found by reading the code:
tests/i18n_scan.py), every help text of the command line, every rule's title and
remediation, every symptom row and every playbook has a zh_CN text; an entry that is
missing or empty fails, and so does one whose placeholders differ from the English. An id
that is not a literal string (an f-string in ``t``) fails too: it would never be found.
"""

from __future__ import annotations

import re

import pytest

from doctor.i18n import Speaking, catalogue, entries, names, t
from doctor.rules.loader import builtin_files, load_rules
from doctor.vocabulary import CAUSES, SYMPTOM_WORDS, SYMPTOMS, symptom_words
from playbooks import PLAYBOOKS, TRANSLATED, path_of
from probes.registry import by_name
from tests import i18n_scan
from tests.zh_text import english_runs

LANG = "zh_CN"
CJK = re.compile(r"[\u4e00-\u9fff]")
FENCE = re.compile(r"^```", re.M)
HEADING = re.compile(r"^#+ ", re.M)
CODE_SPAN = re.compile(r"`[^`\n]+`")
PLACEHOLDER = re.compile(r"\{[^{}]*\}")


@pytest.mark.slow
def test_every_message_the_code_asks_for_has_a_chinese_entry():
    assert i18n_scan.problems() == []


@pytest.mark.slow
def test_the_scanner_sees_the_code_and_refuses_an_id_that_is_not_literal(tmp_path):
    uses = i18n_scan.uses()
    assert len(uses) > 100
    source = tmp_path / "m.py"
    source.write_text("from doctor.i18n import t\nn = 1\nt(f'{n} GPUs')\nt('x' + 'y')\n"
                      "t('{gpus} GPUs', gpus=n)\n")
    found = i18n_scan.uses_in(source)
    assert [u.msgid for u in found] == [None, None, "{gpus} GPUs"]


def test_every_help_text_of_the_command_line_has_a_chinese_entry():
    texts = i18n_scan.help_texts()
    assert len(texts) > 100
    assert i18n_scan.help_problems() == []


def test_no_two_files_translate_one_message_differently():
    assert i18n_scan.duplicates() == []


def test_every_entry_is_well_formed():
    bad = []
    for entry in entries(LANG):
        en, zh = entry.get("en"), entry.get(LANG)
        if not isinstance(en, str) or not isinstance(zh, str) or not zh.strip():
            bad.append(f"{entry['file']}: {en!r}: missing or empty")
        elif names(en) != names(zh):
            bad.append(f"{entry['file']}: {en!r}: placeholders {sorted(names(zh))}")
        elif not CJK.search(zh) and english_runs(PLACEHOLDER.sub(" | ", zh), min_run=2):
            # an entry of punctuation and placeholders ("{name}：{status}") has no Chinese;
            # one with words left in it is English
            bad.append(f"{entry['file']}: {en!r}: no Chinese in {zh!r}")
    assert bad == []


def test_every_built_in_rule_has_a_chinese_title_and_remediation():
    rules = load_rules(builtin_files(), by_name())
    missing = [r.id for r in rules if LANG not in r.texts]
    assert missing == []
    for rule in rules:
        texts = rule.texts[LANG]
        assert CJK.search(texts.title) and CJK.search(texts.remediation), rule.id
        # the commands, flags and paths of the remediation are the English ones, unchanged
        assert set(CODE_SPAN.findall(rule.remediation)) <= set(CODE_SPAN.findall(texts.remediation)), rule.id


def test_every_symptom_row_has_the_seed_articles_words():
    assert set(SYMPTOM_WORDS) == set(SYMPTOMS)
    with Speaking(LANG):
        words = {s: symptom_words(s) for s in SYMPTOMS}
    assert words["startup-oom"] == "启动时OOM"
    assert words["multi-gpu-imbalance"] == "多卡负载不均衡"
    assert all(CJK.search(w) for w in words.values())


@pytest.mark.parametrize("cause", CAUSES)
def test_every_playbook_has_a_chinese_one_of_the_same_shape(cause):
    english = PLAYBOOKS[cause].read_text(encoding="utf-8")
    zh_path = TRANSLATED[(cause, LANG)]
    assert zh_path.is_file(), f"no {zh_path.name}"
    zh = zh_path.read_text(encoding="utf-8")
    assert len(CJK.findall(zh)) > 100
    assert len(HEADING.findall(zh)) == len(HEADING.findall(english))
    assert len(FENCE.findall(zh)) == len(FENCE.findall(english))
    with Speaking(LANG):
        assert path_of(cause) == zh_path
    assert path_of(cause, "en") == PLAYBOOKS[cause]


def test_a_message_is_looked_up_before_it_is_filled_in():
    msgid = next(e["en"] for e in entries(LANG) if names(e["en"]))
    params = {name: 7 for name in names(msgid)}
    with Speaking(LANG):
        zh = t(msgid, **params)
    assert zh == catalogue(LANG)[msgid].format_map(params) and zh != msgid.format_map(params)
    with Speaking(LANG):
        assert t("a sentence no catalogue has: {n}", n=3) == "a sentence no catalogue has: 3"
