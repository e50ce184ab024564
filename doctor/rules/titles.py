"""A finding's title, filled from its evidence and parameters by a minimal formatter.

``str.format`` follows attributes and indexes (``{x.__class__}``, ``{f.__globals__[...]}``),
so a rule file could read the process's memory through a title. Titles here allow only
``{name}`` and ``{name:spec}``, where ``name`` is an evidence label or a parameter and
``spec`` a plain format spec (fill, align, sign, width up to 999, grouping, precision,
type: ``{ratio:.2f}``, ``{mib:>8,}``). ``{{`` and ``}}`` are literal braces. Anything
else is refused when the rule loads, with the column.

A title never says "None". A part that names a value that may be absent goes in an
optional segment, ``{? …}``, shown only when every field in it has a value:
``"GPU{gpu}: link x{width}{?, {replay_count} replays}"``. A field outside one whose value
is None shows why (the reason its record's ``missing`` gives, else ``—``), and so does
"None" inside text an evidence expression built; a number that rounds to zero has no sign
(doctor/display.py). The built-in rules' titles show neither
(tests/test_no_none.py).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from doctor import display
from doctor.i18n import t
from doctor.vocabulary import suggest

# [[fill]align][sign][z][#][0][width][grouping][.precision][type], width and precision
# bounded so that a title cannot ask for a gigabyte of padding.
SPEC = re.compile(r"(?:[^{}]?[<>=^])?[+\- ]?z?#?0?(?:[1-9]\d{0,2})?[,_]?(?:\.\d{1,2})?"
                  r"[bcdeEfFgGnosxX%]?")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_VALUE_CHARS = 200  # one field's text in a title
MAX_TITLE_CHARS = 400
MAX_LIST_ITEMS = 20  # a list or mapping in a title shows its first 20 entries
# Python's word for an absent value, inside text an evidence expression built
# ("1-3 " + str(pair.level)): a title shows "—" there (vLLM also writes "None" for a setting
# it leaves unset, which is as absent)
NONE_WORD = re.compile(r"\bNone\b")


class TemplateError(ValueError):
    """The title is not a template this formatter fills; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Segment:
    """``{? …}``: literal text and fields, shown only when every field in it has a value."""

    parts: tuple[str | tuple[str, str], ...]


Part = str | tuple[str, str] | Segment  # literal text, (name, spec), or a segment


@dataclass(frozen=True, slots=True)
class Template:
    parts: tuple[Part, ...]

    @property
    def names(self) -> tuple[str, ...]:
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, tuple):
                out.append(part[0])
            elif isinstance(part, Segment):
                out += [p[0] for p in part.parts if isinstance(p, tuple)]
        return tuple(out)


def parse(source: str, names: Collection[str]) -> Template:
    """The template in ``source``; every field must be one of ``names``."""
    return Template(_parts(source, names, 0, in_segment=False))


def _parts(source: str, names: Collection[str], offset: int, in_segment: bool) -> tuple[Part, ...]:
    """The parts of ``source``; ``offset`` places its columns in the whole title."""
    parts: list[Part] = []
    literal: list[str] = []
    i = 0
    while i < len(source):
        char = source[i]
        column = offset + i + 1
        if char in "{}" and source[i + 1:i + 2] == char:
            literal.append(char)
            i += 2
        elif char == "}":
            raise TemplateError(t("unmatched '}}' at column {column}; write '}}}}' for a literal "
                                  "brace", column=column))
        elif char == "{" and source[i + 1:i + 2] == "?":
            if in_segment:
                raise TemplateError(t("'{{?' at column {column} is inside another optional "
                                      "segment; segments do not nest", column=column))
            end = _segment_end(source, i, offset)
            parts.append("".join(literal))
            literal = []
            inner = _parts(source[i + 2:end], names, offset + i + 2, in_segment=True)
            if not any(isinstance(p, tuple) for p in inner):
                raise TemplateError(t("the optional segment at column {column} names no field; "
                                      "write its text without {{? }}", column=column))
            parts.append(Segment(tuple(p for p in inner if not isinstance(p, Segment))))
            i = end + 1
        elif char == "{":
            end = source.find("}", i + 1)
            if end < 0:
                raise TemplateError(t("'{{' at column {column} is never closed; write '{{{{' for "
                                      "a literal brace", column=column))
            parts.append("".join(literal))
            literal = []
            parts.append(_field(source[i + 1:end], column, names))
            i = end + 1
        else:
            literal.append(char)
            i += 1
    parts.append("".join(literal))
    return tuple(p for p in parts if p != "")


