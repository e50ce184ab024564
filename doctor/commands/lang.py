"""``--lang`` on every command, and the command line's help and click's own words in the
chosen language.

Help texts are written in English where the commands are declared (decorators run at
import, before any flag is read); ``translate`` swaps each command's and option's help for
the catalogue's text once the language is known, and keeps the English to swap back (a
test that runs the command line twice in one process, in both languages, reads both).

click marks its own words (``Usage:``, ``Options:``, ``No such option: {name}``) with
``gettext``, bound as ``_`` in each of its modules at import; ``speak_click`` rebinds those
names to ``t`` so that they come from llm-doctor's catalogue too. click formats its
messages after the lookup with named fields, as ``t`` does. Those names are click's
private ones, so pyproject pins click below its next minor release, and
tests/test_click_pin.py fails when the installed click leaves the pin or moves a name (click's
supported way, a compiled gettext catalogue for the process's default domain, would make
that domain llm-doctor's for every library in the process).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import click

from doctor.i18n import LANGS, LangError, current, parse_lang, resolve, set_lang, t, translated

_CLICK_MODULES = ("click.core", "click.decorators", "click.exceptions", "click.formatting",
                  "click.parser", "click.types", "click.utils", "click.termui")
LANG_HELP = "The language of the report and messages: zh_CN or en (default: LLM_DOCTOR_LANG, then the locale)."
_ENGLISH = "_llm_doctor_en"  # where a command or option keeps its English help


def _on_lang(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    try:
        lang = parse_lang(value)
    except LangError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[1], ctx=ctx, param=param) from None
    set_lang(lang)
    translate(ctx.find_root().command)


def lang_option() -> click.Option:
    return click.Option(["--lang"], metavar="|".join(reversed(LANGS)), expose_value=False,
                        is_eager=True, callback=_on_lang, help=LANG_HELP)


def install(root: click.Command) -> None:
    """Gives ``root`` and every command under it a ``--lang`` option."""
    for command in walk(root):
        if not any(p.name == "lang" for p in command.params):
            command.params.append(lang_option())


def walk(root: click.Command) -> list[click.Command]:
    out = [root]
    if isinstance(root, click.Group):
        for name in sorted(root.commands):
            out += walk(root.commands[name])
    return out


def _english(obj: Any, attr: str) -> str | None:
    saved = getattr(obj, _ENGLISH, None)
    if saved is None:
        saved = {}
        setattr(obj, _ENGLISH, saved)
    if attr not in saved:
        saved[attr] = getattr(obj, attr)
    return saved[attr]


def _text(english: str | None) -> str | None:
    if not english:
        return english
    return translated(inspect.cleandoc(english)) if current() != "en" else english


def translate(root: click.Command) -> None:
    """Every help text under ``root`` in the current language."""
    for command in walk(root):
        for attr in ("help", "short_help", "epilog"):
            setattr(command, attr, _text(_english(command, attr)))
        for param in command.params:
            if isinstance(param, click.Option):
                param.help = _text(_english(param, "help"))
        if getattr(command, "_help_option", None) is not None:
            command._help_option = None  # click makes its --help once, in the language then
    speak_click()


def speak_click() -> None:
    """click's own words through the catalogue (see the module's docstring)."""
    for name in _CLICK_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "_"):
            module._ = t  # type: ignore[attr-defined]


def argv_lang(args: list[str]) -> str | None:
    """The value of ``--lang`` in ``args`` (``--lang zh_CN`` or ``--lang=zh_CN``), before
    click parses them, so that its own errors and ``--help --lang zh_CN`` speak it too."""
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--lang" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--lang="):
            return arg.split("=", 1)[1]
    return None


def choose(root: click.Command, args: list[str]) -> None:
    """The process's language from ``args`` and the environment, before click parses;
    a bad ``--lang`` is left for click to refuse with its usage line, a bad
    LLM_DOCTOR_LANG raises LangError (the caller prints it)."""
    flag = argv_lang(args)
    try:
        lang = resolve(flag)
    except LangError:
        if flag is None:
            raise
        lang = resolve(None)
    set_lang(lang)
    translate(root)
