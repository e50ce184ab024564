"""Text a plan did not write itself, made fit to be carried: one printable line, bounded,
with what looks like a secret masked.

A saved scan is someone else's file: its rule ids, keys, titles, host name and evidence can
hold any string. Whatever of it a plan shows goes through ``input_text`` when the plan is
built, and every line a renderer writes goes through ``one_line`` again (the script's
comments and messages, the files' headers): a line break of any kind (LF, CR, VT, FF, the
file separators, U+0085, U+2028, U+2029), an escape or a bidi override can then never end a
``# ...`` comment, start a line of its own in a file the plan writes, or move a terminal's
cursor; a lone surrogate can never stop the plan from being encoded.
"""

from __future__ import annotations

import re

from doctor.redact import redact_text

INPUT_MAX = 200    # characters kept of one field of a saved scan: a rule id, a key, a title
LINE_MAX = 2000    # characters of any one line a plan writes (the catalogue's longest is ~400)
ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # a rule or cause id (docs/rules.md)
_PLAIN = re.compile(r"[ -~]*")  # printable ASCII: nothing to replace
REPLACED = "\ufffd"
# Characters that would let text shape a Markdown ticket (code spans, links, images, HTML,
# table cells) where an input value is set inside the catalogue's words.
_MARKUP = str.maketrans({c: "?" for c in "`*[]<>|\\!"})


def _printable(text: str) -> str:
    """Each character that is not printable (str.isprintable: controls, format characters,
    line and paragraph separators, private use, unassigned, lone surrogates) replaced: a
    space for those that are space (a line break), U+FFFD for the others."""
    if _PLAIN.fullmatch(text):
        return text
    return "".join(c if c.isprintable() else " " if c.isspace() else REPLACED for c in text)


def one_line(text: object, limit: int = LINE_MAX) -> str:
    """``text`` as one printable line of at most ``limit`` characters (cut with an ellipsis):
    runs of white space (line breaks included) become one space."""
    raw = text if isinstance(text, str) else as_text(text)
    raw = raw[:4 * limit + 8]  # bound the work before looking at each character
    line = " ".join(_printable(raw).split())
    return line if len(line) <= limit else line[:limit - 1] + "\u2026"


def as_text(value: object) -> str:
    """Any value of a saved scan as text, without failing: ``str`` refuses an integer of more
    than 4,300 digits (ValueError since Python 3.11), so such a one is named, not written."""
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except (ValueError, RecursionError):
        return f"({type(value).__name__} too large to show)"


def input_text(value: object, limit: int = INPUT_MAX) -> str:
    """A field of a saved scan as a plan may carry it: one printable line of at most
    ``limit`` characters, secrets masked as ``report`` and ``diff`` mask them."""
    return one_line(redact_text(one_line(value, 4 * limit)), limit)


def label(value: object, limit: int = INPUT_MAX) -> str:
    """An input value set inside the catalogue's words (an engine's label, a container's
    cgroup): ``input_text`` with the characters Markdown reads as markup made ``?``."""
    return input_text(value, limit).translate(_MARKUP)


def safe_id(value: object) -> str | None:
    """``value`` if it is an id in the rules' grammar (``[a-z0-9-]``, 1-64 characters)."""
    return value if isinstance(value, str) and len(value) <= 64 and ID.fullmatch(value) else None