def _segment_end(source: str, start: int, offset: int) -> int:
    """The index of the ``}`` that closes the segment opened at ``start`` (``{?``): the
    fields inside close their own braces, ``{{`` and ``}}`` are literal."""
    i = start + 2
    while i < len(source):
        pair = source[i:i + 2]
        if pair in ("{{", "}}"):
            i += 2
        elif source[i] == "{":
            end = source.find("}", i + 1)
            if end < 0:
                break
            i = end + 1
        elif source[i] == "}":
            return i
        else:
            i += 1
    raise TemplateError(t("the optional segment '{{?' at column {column} is never closed; end "
                          "it with '}}'", column=offset + start + 1))


def _field(inner: str, column: int, names: Collection[str]) -> tuple[str, str]:
    name, _, spec = inner.partition(":")
    if not NAME.fullmatch(name):
        raise TemplateError(t(
            "{{{inner}}} at column {column}: a title field is {{label}} or {{label:spec}}, an "
            "evidence label or a parameter; attributes, indexes and conversions (., [ ], !) are "
            "not allowed", inner=inner, column=column))
    if name not in names:
        raise TemplateError(t("title uses {{{name}}}, which is neither an evidence label nor a "
                              "parameter{hint}", name=name, hint=suggest(name, names)))
    if not SPEC.fullmatch(spec) or "{" in spec:
        raise TemplateError(t("{{{inner}}} at column {column}: '{spec}' is not a plain format "
                              "spec (fill, align, sign, width up to 999, grouping, precision, "
                              "type)", inner=inner, column=column, spec=spec))
    return name, spec


def text_of(value: Any) -> Any:
    """A value as a title shows it: {"powersave": 128} → "powersave×128"; [0, None] → "0, —"."""
    if isinstance(value, dict):
        shown = [f"{k}×{display.text(v)}" for k, v in list(value.items())[:MAX_LIST_ITEMS]]
        return ", ".join(shown) + (", …" if len(value) > MAX_LIST_ITEMS else "") or "none"
    if isinstance(value, (list, tuple)):
        shown = [display.text(v) for v in value[:MAX_LIST_ITEMS]]
        return ", ".join(shown) + (", …" if len(value) > MAX_LIST_ITEMS else "") or "none"
    return value


def render(template: Template, fields: dict[str, Any],
           reasons: dict[str, str] | None = None) -> str:
    """The title. An optional segment with a None field is left out; a None field outside
    one shows its reason from ``reasons`` (label → the record's ``missing`` entry) or ``—``;
    a value the spec does not fit shows as plain text."""
    out: list[str] = []
    for part in template.parts:
        if isinstance(part, Segment):
            if all(fields.get(p[0]) is not None for p in part.parts if isinstance(p, tuple)):
                out += [_part(p, fields, reasons) for p in part.parts]
        else:
            out.append(_part(part, fields, reasons))
    return _cut("".join(out), MAX_TITLE_CHARS)


def _part(part: str | tuple[str, str], fields: dict[str, Any], reasons: dict[str, str] | None) -> str:
    if isinstance(part, str):
        return part
    name, spec = part
    value = text_of(fields.get(name))
    if value is None:
        shown = display.why((reasons or {}).get(name))
    else:
        if (not spec and isinstance(value, float) and value.is_integer()
                and abs(value) < 2 ** 53):
            value = int(value)  # a count sent as a float (a gauge's 7.0) reads "7 waiting"
        try:
            shown = (display.number(value, spec) if isinstance(value, (int, float))
                     else format(value, spec))
        except (ValueError, TypeError, OverflowError):  # 10**400 under .2f
            shown = display.text(value)
        if isinstance(value, str):  # text an expression built with str(None) in it
            shown = NONE_WORD.sub(display.ABSENT, shown)
    return _cut(shown, MAX_VALUE_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
