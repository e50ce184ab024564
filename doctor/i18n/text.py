"""Message values: text that a record carries as data and a renderer says in a language.

A probe's summary, a skip's reason or a finding's title is made where the scan runs, but it
is read later, somewhere else, maybe in another language (``llm-doctor report --lang zh_CN
scan.json``, ``npd --lang`` reading the daemon's state). So a record holds a value, not
text in one language:

* ``Msg(msgid, params)``: a catalogue message and its named parameters, each a number,
  a string (data: the same in every language) or another value;
* ``Join(sep, parts)``: values and strings one after another (``t("; ").join(parts)``);
* ``Localized(texts)``: the same text made in each language at once (a rule's title,
  filled from its own template in each language: the rule's texts live with the rule);
* a plain ``str``: data, the same in every language.

``render(value, lang)`` says one in a language (the current one by default); only
``reports/``, the commands and the daemon's outputs call it.

Probes are written with ``t()``; the runner runs each probe under ``capturing()``, where
``t()`` returns a ``Captured``: a ``str`` holding the English text (so a probe's own logic
and its record are the same in every language) that also carries the value, and whose
``join`` and ``+`` keep it. Text a probe builds otherwise (an f-string around a ``t()``)
is plain English data.

A saved scan carries each value as JSON (``to_json``) beside its English text, and is
someone else's input when it comes back: ``from_json`` takes only message ids the catalogue
holds, bounded parameters, bounded nesting, and fills a template only with ``{name}``,
``{name!r}`` and ``{name:spec}`` fields (``{x.__class__}`` or ``{x[0]}`` would read the
process's objects): anything else is refused, and the reader shows the English text given.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

from doctor import i18n
from doctor.i18n.values import (Captured, Join, Localized, Msg, Param, Text, as_param,  # noqa: F401
                                as_text, capturing, is_capturing, localized, m)

MAX_DEPTH = 6  # a summary joins parts that fill messages that fill messages: 3 deep today
MAX_PARAMS = 32
MAX_PARTS = 256  # one summary line per engine, GPU or mount
MAX_CHARS = 4096  # one string in a saved value (a title is cut at 400)
MAX_NODES = 2048  # the values in one saved field, all together
# [[fill]align][sign][z][#][0][width][grouping][.precision][type]: no nested field, a width
# of at most 3 digits (a saved value cannot ask for a gigabyte of padding)
SPEC = re.compile(r"(?:[^{}]?[<>=^])?[+\- ]?z?#?0?(?:\d{1,3})?[,_]?(?:\.\d{1,2})?"
                  r"[bcdeEfFgGnosxX%]?")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Unsafe(ValueError):
    """A saved value this reader will not render (the English text given is shown)."""


# ------------------------------------------------------------------------------ rendering

def render(value: object, lang: str | None = None) -> str:
    """``value`` in ``lang`` (default: the current language); a string as it is."""
    lang = i18n.current() if lang is None else lang
    if value is None:
        return ""
    if isinstance(value, Captured):
        value = value.value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Msg):
        return _msg(value, lang)
    if isinstance(value, Join):
        return render(value.sep, lang).join(render(p, lang) for p in value.parts)
    if isinstance(value, Localized):
        texts = dict(value.texts)
        return texts.get(lang) or texts.get(i18n.SOURCE) or next(iter(texts.values()), "")
    return str(value)


def _template(msgid: str, lang: str) -> str:
    """The catalogue's text of ``msgid`` in ``lang`` (the id itself in English or unknown)."""
    return i18n.catalogue(lang).get(msgid, msgid) if lang != i18n.SOURCE else msgid


def _filled(msg: Msg, lang: str, say: Callable[[Text, str], str]) -> str:
    """``msg``'s template in ``lang`` filled with its parameters, each message value among
    them said in ``lang`` by ``say``; raises what ``fill`` raises."""
    template = _template(msg.msgid, lang)
    if not msg.params:
        return template
    return fill(template, {k: (say(v, lang) if isinstance(v, (Msg, Join, Localized)) else v)
                           for k, v in msg.params})


def _msg(msg: Msg, lang: str) -> str:
    try:
        return _filled(msg, lang, render)
    except (Unsafe, ValueError, TypeError, KeyError, IndexError, OverflowError):
        if lang == i18n.SOURCE:  # the template itself cannot be filled: show it as written
            return msg.msgid
        return _msg(msg, i18n.SOURCE)


def fill(template: str, params: Mapping[str, Any]) -> str:
    """``template`` with its fields filled from ``params``, as ``str.format_map`` fills
    them but only for ``{name}``, ``{name!r}``, ``{name!s}`` and ``{name:spec}`` (SPEC);
    Unsafe for any other field."""
    out: list[str] = []
    for literal, field, spec, conversion in string.Formatter().parse(template):
        out.append(literal)
        if field is None:
            continue
        if not NAME.fullmatch(field) or field not in params:
            raise Unsafe(f"field {field!r}")
        if conversion not in (None, "r", "s") or not SPEC.fullmatch(spec or ""):
            raise Unsafe(f"field {field!r}: {conversion!r} {spec!r}")
        value = params[field]
        if conversion == "r":
            value = repr(value)
        elif conversion == "s":
            value = str(value)
        out.append(format(value, spec or ""))
    return "".join(out)


def said(value: object) -> Text:
    """``value`` with a face of text: a ``str`` in the language spoken where it is made (what
    a record's text field held before values, so that code and tests reading it as text read
    the same) that carries the value, which a renderer says in its own language (``render``)."""
    if isinstance(value, (Msg, Join, Localized)):
        return Captured(render(value, i18n.current()), value)
    return value if isinstance(value, str) else str(value)


