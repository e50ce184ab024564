"""Playbooks: one markdown file per cause id (see README.md in this folder)."""

from pathlib import Path

FOLDER = Path(__file__).parent


def path_of(cause: str) -> Path:
    return FOLDER / f"{cause}.md"
