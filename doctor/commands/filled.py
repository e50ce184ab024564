"""Help texts with figures that are known only at run time (what the probes send), kept as
literal templates so that the catalogue finds them in every language.

A command's or option's ``help`` stays the English template with named placeholders
(``{costs}``, ``{requests}``); doctor/commands/lang.py swaps it for the catalogue's template as
it does any help, and the figures are filled in only where click shows the help.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import click

Fill = Callable[[], Mapping[str, object]]


class FilledCommand(click.Command):
    """A command whose help is a template, filled by ``fill`` when the help is shown."""

    def __init__(self, *args: Any, fill: Fill, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fill = fill

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        template = self.help
        self.help = (template or "").format_map(self.fill())
        try:
            super().format_help_text(ctx, formatter)
        finally:
            self.help = template


class FilledOption(click.Option):
    """An option whose help is a template, filled by ``fill`` when the help is shown."""

    def __init__(self, *args: Any, fill: Fill, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fill = fill

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        template = self.help
        self.help = (template or "").format_map(self.fill())
        try:
            return super().get_help_record(ctx)
        finally:
            self.help = template
