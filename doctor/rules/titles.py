"""A finding's title, filled from its evidence and parameters by a minimal formatter.

``str.format`` follows attributes and indexes (``{x.__class__}``, ``{f.__globals__[...]}``),
so a rule file could read the process's memory through a title. Titles here allow only
``{name}`` and ``{name:spec}``, where ``name`` is an evidence label or a parameter and
``spec`` a plain format spec (fill, align, sign, width up to 999, grouping, precision,
type: ``{ratio:.2f}``, ``{mib:>8,}``). ``{{`` and ``}}`` are literal braces. Anything
else is refused when the rule loads, with the column.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from doctor.vocabulary import suggest

# [[fill]align][sign][z][#][0][width][grouping][.precision][type], width and precision
# bounded so that a title cannot ask for a gigabyte of padding.
SPEC = re.compile(r"(?:[^{}]?[<>=^])?[+\- ]?z?#?0?(?:[1-9]\d{0,2})?[,_]?(?:\.\d{1,2})?"
                  r"[bcdeEfFgGnosxX%]?")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_VALUE_CHARS = 200  # one field's text in a title
MAX_TITLE_CHARS = 400
MAX_LIST_ITEMS = 20  # a list or mapping in a title shows its first 20 entries


class TemplateError(ValueError):
    """The title is not a template this formatter fills; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Template:
    parts: tuple[str | tuple[str, str], ...]  # literal text, or (name, spec)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p[0] for p in self.parts if isinstance(p, tuple))


def parse(text: str, names: Collection[str]) -> Template:
    """The template in ``text``; every field must be one of ``names``."""
    parts: list[str | tuple[str, str]] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in "{}" and text[i + 1:i + 2] == char:
            literal.append(char)
            i += 2
        elif char == "}":
            raise TemplateError(f"unmatched '}}' at column {i + 1}; write '}}}}' for a literal brace")
        elif char == "{":
            end = text.find("}", i + 1)
            if end < 0:
                raise TemplateError(f"'{{' at column {i + 1} is never closed; write '{{{{' for "
                                    "a literal brace")
            parts.append("".join(literal))
            literal = []
            parts.append(_field(text[i + 1:end], i + 1, names))
            i = end + 1
        else:
            literal.append(char)
            i += 1
    parts.append("".join(literal))
    return Template(tuple(p for p in parts if p != ""))


def _field(inner: str, column: int, names: Collection[str]) -> tuple[str, str]:
    name, _, spec = inner.partition(":")
    if not NAME.fullmatch(name):
        raise TemplateError(
            f"{{{inner}}} at column {column}: a title field is {{label}} or {{label:spec}}, "
            "an evidence label or a parameter; attributes, indexes and conversions "
            "(., [ ], !) are not allowed")
    if name not in names:
        raise TemplateError(f"title uses {{{name}}}, which is neither an evidence label nor a "
                            f"parameter{suggest(name, names)}")
    if not SPEC.fullmatch(spec) or "{" in spec:
        raise TemplateError(f"{{{inner}}} at column {column}: '{spec}' is not a plain format "
                            "spec (fill, align, sign, width up to 999, grouping, precision, type)")
    return name, spec


def text_of(value: Any) -> Any:
    """A value as a title shows it: {"powersave": 128} → "powersave×128"."""
    if isinstance(value, dict):
        shown = [f"{k}×{v}" for k, v in list(value.items())[:MAX_LIST_ITEMS]]
        return ", ".join(shown) + (", …" if len(value) > MAX_LIST_ITEMS else "") or "none"
    if isinstance(value, (list, tuple)):
        shown = [str(v) for v in value[:MAX_LIST_ITEMS]]
        return ", ".join(shown) + (", …" if len(value) > MAX_LIST_ITEMS else "") or "none"
    return value


def render(template: Template, values: dict[str, Any]) -> str:
    """The title; a value the spec does not fit (``None`` under ``.1f``) shows as plain text."""
    out: list[str] = []
    for part in template.parts:
        if isinstance(part, str):
            out.append(part)
            continue
        name, spec = part
        value = text_of(values.get(name))
        try:
            shown = format(value, spec)
        except (ValueError, TypeError):
            shown = str(value)
        out.append(_cut(shown, MAX_VALUE_CHARS))
    return _cut("".join(out), MAX_TITLE_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
