"""click is pinned, because the command line speaks Chinese through click's private names.

click marks its own words with ``gettext`` bound as ``_`` in each module, its plurals with
``ngettext``, and measures help with ``term_len``: none of it is public API. The supported
way (a gettext ``.mo`` catalogue for the process's default domain) would make the process's
whole gettext domain llm-doctor's and need a compiled catalogue beside the TOML ones, so
doctor/commands/lang.py and click_words.py rebind those names instead, and pyproject pins
click below its next minor release. These tests say when the pin must move: the installed
click is within it, and every name rebound is where the rebinding looks for it.
"""

from __future__ import annotations

import importlib
import importlib.metadata

from packaging.requirements import Requirement

from doctor._toml import tomllib
from doctor.commands import click_words, lang
from tests.conftest import REPO


def _click_requirement() -> Requirement:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return next(Requirement(d) for d in project["dependencies"] if Requirement(d).name == "click")


def test_click_is_pinned_below_a_release_not_tested():
    spec = _click_requirement().specifier
    assert any(s.operator == "<" for s in spec), f"click is not pinned: {spec}"
    assert any(s.operator == ">=" for s in spec)


def test_the_installed_click_is_within_the_pin():
    version = importlib.metadata.version("click")
    assert _click_requirement().specifier.contains(version), version


def test_every_private_name_rebound_is_there():
    for name in lang._CLICK_MODULES:
        assert callable(getattr(importlib.import_module(name), "_", None)), name
    for name in click_words._PLURAL_MODULES:
        assert callable(getattr(importlib.import_module(name), "ngettext", None)), name
    for name in click_words._WIDTH_MODULES:
        assert callable(getattr(importlib.import_module(name), "term_len", None)), name
    wrapping = importlib.import_module("click._textwrap")
    assert callable(wrapping._truncate_visible) and callable(wrapping.TextWrapper._split)
