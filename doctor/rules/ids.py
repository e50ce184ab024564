"""Which rule ids exist: the grammar of a rule id, and the ids the rule files declare.

A rule id travels far from its rule file: into saved scans, the daemon's state, fix plans
(step ids, the files a plan writes are named by the catalogue, but a plan quotes the id),
metric labels and node conditions. So a rule id is held to one small grammar everywhere,
lowercase letters, digits and single hyphens, as every built-in id is written, and a saved
scan may only name rules that some rule file declares: the built-in ones, or those of a
rule file the user named (``--rules``, the config's ``scan.rule_files``).

``declared_ids`` reads only the ``id`` fields of the files (no expression is compiled), so a
reader of a saved scan pays a few milliseconds, not a rules load.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path

from doctor.tomlfile import MAX_RULE_FILE_BYTES, read_toml

# a letter or digit first, then letters, digits and hyphens: the built-in ids, the
# playbooks' names and the cause ids all fit it
RULE_ID = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,78}[a-z0-9])?")
MAX_RULE_ID = 80
# The fleet adapters' lines start with the rule id of a problem, or with these words for
# no problem (node-problem-detector, Slurm): an id that is one of them, or begins with one
# and a hyphen ("ok-gpu critical: ..."), would make a problem read as health.
RESERVED = ("ok", "unknown")


def is_rule_id(text: object) -> bool:
    return isinstance(text, str) and RULE_ID.fullmatch(text) is not None and not any(
        text == word or text.startswith(word + "-") for word in RESERVED)


class _Unread(Exception):
    pass


def _ids_of(path: Path) -> frozenset[str]:
    """The well-formed ``id`` values of one rule file's ``[[rule]]`` tables (a file that
    cannot be read declares none: loading it as rules is where its errors are told)."""
    try:
        _, data = read_toml(path, "rule file", _Unread, MAX_RULE_FILE_BYTES)
    except _Unread:
        return frozenset()
    rules = data.get("rule") if isinstance(data, dict) else None
    if not isinstance(rules, list):
        return frozenset()
    return frozenset(r["id"] for r in rules if isinstance(r, dict) and is_rule_id(r.get("id")))


@functools.cache
def builtin_ids() -> frozenset[str]:
    """The ids of the rules that ship with llm-doctor (checks/*.toml)."""
    import checks

    return frozenset().union(*(_ids_of(p) for p in Path(checks.__file__).parent.glob("*.toml")))


def declared_ids(files: Iterable[str | Path] = ()) -> frozenset[str]:
    """The built-in rule ids and those declared by ``files`` (the user's rule files)."""
    return builtin_ids().union(*(_ids_of(Path(f)) for f in files))
