"""Playbooks: one markdown file per cause id (see README.md in this folder).

A playbook is found by its cause id only, through ``PLAYBOOKS``, a mapping built from the
known ids (``doctor.vocabulary.CAUSES``) to the files of this folder. No path is ever built
from a string that came with an input: a saved scan, a capture or a rule file may name any
cause (``../../etc/x``), and an id this llm-doctor does not know has no playbook.

Each playbook has its translations beside it, ``<cause>.<lang>.md`` (``fd-limit-low.zh_CN.md``);
``path_of`` and ``text_of`` give the one in the current language (doctor/i18n), else the
English one.
"""

from __future__ import annotations

from pathlib import Path

from doctor.i18n import LANGS, SOURCE, current
from doctor.vocabulary import CAUSES

FOLDER = Path(__file__).parent
PLAYBOOKS: dict[str, Path] = {cause: FOLDER / f"{cause}.md" for cause in CAUSES}
TRANSLATED: dict[tuple[str, str], Path] = {(cause, lang): FOLDER / f"{cause}.{lang}.md"
                                           for cause in CAUSES for lang in LANGS if lang != SOURCE}


def path_of(cause: object, lang: str | None = None) -> Path | None:
    """The playbook file of a known cause id in ``lang`` (default: the current language),
    the English one where it has no translation; None for any other string."""
    if not isinstance(cause, str) or cause not in PLAYBOOKS:
        return None
    translated = TRANSLATED.get((cause, lang or current()))
    if translated is not None and translated.is_file():
        return translated
    return PLAYBOOKS[cause]


def text_of(cause: object) -> str | None:
    """The playbook of a known cause id as Markdown; None when there is none."""
    path = path_of(cause)
    if path is None or not path.is_file():
        return None
    return path.read_text(encoding="utf-8")
