"""What the code asks the catalogue for, found by reading it (``ast``), and what is missing.

Every call ``t("…")`` or ``lazy("…")`` in llm-doctor's own modules is a message id; its first
argument must be a literal string (an f-string or a variable would never match an entry).
``python -m tests.i18n_scan [PATH...]`` lists, for the given files or folders (default: all),
every message id with no zh_CN entry, every entry whose placeholders differ, and every call
whose id is not a literal, one per line with file:line, and exits 1 if there is any.
"""

from __future__ import annotations

import ast
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

from doctor.i18n import catalogue, entries, names

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("doctor", "probes", "reports", "checks", "playbooks")
CALLS = ("t", "lazy", "m")  # m: a message value (doctor/i18n/text.py)
LANG = "zh_CN"


@dataclass(frozen=True, slots=True)
class Use:
    msgid: str | None  # None: the first argument is not a literal string
    where: str  # file:line


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "i18n":
        return func.attr
    return None


def uses_in(path: Path) -> list[Use]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    out: list[Use] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) in CALLS and node.args:
            first = node.args[0]
            where = f"{rel}:{node.lineno}"
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                out.append(Use(first.value, where))
            else:
                out.append(Use(None, where))
    return out


def files(paths: list[str] | None = None) -> list[Path]:
    roots = [REPO / p for p in paths] if paths else [REPO / p for p in PACKAGES]
    out: list[Path] = []
    for root in roots:
        if root.is_file():
            out.append(root)
        else:
            out += sorted(p for p in root.rglob("*.py") if "doctor/i18n" not in p.as_posix())
    return out


def uses(paths: list[str] | None = None) -> list[Use]:
    return [use for path in files(paths) for use in uses_in(path)]


def problems_of(msgid: str, where: str, zh: dict[str, str]) -> list[str]:
    if msgid not in zh:
        return [f"{where}: no {LANG} entry for {msgid!r}"]
    if not zh[msgid].strip():
        return [f"{where}: the {LANG} entry for {msgid!r} is empty"]
    if names(zh[msgid]) != names(msgid):
        return [f"{where}: placeholders differ: en {sorted(names(msgid))}, {LANG} "
                f"{sorted(names(zh[msgid]))} in {msgid!r}"]
    return []


def problems(paths: list[str] | None = None) -> list[str]:
    zh = catalogue(LANG)
    out: list[str] = []
    for use in uses(paths):
        if use.msgid is None:
            out.append(f"{use.where}: the message id is not a literal string")
        else:
            out += problems_of(use.msgid, use.where, zh)
    return out


def help_texts() -> list[tuple[str, str]]:
    """(command path, English help) of every command and option of the command line."""
    from doctor.commands import lang
    from doctor.commands.cli import cli

    out: list[tuple[str, str]] = []
    for command in lang.walk(cli):
        saved = getattr(command, lang._ENGLISH, {})
        for attr in ("help", "short_help", "epilog"):
            text = saved.get(attr, getattr(command, attr))
            if text:
                out.append((f"{command.name} {attr}", inspect.cleandoc(text)))
        for param in command.params:
            text = getattr(param, lang._ENGLISH, {}).get("help", getattr(param, "help", None))
            if text:
                out.append((f"{command.name} {'/'.join(param.opts)}", inspect.cleandoc(text)))
    return out


def help_problems() -> list[str]:
    zh = catalogue(LANG)
    out: list[str] = []
    for where, text in help_texts():
        out += problems_of(text, f"help of {where}", zh)
    return out


def duplicates() -> list[str]:
    seen: dict[str, dict] = {}
    out: list[str] = []
    for entry in entries(LANG):
        if entry["en"] in seen and seen[entry["en"]][LANG] != entry[LANG]:
            out.append(f"{entry['file']} and {seen[entry['en']]['file']}: two translations of "
                       f"{entry['en']!r}")
        seen.setdefault(entry["en"], entry)
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    found = problems(args or None) + (help_problems() if not args or any(
        a.startswith("doctor/commands") for a in args) else []) + duplicates()
    print("\n".join(found) or "no problems")
    sys.exit(1 if found else 0)
