"""The built-in rules, loaded once a test session: 38 test modules read them at import, and
loading them (457 rule files' worth of expressions compiled) took 0.2 s each, 8 s of every
collection. The rules are frozen records holding every language's texts, so one load serves
every module; each caller gets a list of its own."""

from __future__ import annotations

import functools

from doctor.rules.loader import Rule, builtin_files, load_rules
from probes.registry import by_name


@functools.cache
def _loaded() -> tuple[Rule, ...]:
    return tuple(load_rules(builtin_files(), by_name()))


def builtin_rules() -> list[Rule]:
    """``load_rules(builtin_files(), by_name())``, loaded once."""
    return list(_loaded())
