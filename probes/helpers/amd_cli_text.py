"""amd-smi's text output as trees: the indentation parser behind probes/helpers/amd_cli.py.

``amd-smi static`` and ``amd-smi metric`` print one block per GPU (amdsmi_cli's
amdsmi_logger.py, human-readable format)::

    GPU: 0
        ASIC:
            MARKET_NAME: AMD Instinct MI350X
        LIMIT:
            SOCKET_POWER: 750 W

four spaces a level, ``KEY: value`` leaves and ``KEY:`` sections; a long list wraps onto
deeper lines (``JPEG_ACTIVITY: [N/A, N/A, …`` then ``    N/A, N/A]``); an APU prints ``CPU: 0``
blocks beside the GPU ones. Every line is hostile input: sizes, depths and counts are bounded,
a line that is none of these is skipped and counted, and nothing here raises but
``CliTextError``, whose message is one line.
"""

from __future__ import annotations

import re

MAX_CHARS = 4 << 20  # 64 CPX partitions print ~300 kB of static text: far below
MAX_LINES = 200_000
MAX_DEPTH = 6  # GPU > ECC_BLOCKS > UMC > CORRECTABLE_COUNT is 3 below the GPU
MAX_KEYS = 512  # keys in one section
MAX_GPUS = 1024
MAX_VALUE = 512  # characters of one value (a wrapped list grows to this, no further)
INDENT = 4
NOT_REPORTED = "N/A"

_HEADER = re.compile(r"(GPU|CPU|CPU CORE|NIC|SWITCH): ?(\d{1,6})")
_ENTRY = re.compile(r"([A-Za-z][A-Za-z0-9_]{0,63}):(?: (.*))?")


class CliTextError(Exception):
    """amd-smi's output could not be read at all: one line saying why."""


Tree = dict[str, "str | Tree"]


def _clean(text: str) -> str:
    """One line for a message: control characters out, bounded."""
    return "".join(c if c.isprintable() and c != "\ufffd" else "?" for c in text.strip())[:80]


def parse(text: str, command: str) -> tuple[dict[int, Tree], int]:
    """GPU index -> its tree, and how many lines were skipped. ``command`` names the output
    in messages (``amd-smi static``)."""
    if not isinstance(text, str):
        raise CliTextError(f"{command}: no text output")
    if len(text) > MAX_CHARS:
        raise CliTextError(f"{command}: output of {len(text)} characters, over {MAX_CHARS}: not read")
    gpus: dict[int, Tree] = {}
    stack: list[Tree] = []  # the open sections of the current GPU, its tree first
    last: tuple[Tree, str] | None = None  # the last leaf, for a list that wraps
    other = False  # inside a CPU (or other) block: its lines are not ours, not counted
    skipped = 0
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise CliTextError(f"{command}: {len(lines)} lines, over {MAX_LINES}: not read")
    for raw in lines:
        line = raw.rstrip()
        if not line:
            continue
        body = line.lstrip(" ")
        indent = len(line) - len(body)
        header = _HEADER.fullmatch(body) if indent == 0 else None
        if header:
            stack, last, other = [], None, header[1] != "GPU"
            index = int(header[2])
            if not other and (index in gpus or len(gpus) < MAX_GPUS):
                # a repeated GPU (amd-smi process may print one block per process) goes on
                # in the same tree, its repeated keys kept as KEY#2, KEY#3 …
                stack = [gpus.setdefault(index, {})]
            elif not other:
                skipped += 1  # a GPU past the bound
            continue
        if other or not gpus:
            continue  # a CPU block's lines; a prompt or a banner before the first GPU
        if last is not None and indent > 0 and _continues(last, body):
            tree, key = last
            tree[key] = (str(tree[key]) + " " + body)[:MAX_VALUE]
            continue
        entry = _ENTRY.fullmatch(body)
        depth, rest = divmod(indent, INDENT)
        if not stack or entry is None or rest or not 0 < depth <= min(len(stack), MAX_DEPTH) \
                or "\t" in line:
            skipped += 1
            last = None
            continue
        del stack[depth:]
        parent, key = stack[-1], entry[1].upper()
        if len(parent) >= MAX_KEYS:
            skipped += 1
            last = None
            continue
        if key in parent:  # a repeated key (PROCESS_INFO per process): readers take the first
            key = next(f"{key}#{n}" for n in range(2, MAX_KEYS + 2) if f"{key}#{n}" not in parent)
        if entry[2] is None or entry[2].strip() == "":
            section: Tree = {}
            parent[key] = section
            stack.append(section)
            last = None
        else:
            parent[key] = entry[2].strip()[:MAX_VALUE]
            last = (parent, key)
    if not gpus:
        first = next((ln for ln in lines if ln.strip()), "")
        raise CliTextError(f"{command}: no `GPU: n` block in its output (first line: {_clean(first)!r})")
    return gpus, skipped


def _continues(last: tuple[Tree, str], body: str) -> bool:
    """A wrapped list: the last leaf opened ``[`` and has not closed it."""
    value = last[0][last[1]]
    return (isinstance(value, str) and value.startswith("[") and not value.endswith("]")
            and _ENTRY.fullmatch(body) is None)


class Garbled(ValueError):
    """A value that is not what its key holds: ``str()`` is the reason's text."""


_NUMBER = re.compile(r"(\d{1,15}(?:\.\d{1,6})?)(?: ?(\S{1,8}))?")


def number(value: object, units: tuple[str, ...] = ("",)) -> int | float | str:
    """``"750 W"`` -> 750 (``units`` the ones the key may carry, "" for none), ``"N/A"`` as it
    is; anything else raises Garbled."""
    if not isinstance(value, str):
        raise Garbled("a section where a value belongs")
    value = value.strip()
    if value == NOT_REPORTED:
        return NOT_REPORTED
    m = _NUMBER.fullmatch(value)
    if m is None or (m[2] or "") not in units:
        raise Garbled(f"not a number in {'/'.join(u for u in units if u) or 'units'}: {_clean(value)!r}")
    return float(m[1]) if "." in m[1] else int(m[1])


def word(value: object) -> str:
    """A printable value of at most 64 characters (a name, a version, a BDF), else Garbled."""
    if not isinstance(value, str):
        raise Garbled("a section where a value belongs")
    value = value.strip()
    if "\ufffd" in value or not value.isprintable() or len(value) > 64:
        raise Garbled(f"not text: {_clean(value)!r}")
    return value
