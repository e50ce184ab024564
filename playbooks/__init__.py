"""Playbooks: one markdown file per cause id (see README.md in this folder).

A playbook is found by its cause id only, through ``PLAYBOOKS``, a mapping built from the
known ids (``doctor.vocabulary.CAUSES``) to the files of this folder. No path is ever built
from a string that came with an input: a saved scan, a capture or a rule file may name any
cause (``../../etc/x``), and an id this llm-doctor does not know has no playbook.
"""

from __future__ import annotations

from pathlib import Path

from doctor.vocabulary import CAUSES

FOLDER = Path(__file__).parent
PLAYBOOKS: dict[str, Path] = {cause: FOLDER / f"{cause}.md" for cause in CAUSES}


def path_of(cause: object) -> Path | None:
    """The playbook file of a known cause id; None for any other string."""
    return PLAYBOOKS.get(cause) if isinstance(cause, str) else None


def text_of(cause: object) -> str | None:
    """The playbook of a known cause id as Markdown; None when there is none."""
    path = path_of(cause)
    if path is None or not path.is_file():
        return None
    return path.read_text(encoding="utf-8")
