"""Message values and the capturing of ``t()``: the types doctor/i18n/text.py says.

Here, apart from doctor/i18n (which imports this module for ``t``'s capturing mode) and
text.py (which says the values in a language), so that the three import no circle.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

Param = Union[str, int, float, bool, None, "Msg", "Join", "Localized"]
Text = Union[str, "Msg", "Join", "Localized"]


@dataclass(frozen=True, slots=True)
class Msg:
    msgid: str
    params: tuple[tuple[str, Param], ...] = ()


@dataclass(frozen=True, slots=True)
class Join:
    sep: Text
    parts: tuple[Text, ...]


@dataclass(frozen=True, slots=True)
class Localized:
    texts: tuple[tuple[str, str], ...]  # (lang, text), English first


def m(msgid: str, /, **params: Any) -> Msg:
    """A message value: ``t``'s arguments, said where it is rendered (the catalogue test
    reads ``m("…")`` as it reads ``t("…")``)."""
    return Msg(msgid, tuple((k, as_param(v)) for k, v in params.items()))


def localized(texts: Mapping[str, str]) -> Localized:
    return Localized(tuple(sorted(texts.items(), key=lambda kv: kv[0] != "en")))


def as_text(value: object) -> Text:
    """The value a string carries (a Captured's), else the string as data."""
    if isinstance(value, Captured):
        return value.value
    if isinstance(value, (Msg, Join, Localized)):
        return value
    return str(value)


def as_param(value: object) -> Param:
    if isinstance(value, Captured):
        return value.value
    if isinstance(value, str):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, Msg, Join, Localized)):
        return value  # type: ignore[return-value]
    return value  # type: ignore[return-value]  # rendered as format() renders it


_local = threading.local()


class capturing:
    """``with capturing():`` in a probe's thread: ``t()`` returns Captured values (English
    text carrying the message) instead of text in the current language."""

    def __enter__(self) -> "capturing":
        self.before = getattr(_local, "on", False)
        _local.on = True
        return self

    def __exit__(self, *exc: object) -> None:
        _local.on = self.before


def is_capturing() -> bool:
    return getattr(_local, "on", False)


class Captured(str):
    """Text that carries its message value (English under ``capturing()``, the language
    spoken where it was made for ``said``); ``join`` and ``+`` keep the value, and
    ``render`` says the value, not the text."""

    value: Text

    def __new__(cls, english: str, value: Text) -> "Captured":
        obj = super().__new__(cls, english)
        obj.value = value
        return obj

    def join(self, parts: Iterable[str]) -> "Captured":  # type: ignore[override]
        items = list(parts)
        return Captured(str.join(self, items), Join(self.value, tuple(as_text(p) for p in items)))

    def __add__(self, other: str) -> "Captured":  # type: ignore[override]
        if not isinstance(other, str):
            return NotImplemented
        return Captured(str.__add__(self, other), Join("", (self.value, as_text(other))))

    def __radd__(self, other: str) -> "Captured":
        if not isinstance(other, str):
            return NotImplemented
        return Captured(str.__add__(other, self), Join("", (as_text(other), self.value)))

    def __reduce__(self) -> tuple:  # pickled or copied: the English text
        return (str, (str(self),))


def captured(msgid: str, params: Mapping[str, Any]) -> Captured:
    """What ``t`` returns under ``capturing()``. Text passed through ``t`` that the catalogue
    does not hold (data: a path, a reason read) is a message without parameters whose id no
    catalogue holds: said as it is, and read back from a saved scan as text. The catalogue
    is not read here, so that a scan in English never loads another language's."""
    if not params and isinstance(msgid, Captured):  # t(text) of a message: that message
        return msgid
    english = msgid.format_map(params) if params else msgid
    return Captured(english, Msg(msgid, tuple((k, as_param(v)) for k, v in params.items())))
