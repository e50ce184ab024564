"""What a command made, to ``-o FILE`` or standard output: one way for every command.

``scan``, ``capture``, ``diff``, ``fix``, ``load``, ``report``, ``rules export`` and ``npd
--config`` each check the file before the work where the work is long (a scan should not
run for a report it cannot write), then write it atomically with one line on stderr saying
where (none when the file is standard output or error itself), or echo the text. The
messages stay the callers': ``lazy`` templates with ``{output}`` and ``{why}`` (or
``{reason}``), each with its Chinese entry. Light on purpose: ``npd`` imports it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

from doctor.i18n import translated
from doctor.output import check_target, write_atomic

# -o naming the stream the text would go to anyway: no "written to" line for it
_STREAMS = ("-", "/dev/stdout", "/dev/stderr")


def rendered(value: Any, fmt: str, renderers: Mapping[str, str]) -> str:
    """``value`` in ``fmt``: the ``render(value)`` of the module ``renderers[fmt]`` names,
    imported only now, so that a command loads the one renderer it writes with (a JSON
    report does not import jinja). The names are the caller's constants, never input."""
    return str(importlib.import_module(renderers[fmt]).render(value))


class CannotWrite(Exception):
    """The output cannot be written; the message names the file and says why."""


def _cannot(template: str, output: str, exc: OSError) -> CannotWrite:
    why = exc.strerror or str(exc)
    return CannotWrite(translated(template).format(output=output, why=why, reason=why))


def check_output(output: str | None, cannot: str) -> None:
    """Raise CannotWrite (``cannot``) now if ``output`` cannot be written; nothing when
    the text goes to standard output."""
    if output:
        try:
            check_target(output)
        except OSError as exc:
            raise _cannot(cannot, output, exc) from None


def emit(text: str, output: str | None, written: str, cannot: str | None = None) -> None:
    """``text`` to ``output`` (then ``written``, with ``{output}``, on stderr) or, without
    one, to standard output as it is. A write that fails raises CannotWrite (``cannot``)
    or, without ``cannot``, the OSError, which the command line says as file: reason."""
    if not output:
        click.echo(text, nl=False)
        return
    try:
        write_atomic(output, text)
    except OSError as exc:
        if cannot is None:
            raise
        raise _cannot(cannot, output, exc) from None
    if output not in _STREAMS:
        click.echo(translated(written).format(output=output), err=True)
