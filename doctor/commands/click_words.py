"""What doctor/commands/lang.py leaves of click's words and layout for another language:
its plural messages, and the width of Chinese text in its help.

* click's plural messages (``ngettext(singular, plural, n)``: "{value!r} is not one of
  {choices}.", "Got unexpected extra arguments ({args})"): lang.py rebinds click's ``_`` to
  ``doctor.i18n.t``; click imports ``ngettext`` on its own, and that name is rebound here to
  pick the English form by ``n`` (as gettext does with no catalogue) and look it up. Each
  English form has its own entry (doctor/i18n/zh_CN/click.toml); Chinese has one form.
* click wraps help in characters, but a Chinese character takes two columns of a terminal:
  its ``term_len`` and ``_truncate_visible`` are rebound to count display columns (East
  Asian wide and full-width characters as two), and its wrapper may break a line between
  any two Chinese characters (Chinese has no blanks), never before a closing mark (，。）)
  nor after an opening one (（).

For text with no wide character both give what click's own give, so English help and
errors are unchanged: this is done once at import, whatever the language.
"""

from __future__ import annotations

import re
import sys
import textwrap
import unicodedata

from doctor.i18n import translated

_PLURAL_MODULES = ("click.core", "click.exceptions", "click.parser", "click.types")
_WIDTH_MODULES = ("click._textwrap", "click.formatting", "click._termui_impl")


def ngettext(singular: str, plural: str, n: int) -> str:
    return translated(singular if n == 1 else plural)


def _columns(char: str) -> int:
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def term_len(text: str) -> int:
    """The columns ``text`` takes on a terminal, ANSI escapes left out (click's term_len
    counts characters)."""
    from click._compat import strip_ansi

    plain = strip_ansi(text)
    return len(plain) if plain.isascii() else sum(_columns(c) for c in plain)


def _truncate_visible(text: str, n: int) -> str:
    """The longest start of ``text`` that takes at most ``n`` columns (at least one
    character, so that a wrap always moves on), ANSI escapes kept whole."""
    from click._compat import _ansi_re

    if n <= 0:
        return ""
    seen = cut = i = 0
    while i < len(text):
        escape = _ansi_re.match(text, i)
        if escape is not None:
            i = escape.end()
            continue
        seen += _columns(text[i])
        if seen > n and cut:
            break
        i += 1
        cut = i
        if seen >= n:
            break
    return text[:cut]


_WIDE = "\u2e80-\u9fff\u3000-\u303f\uff00-\uffef"
# one Chinese character with the marks that may not be parted from it, or a run of the rest
_PIECE = re.compile(f"[（《「『“]*[{_WIDE}][，。：；）、！？」』》”]*|[^{_WIDE}]+")


def _split(self: textwrap.TextWrapper, text: str) -> list[str]:
    """textwrap's chunks, each Chinese character a chunk of its own (a break may fall
    between any two)."""
    out: list[str] = []
    for chunk in textwrap.TextWrapper._split(self, text):  # type: ignore[attr-defined]
        out += [chunk] if chunk.isascii() else _PIECE.findall(chunk)
    return out


def speak_click_too() -> None:
    """click's ``ngettext`` through the catalogue, and its help measured in columns."""
    import click._textwrap  # noqa: F401 (click imports it only once it wraps)
    import click.formatting  # noqa: F401

    for name in _PLURAL_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "ngettext"):
            module.ngettext = ngettext  # type: ignore[attr-defined]
    for name in _WIDTH_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "term_len"):
            module.term_len = term_len  # type: ignore[attr-defined]
    wrapping = sys.modules.get("click._textwrap")
    if wrapping is not None:
        wrapping._truncate_visible = _truncate_visible  # type: ignore[attr-defined]
        wrapping.TextWrapper._split = _split  # type: ignore[attr-defined]
