"""Reading a user's TOML file (a rule file, the config) without trusting it.

A file named on the command line or in the config may be anything: a FIFO that never
ends, ``/dev/zero``, a 10 GB log, Latin-1 text, TOML nested ten thousand levels deep, or
a dotted key of 40,000 parts (tomllib's work grows with the square of a key's parts: an
80 KB file of one such key fills memory). ``read_toml`` refuses all of these with a message
naming the file (and the line where there is one) before or while reading; ``parse``, the
one place every TOML text goes through (rule files, the config and its ``[daemon]`` table,
recorded hosts' host.toml), measures keys and nesting in one linear pass before tomllib
sees the text. ``LineIndex`` finds the line of a table or a key in one pass, so that error
messages for a file of thousands of rules stay linear.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor._toml import tomllib
from doctor.i18n import t

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB; a config is a few lines
MAX_RULE_FILE_BYTES = 4 << 20  # 4 MiB: up to 1,000 rules of 4 KiB (the built-in ones are 1.2 KiB)

MAX_KEY_PARTS = 8  # parts of one dotted key or [table.header]; llm-doctor's files use 1 to 3
MAX_DEPTH = 16  # tables, inline tables and arrays inside one another, keys' parts counted

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_.\- ]+?)\s*=""")


def noun(what: str) -> str:
    """What a file is (``what``, as the callers name it) in the current language."""
    return {"config file": t("config file"), "rule file": t("rule file"),
            "rule translation file": t("rule translation file"), "state file": t("state file"),
            "saved scan": t("saved scan"),
            "model's config.json": t("model's config.json")}.get(what, what)


