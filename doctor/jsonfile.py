"""Reading a JSON file someone else wrote (a saved scan) without trusting it.

The file named may be anything ``doctor/tomlfile.py`` guards against (a FIFO that never
ends, ``/dev/zero``, a 10 GB log, Latin-1 text), and its JSON may hold what Python's reader
accepts but no report holds: ``NaN`` and ``Infinity`` (not JSON), numbers past any float
(``1e999`` reads as infinity) or past a 64-bit integer (a 5,000-digit integer takes
Python's digit limit and raises), and arrays nested 100,000 deep (the parser recurses).

``read_json`` reads through ``tomlfile.read_text`` (non-blocking open, fstat, a size bound,
UTF-8), parses with hooks that mark each such number instead of converting it, and walks
the document once, without recursion, to refuse the first mark or the first container
nested deeper than the caller's bound. Every message names the file, and for a value its
JSON path (``findings[3].evidence.x``), with any secret in a key masked.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from doctor.i18n import t
from doctor.redact import redact_text
from doctor.tomlfile import read_text

MAX_INTEGER = 2**63  # beyond it most JSON readers (Go, Java, jq) lose digits
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Unheld:
    """A number the file holds that a report cannot: kept as a mark until the walk names
    where it is."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what


def _constant(name: str) -> _Unheld:
    return _Unheld(t("{name} (not JSON: write null for a value that is absent)", name=name))


def _float(text: str) -> float | _Unheld:
    value = float(text)
    return value if math.isfinite(value) else _Unheld(t("{text} (beyond any float)",
                                                        text=text[:40]))


def _int(text: str) -> int | _Unheld:
    digits = len(text.lstrip("-"))
    if digits > 19:  # never converted: a 5,000-digit integer costs, and past 4,300 raises
        return _Unheld(t("an integer of {digits} digits", digits=digits))
    value = int(text)
    if -MAX_INTEGER < value < MAX_INTEGER:
        return value
    return _Unheld(t("{value} (beyond a 64-bit integer)", value=value))


def json_path(parts: list[str | int]) -> str:
    """``["findings", 3, "evidence", "x"]`` → ``findings[3].evidence.x``, a key that is not
    an identifier quoted (``host["a b"]``), secrets in keys masked."""
    out = []
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENTIFIER.fullmatch(part):
            out.append(("." if out else "") + part)
        else:
            out.append(f"[{json.dumps(part)[:60]}]")
    return redact_text("".join(out)) or t("the top level")


def _trail(link: tuple | None) -> list[str | int]:
    parts: list[str | int] = []
    while link is not None:
        parts.append(link[0])
        link = link[1]
    return parts[::-1]


def check_values(doc: Any, where: str, error: type[Exception], max_depth: int) -> None:
    """Refuse the first number a report cannot hold, or a container nested deeper than
    ``max_depth`` levels, naming its JSON path. One pass, no recursion."""
    stack: list[tuple[Any, int, tuple | None]] = [(doc, 1, None)]
    while stack:
        value, depth, link = stack.pop()
        if isinstance(value, _Unheld):
            raise error(t("{where}: {key}: {what}; a report holds finite numbers and integers "
                          "under 2^63 only", where=where, key=json_path(_trail(link)),
                          what=value.what))
        if isinstance(value, (dict, list)):
            if depth > max_depth:
                raise error(t("{where}: {key}: nested deeper than {depth} levels; no report "
                              "nests this deep", where=where, key=json_path(_trail(link)),
                              depth=max_depth))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((item, depth + 1, (key, link)) for key, item in items)


def parse(text: str, where: str, error: type[Exception], max_depth: int) -> Any:
    """JSON text to Python values; a syntax error names the line and column."""
    try:
        doc = json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except json.JSONDecodeError as exc:
        raise error(t("{where}:{line}:{column}: not valid JSON ({error})", where=where,
                      line=exc.lineno, column=exc.colno, error=exc.msg)) from None
    except RecursionError:  # the parser recurses once per level of [[[...]]] or {"a":{...}}
        raise error(t("{where}: nested deeper than {depth} levels (more than the JSON parser "
                      "can follow); no report nests this deep", where=where,
                      depth=max_depth)) from None
    check_values(doc, where, error, max_depth)
    return doc


def read_json(path: Path, what: str, error: type[Exception], max_bytes: int,
              max_depth: int) -> Any:
    """The JSON document in ``path``: a regular UTF-8 file of at most ``max_bytes``, with
    only finite numbers, integers under 2^63 and at most ``max_depth`` levels of nesting.
    Anything else raises ``error`` with a message that names the file."""
    return parse(read_text(path, what, error, max_bytes), str(path), error, max_depth)
