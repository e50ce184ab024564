"""A rule file's texts in other languages: ``<folder>/<lang>/<file name>`` beside it.

``checks/host.toml``'s Chinese is ``checks/zh_CN/host.toml``, one table per rule id::

    [fd-limit-low]
    title = "{process}：打开文件数上限 {nofile_soft} 低于 {min_nofile}"
    remediation = "启动引擎前调高打开文件数上限：……"

A title is a template of the same kind as the English one (doctor/rules/titles.py) and may
use the same fields, no others; a rule the file does not name reads in English. A users'
rule file may carry its own translations the same way. Every error names the file, the
line and the rule id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from doctor.i18n import LANGS, SOURCE, t
from doctor.rules.titles import Template, TemplateError
from doctor.rules.titles import parse as parse_title
from doctor.tomlfile import MAX_RULE_FILE_BYTES, LineIndex, read_toml
from doctor.vocabulary import suggest

KEYS = ("title", "remediation")


@dataclass(frozen=True, slots=True)
class Texts:
    """One rule's title (parsed) and remediation in one language."""

    title: str
    template: Template
    remediation: str


def translations_of(path: Path) -> dict[str, Path]:
    """lang → the file that translates rule file ``path``, for each that exists."""
    out: dict[str, Path] = {}
    for lang in LANGS:
        candidate = path.parent / lang / path.name
        # anything there but a folder is read, so that a FIFO or a broken link is refused
        # with its name (tomlfile.read_text) rather than passed over in silence
        if lang != SOURCE and os.path.lexists(candidate) and not candidate.is_dir():
            out[lang] = candidate
    return out


def _held_in_its_folder(path: Path, error: type[Exception]) -> None:
    """Refuse a translation that is a link, or that resolves out of the rule file's folder
    (``<lang>/`` itself a link). Whoever may write beside a rule file has no business making
    llm-doctor (root, in the daemon) read, and quote in its errors, a file they could not
    read themselves; a translation is a file of the rule file's own folder."""
    folder = path.parent.parent
    if path.is_symlink():
        raise error(t("{path}: the rule translation file is a symbolic link; a translation is "
                      "a regular file in {folder}, never a link", path=path,
                      folder=folder / path.parent.name))
    try:
        resolved, home = path.resolve(strict=True), folder.resolve(strict=True)
    except (OSError, RuntimeError):  # gone, or a loop: read_text names what it cannot read
        return
    if resolved != home / path.parent.name / path.name:
        raise error(t("{path}: the rule translation file is {resolved}, outside {folder}; a "
                      "translation is a regular file in its rule file's folder, not through a "
                      "link", path=path, resolved=resolved, folder=folder))


def load(path: Path, names_of: dict[str, list[str]], error: type[Exception]) -> dict[str, Texts]:
    """rule id → its Texts from translation file ``path``; ``names_of`` gives each rule id
    of the English file the fields its title may use."""
    _held_in_its_folder(path, error)
    text, data = read_toml(path, "rule translation file", error, MAX_RULE_FILE_BYTES,
                           follow_links=False)
    lines = LineIndex(text)
    out: dict[str, Texts] = {}
    for rid, table in data.items():
        where = f"{path}:{lines.table(rid)}: rule '{rid}'"
        if rid not in names_of:
            raise error(f"{where}: no rule of that id in {path.parent.parent / path.name}"
                        f"{suggest(rid, names_of)}; a translation names a rule of the file "
                        "it translates")
        if not isinstance(table, dict):
            raise error(f"{where}: must be a table with title and remediation")
        extra = sorted(set(table) - set(KEYS))
        if extra:
            raise error(f"{path}:{lines.table(rid, extra[0])}: rule '{rid}': unknown key "
                        f"'{extra[0]}'{suggest(extra[0], KEYS)}; a translation holds "
                        f"{' and '.join(KEYS)}")
        for key in KEYS:
            if not isinstance(table.get(key), str) or not table[key].strip():
                raise error(f"{path}:{lines.table(rid, key)}: rule '{rid}': '{key}' must be "
                            "a non-empty string")
        try:
            template = parse_title(table["title"], names_of[rid])
        except TemplateError as exc:
            raise error(f"{path}:{lines.table(rid, 'title')}: rule '{rid}': title: {exc}") from None
        out[rid] = Texts(table["title"], template, table["remediation"])
    return out