def read_text(path: Path, what: str, error: type[Exception], max_bytes: int,
              follow_links: bool = True) -> str:
    """The text of ``path`` if it is a regular UTF-8 file of at most ``max_bytes``.

    Opened non-blocking and checked with fstat before any read, so a FIFO or a device
    is refused at once rather than read forever. ``follow_links=False`` opens with
    O_NOFOLLOW: a link put there after the caller looked is not followed either.
    """
    what = noun(what)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise error(t("{path}: cannot read the {what}: {reason}", path=path, what=what,
                      reason=exc.strerror)) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise error(t("{path}: the {what} is a directory (a FIFO, a device or a socket is "
                          "never read); name a regular file", path=path, what=what))
        if not stat.S_ISREG(info.st_mode):
            raise error(t("{path}: the {what} is not a regular file (a FIFO, a device or a "
                          "socket is never read); name a regular file", path=path, what=what))
        if info.st_size > max_bytes:
            raise error(t("{path}: the {what} is {size:,} bytes; the limit is {limit}: split it "
                          "into several files", path=path, what=what, size=info.st_size,
                          limit=_mib(max_bytes)))
        data = _read_at_most(fd, max_bytes + 1)
    except OSError as exc:
        raise error(t("{path}: cannot read the {what}: {reason}", path=path, what=what,
                      reason=exc.strerror)) from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew while we looked
        raise error(t("{path}: the {what} is over {limit}: split it", path=path, what=what,
                      limit=_mib(max_bytes)))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(t("{path}:{line}: byte 0x{byte:02x} at column {column} is not UTF-8; save "
                      "the file as UTF-8", path=path, line=line, byte=data[exc.start],
                      column=column)) from None


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(1 << 16, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def parse(text: str, path: Path, error: type[Exception]) -> dict[str, Any]:
    """TOML to a dict; bad syntax, absurd keys and nesting become ``error`` naming the file."""
    problem = check_shape(text)
    if problem:
        line, what = problem
        raise error(t("{path}:{line}: {what}; llm-doctor's files need a few", path=path,
                      line=line, what=what)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(t("{path}: not valid TOML: {error}", path=path, error=exc)) from None
    except RecursionError:  # tomllib recurses once per level of [[[...]]] or {a={b=...}}
        raise error(t("{path}: not valid TOML: arrays or tables nested too deeply",
                      path=path)) from None
    except ValueError as exc:  # int() of an integer of more than 4,300 digits
        found = re.search(r"[0-9_]{4300}", text)
        line = text.count("\n", 0, found.start()) + 1 if found else 1
        raise error(t("{path}:{line}: not valid TOML: an integer of thousands of digits "
                      "({error}); TOML integers are 64-bit", path=path, line=line,
                      error=str(exc)[:60])) from None


# What the shape check must see as one token: strings (whatever they hold; an unterminated
# one runs to the end of its line, or of the text, as tomllib would read it), comments, and
# the punctuation that opens, closes and separates keys, tables and arrays.
_TOKEN = re.compile(r"""
    (?P<string> \"\"\"(?:[^"\\]|\\.|"(?!""))*"{3,5} | \"\"\"[\s\S]*
              | '''(?:[^']|'(?!''))*'{3,5} | '''[\s\S]*
              | "(?:[^"\\\n]|\\.)*" | "[^\n]* | '[^'\n]*'? )
  | (?P<comment> \#[^\n]* )
  | (?P<mark> [\[\]{}=,.\n] )
""", re.VERBOSE | re.DOTALL)


def _too_deep() -> str:
    return t("arrays or tables nested too deeply: more than {depth} levels (each part of a "
             "dotted key counts as one)", depth=MAX_DEPTH)


def check_shape(text: str) -> tuple[int, str] | None:
    """(line, what) for the first key of more than MAX_KEY_PARTS parts or the first value
    nested more than MAX_DEPTH deep; None when there is none. One pass, no recursion: a
    best effort that errs toward letting tomllib judge what is not valid TOML."""
    line = 1
    stack: list[tuple[str, int]] = []  # open arrays and inline tables: (bracket, depth)
    table = 0  # depth of the current [table]
    in_key, header, parts, value_depth = True, False, 1, 0
    for token in _TOKEN.finditer(text):
        mark = token.group("mark")
        if mark is None:  # a string or a comment: part of a key, or of a value
            line += token.group().count("\n")
            continue
        if mark == "\n":
            line += 1
            if not stack:
                in_key, header, parts = True, False, 1
        elif mark == "." and in_key:
            parts += 1
            if parts > MAX_KEY_PARTS:
                return line, t("a dotted key or [table] name of more than {parts} parts",
                               parts=MAX_KEY_PARTS)
        elif mark == "=" and in_key:
            value_depth = (stack[-1][1] if stack else table) + parts
            if value_depth > MAX_DEPTH:
                return line, _too_deep()
            in_key = False
        elif mark == "[" and in_key and not stack:  # a [table] or [[array of tables]]
            header = True
        elif mark == "]" and header:
            table, header, in_key = parts, False, False
        elif mark in "[{" and not in_key:
            depth = stack[-1][1] + 1 if stack and stack[-1][0] == "[" else value_depth
            if depth > MAX_DEPTH:
                return line, _too_deep()
            stack.append((mark, depth))
            in_key, parts = mark == "{", 1
        elif mark in "]}" and stack:
            stack.pop()
            in_key = False
        elif mark == "," and stack:
            in_key, parts = stack[-1][0] == "{", 1
    return None


def _mib(size: int) -> str:
    return t("{size:,} bytes ({mib} MiB)", size=size, mib=size >> 20)


def read_toml(path: Path, what: str, error: type[Exception],
              max_bytes: int, follow_links: bool = True) -> tuple[str, dict[str, Any]]:
    text = read_text(path, what, error, max_bytes, follow_links)
    return text, parse(text, path, error)


@dataclass(slots=True)
class _Table:
    line: int
    keys: dict[str, int] = field(default_factory=dict)


class LineIndex:
    """Where tables and keys are in a TOML text, found in one pass over its lines.

    ``table("rules.fd-limit-low", "min_nofile")`` is the line of that key in that table;
    ``entry("rule", 3, "when")`` the line of ``when`` in the fourth ``[[rule]]``, its
    sub-tables (``[rule.params]``) included. Line numbers are 1-based; a table or key
    not found gives the table's line, else 1. A best effort for messages, not a parser:
    it skips the inside of multi-line strings and ignores inline tables.
    """

    def __init__(self, text: str) -> None:
        self.tables: dict[str, _Table] = {"": _Table(1)}
        self.arrays: dict[str, list[_Table]] = {}
        current = self.tables[""]
        in_string: str | None = None
        for number, line in enumerate(text.splitlines(), 1):
            if in_string:
                if line.count(in_string) % 2 == 1:
                    in_string = None
                continue
            current = self._line(line, number, current)
            for quote in ('"""', "'''"):
                if line.count(quote) % 2 == 1:
                    in_string = quote
                    break

    def _line(self, line: str, number: int, current: _Table) -> _Table:
        header = _HEADER.match(line)
        if header:
            name = _name(header.group(2))
            if header.group(1) == "[[":
                table = _Table(number)
                self.arrays.setdefault(name, []).append(table)
                return table
            parent = name.split(".", 1)[0]
            if parent in self.arrays and name != parent:  # [rule.params] belongs to the last [[rule]]
                return self.arrays[parent][-1]
            return self.tables.setdefault(name, _Table(number))
        key = _KEY.match(line)
        if key:
            current.keys.setdefault(_name(key.group(1)), number)
        return current

    def table(self, name: str, key: str | None = None) -> int:
        table = self.tables.get(name)
        if table is None:
            return 1
        return table.keys.get(key, table.line) if key else table.line

    def entry(self, array: str, index: int, key: str | None = None) -> int:
        tables = self.arrays.get(array, [])
        if index >= len(tables):
            return 1
        table = tables[index]
        return table.keys.get(key, table.line) if key else table.line


def _name(text: str) -> str:
    """``rules."fd-limit-low"`` and ``rules . fd-limit-low`` both to ``rules.fd-limit-low``."""
    return ".".join(part.strip().strip("\"'") for part in text.split("."))
