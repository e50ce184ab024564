"""Which language llm-doctor speaks: --lang, LLM_DOCTOR_LANG, the locale, then English."""

from __future__ import annotations

import pytest

from doctor.commands.lang import argv_lang
from doctor.i18n import LangError, Speaking, current, parse_lang, resolve


@pytest.mark.parametrize("word,lang", [("zh_CN", "zh_CN"), ("zh-CN", "zh_CN"), ("zh", "zh_CN"),
                                       ("zh_CN.UTF-8", "zh_CN"), ("ZH_cn", "zh_CN"),
                                       ("en", "en"), ("en_US.UTF-8", "en"), ("C", "en")])
def test_spellings_of_a_language(word, lang):
    assert parse_lang(word) == lang


def test_a_language_it_does_not_speak_is_refused_with_the_choices():
    with pytest.raises(LangError, match=r"--lang: 'fr_FR' is not a language .*en or zh_CN"):
        parse_lang("fr_FR")


def test_the_order_flag_then_variable_then_locale_then_english():
    env = {"LLM_DOCTOR_LANG": "en", "LC_ALL": "zh_CN.UTF-8"}
    assert resolve("zh_CN", env) == "zh_CN"
    assert resolve(None, env) == "en"
    assert resolve(None, {"LC_ALL": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}) == "zh_CN"
    assert resolve(None, {"LC_MESSAGES": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}) == "zh_CN"
    assert resolve(None, {"LANG": "zh_CN.UTF-8"}) == "zh_CN"
    assert resolve(None, {"LANG": "fr_FR.UTF-8"}) == "en"  # no catalogue: English, no error
    assert resolve(None, {"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}) == "en"  # LC_ALL decides
    assert resolve(None, {}) == "en"
    with pytest.raises(LangError, match="LLM_DOCTOR_LANG"):
        resolve(None, {"LLM_DOCTOR_LANG": "klingon"})


def test_the_flag_is_read_before_click_parses():
    assert argv_lang(["scan", "--lang", "zh_CN", "--help"]) == "zh_CN"
    assert argv_lang(["scan", "--help", "--lang=en"]) == "en"
    assert argv_lang(["scan", "--", "--lang", "zh_CN"]) is None
    assert argv_lang(["scan"]) is None


def test_speaking_restores_the_language_before():
    before = current()
    with Speaking("zh_CN"):
        assert current() == "zh_CN"
    assert current() == before
