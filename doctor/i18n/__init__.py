"""The language llm-doctor speaks: ``en`` (the source) or ``zh_CN``.

Every sentence a person reads goes through ``t``: the English text is the message id, looked
up in the language's catalogue *before* its named placeholders are filled in, so
``t("{gpus} GPUs, driver {driver}", gpus=n, driver=v)`` finds its entry whatever ``n`` and
``v`` are (an f-string inside ``t`` would never match; tests/test_i18n_catalogue.py refuses
one). A message missing from a catalogue reads in English.

What is never translated: cause, rule and symptom ids, JSON keys, metric names and labels,
numbers, units, flags, paths, commands and the engines' option names.

Catalogues are TOML (``doctor/i18n/<lang>/*.toml``, read with the standard library, no build
step): an array of ``[[msg]]`` tables, each with ``en`` (the id) and the language's text
under the language's name (``zh_CN``). The rules' texts live beside the rule files
(``checks/<lang>/``), playbooks beside the English ones (``playbooks/<cause>.<lang>.md``).

The language is chosen once per process: ``--lang`` on any command, else
``LLM_DOCTOR_LANG``, else the locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG``: the first that
is set), else English. The daemon's incident reports and alerts follow its config's
``lang``. docs/glossary.md fixes one Chinese term per concept.
"""

from __future__ import annotations

import os
import string
import threading
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from doctor._toml import tomllib

LANGS: tuple[str, ...] = ("en", "zh_CN")
SOURCE = "en"
FOLDER = Path(__file__).parent
LOCALE_VARS = ("LC_ALL", "LC_MESSAGES", "LANG")
ENV_VAR = "LLM_DOCTOR_LANG"

_current = SOURCE
_local = threading.local()  # Speaking's language, for its thread only


class LangError(ValueError):
    """A language this llm-doctor does not speak, named where it was asked for."""


def parse_lang(text: object, where: str = "--lang") -> str:
    """``zh_CN`` or ``en`` from what a user wrote (``zh-CN``, ``zh_cn``, ``zh``, ``en_US``);
    LangError names ``where`` and the choices."""
    word = str(text).strip()
    lang = _from_locale(word)
    if lang is None:
        raise LangError(t("{where}: {word!r} is not a language llm-doctor speaks; use {choices}",
                          where=where, word=word[:40], choices=" or ".join(LANGS)))
    return lang


def _from_locale(word: str) -> str | None:
    """The language of a locale name (``zh_CN.UTF-8``, ``en_US``, ``C``), None if unknown."""
    base = word.split(".", 1)[0].split("@", 1)[0].replace("-", "_").lower()
    if base in ("zh", "zh_cn", "zh_sg", "zh_hans", "zh_hans_cn"):
        return "zh_CN"
    if base in ("en", "c", "posix") or base.startswith("en_"):
        return "en"
    return None


def resolve(flag: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The language for this process: ``flag``, else LLM_DOCTOR_LANG, else the locale, else
    English. A flag or LLM_DOCTOR_LANG that names no language is an error (it was asked
    for); a locale llm-doctor has no catalogue for reads English."""
    env = os.environ if env is None else env
    if flag:
        return parse_lang(flag)
    if env.get(ENV_VAR):
        return parse_lang(env[ENV_VAR], ENV_VAR)
    for name in LOCALE_VARS:
        if env.get(name):
            return _from_locale(env[name]) or SOURCE
    return SOURCE


def set_lang(lang: str) -> None:
    """Speak ``lang`` from now on (one of LANGS)."""
    global _current
    if lang not in LANGS:
        raise LangError(f"{lang!r} is not one of {', '.join(LANGS)}")
    _current = lang
    if getattr(_local, "lang", None):  # inside a Speaking block: this thread too
        _local.lang = lang


def current() -> str:
    return getattr(_local, "lang", None) or _current


def speak_here(lang: str) -> None:
    """Speak ``lang`` in this thread from now on (the daemon's loop and its alert sender),
    leaving the process's language and every other thread's as they are."""
    if lang not in LANGS:
        raise LangError(f"{lang!r} is not one of {', '.join(LANGS)}")
    _local.lang = lang


class Speaking:
    """``with Speaking("zh_CN"):`` speaks a language for a block in this thread only (the
    daemon's reports and alerts, a test rendering one report in both), then the one before:
    other threads (the daemon's probes, its HTTP server) go on in theirs."""

    def __init__(self, lang: str) -> None:
        if lang not in LANGS:
            raise LangError(f"{lang!r} is not one of {', '.join(LANGS)}")
        self.lang = lang
        self.before: str | None = None

    def __enter__(self) -> "Speaking":
        self.before = getattr(_local, "lang", None)
        _local.lang = self.lang
        return self

    def __exit__(self, *exc: object) -> None:
        _local.lang = self.before


def names(template: str) -> frozenset[str]:
    """The named placeholders of a template (``{gpus}``, ``{ratio:.2f}`` → gpus, ratio)."""
    return frozenset(field for _, field, _, _ in string.Formatter().parse(template) if field)


@lru_cache(maxsize=None)
def catalogue(lang: str) -> dict[str, str]:
    """English text → the language's text, from every ``doctor/i18n/<lang>/*.toml``."""
    if lang == SOURCE:
        return {}
    out: dict[str, str] = {}
    for entry in entries(lang):
        out[entry["en"]] = entry[lang]
    return out


def entries(lang: str) -> list[dict[str, Any]]:
    """The catalogue's ``[[msg]]`` entries, each with ``file`` (its TOML file) added."""
    out: list[dict[str, Any]] = []
    for path in sorted((FOLDER / lang).glob("*.toml")):
        with path.open("rb") as handle:
            data = tomllib.load(handle)
        for entry in data.get("msg", []):
            out.append({**entry, "file": path.name})
    return out


def t(msgid: str, /, **params: Any) -> str:
    """``msgid`` in the current language, its ``{name}`` placeholders filled from ``params``.

    The lookup comes first: ``msgid`` must be the literal English template, never an
    f-string. Without params the text is returned as written (no braces are interpreted).
    """
    if _values.is_capturing():  # in a probe's thread: English that carries the message
        return _values.captured(msgid, params)
    lang = current()
    text = catalogue(lang).get(msgid, msgid) if lang != SOURCE else msgid
    if not params:
        return text
    return text.format_map(params)


def lazy(msgid: str) -> str:
    """Marks a literal for the catalogue where it is written (a table of labels, a probe's
    description in the registry) and returns it untranslated; ``translated`` gives it in the
    current language where it is shown."""
    return msgid


def translated(text: str) -> str:
    """``text`` (a literal marked with ``lazy`` where it was written) in the current
    language, as it is where the catalogue has no entry. Nothing is filled in."""
    if not isinstance(text, str):
        return text
    if _values.is_capturing():
        return _values.captured(text, {})
    lang = current()
    return text if lang == SOURCE else catalogue(lang).get(text, text)


from doctor.i18n import values as _values  # noqa: E402