def english_else(english: str, msgid: str) -> str:
    """``english`` (data, in its own words) said in English, the catalogue's ``msgid`` (a
    ``lazy`` literal) in any other language: a probe's detail that a translation says by
    its kind. Under ``capturing()`` a value that says either where it is shown."""
    if is_capturing():
        return Captured(english, localized({
            lang: english if lang == i18n.SOURCE else i18n.catalogue(lang).get(msgid, msgid)
            for lang in i18n.LANGS}))
    return english if i18n.current() == i18n.SOURCE else i18n.translated(msgid)


# ------------------------------------------------------------------------------ JSON

def to_json(value: object) -> Any:
    """The value as JSON a saved scan carries (``from_json`` reads it back); None for plain
    text, which reads the same in every language."""
    if isinstance(value, Captured):
        value = value.value
    if not isinstance(value, (Msg, Join, Localized)):
        return None
    return _json(value)


def _json(value: object) -> Any:
    if isinstance(value, Captured):
        value = value.value
    if isinstance(value, Msg):
        return {"id": value.msgid, "params": {k: _param_json(v) for k, v in value.params}}
    if isinstance(value, Join):
        return {"join": [_json(p) for p in value.parts], "sep": _json(value.sep)}
    if isinstance(value, Localized):
        return {"texts": dict(value.texts)}
    return str(value)


def _param_json(value: object) -> Any:
    if isinstance(value, Captured):
        return _json(value)
    if value is None or isinstance(value, (bool, str)):
        return str(value) if isinstance(value, str) else value
    if isinstance(value, int):
        return int(value) if abs(value) < 2**53 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (Msg, Join, Localized, Captured)):
        return _json(value)
    return str(value)


def from_json(data: object, known: frozenset[str] | None = None) -> Text:
    """A saved value (``to_json``), held to the bounds above: every message id one the
    catalogue knows (``known``: default, the Chinese catalogue's ids, which are all the
    code's), every template field safe. Unsafe for anything else."""
    ids = frozenset(i18n.catalogue("zh_CN")) if known is None else known
    budget = [MAX_NODES]
    value = _from(data, ids, 0, budget)
    for lang in i18n.LANGS:  # every field of every template it names must fill
        render_strict(value, lang)
    return value


def _from(data: object, ids: frozenset[str], depth: int, budget: list[int]) -> Text:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise Unsafe("too large or too deep")
    if isinstance(data, str):
        return _bounded(data)
    if not isinstance(data, dict):
        raise Unsafe("not a value")
    if set(data) == {"id", "params"}:
        msgid, params = data["id"], data["params"]
        if not isinstance(msgid, str) or not isinstance(params, dict) or len(params) > MAX_PARAMS:
            raise Unsafe("params")
        if msgid not in ids:  # text the catalogue does not hold: data, said as given
            if params:
                raise Unsafe("an id the catalogue does not hold")
            return _bounded(msgid)
        return Msg(msgid, tuple((_name(k), _param_from(v, ids, depth, budget))
                                for k, v in params.items()))
    if set(data) == {"join", "sep"}:
        parts = data["join"]
        if not isinstance(parts, list) or len(parts) > MAX_PARTS:
            raise Unsafe("join")
        return Join(_from(data["sep"], ids, depth + 1, budget),
                    tuple(_from(p, ids, depth + 1, budget) for p in parts))
    if set(data) == {"texts"}:
        texts = data["texts"]
        if not isinstance(texts, dict) or not texts or not set(texts) <= set(i18n.LANGS):
            raise Unsafe("texts")
        return localized({k: _bounded(v) for k, v in texts.items()})
    raise Unsafe("not a value")


def _name(key: object) -> str:
    if not isinstance(key, str) or not NAME.fullmatch(key):
        raise Unsafe("a parameter name")
    return key


def _param_from(value: object, ids: frozenset[str], depth: int, budget: list[int]) -> Param:
    if value is None or isinstance(value, (bool, int)):
        return value  # json's numbers: an int is bounded by the reader's number rules
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unsafe("a number")
        return value
    if isinstance(value, str):
        return _bounded(value)
    return _from(value, ids, depth + 1, budget)


def _bounded(text: object) -> str:
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        raise Unsafe("a string")
    return text


def render_strict(value: Text, lang: str) -> str:
    """``render`` that raises Unsafe where ``render`` would fall back."""
    if isinstance(value, Msg):
        try:
            return _filled(value, lang, render_strict)
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
            raise Unsafe(str(exc)[:80]) from None
    if isinstance(value, Join):
        return render_strict(value.sep, lang).join(render_strict(p, lang) for p in value.parts)
    return render(value, lang)


def saved_text(entry: Mapping[str, Any], key: str, saved_in: object = None,
               lang: str | None = None) -> str:
    """A checked saved scan's probe or finding text ``key`` (reports/json_report.py ``check``)
    in ``lang`` (default: the current language): as saved when the scan was saved in
    ``lang`` (its ``lang``, given as ``saved_in``), else said from its value ``<key>_msg``
    (``from_json``: ids of this llm-doctor's catalogue, bounded, plain template fields),
    else as saved."""
    text = entry.get(key)
    text = text if isinstance(text, str) else ""
    lang = i18n.current() if lang is None else lang
    saved = entry.get(f"{key}_msg")
    if saved is None or (saved_in or i18n.SOURCE) == lang:
        return text
    try:
        return render(from_json(saved), lang)
    except (Unsafe, RecursionError):
        return text
