"""``llm-doctor diff BEFORE AFTER``: two states of one host compared, with a verdict.

Each side is a capture directory (scanned as ``scan --replay`` does), a saved JSON scan
(``scan --format json``), ``live`` (this host, scanned now) or ``baseline`` (the daemon's
first healthy evaluation, ``baseline.json`` beside its state file). A live side is scanned
at ``--level``, else at the other side's level (one level is what makes them comparable),
else quick. Exit codes: 0 no material change, 1 changes at warning, 2 regression likely,
3 could not compare (two different hosts, incomparable states, or a bad side, named).
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import click

from doctor.commands.emit import check_output, emit, rendered
from doctor.commands.setup import ScanCannotRun, known_rule_ids, load_setup, open_host, scan_options
from doctor.daemon import baseline
from doctor.daemon import state as daemon_state
from doctor.diff.compare import compare
from doctor.diff.model import Diff
from doctor.i18n import lazy, t
from doctor.model import Level
from doctor.scan import scan
from probes.registry import PROBES
from doctor.saved_scan import SavedScan, typed
from reports.json_report import read as read_saved
from reports.json_report import to_dict

FORMATS = ("terminal", "json", "markdown", "html")
# the renderer of each format but the terminal's (which writes to a rich console)
RENDERERS = {"json": "reports.diff_json", "markdown": "reports.diff_markdown",
             "html": "reports.diff_html"}
CANNOT_WRITE = lazy("{output}: cannot write the diff: {why}")


def _hint() -> str:
    return t("give a capture directory (llm-doctor capture DIR), a saved JSON scan "
             "(scan --format json -o FILE), 'live' or 'baseline'")


class _Side:
    def __init__(self, which: str, spec: str) -> None:
        self.which, self.spec = which, spec
        self.report: SavedScan | None = None  # typed (doctor/saved_scan.py)


def state_file_of(given: str | None) -> str:
    """--state-file, else the config's [daemon] state_file, else the daemon's default."""
    if given is not None:
        return given
    from doctor.config import find_config
    from doctor.daemon.settings import load_settings

    return load_settings(find_config(None)).state_file


def _baseline(state_file: str) -> SavedScan:
    if not state_file:
        raise ScanCannotRun(t("baseline: the config's [daemon] state_file is \"\" (the daemon keeps no "
                              "state, so no baseline); give --state-file FILE"))
    path = baseline.baseline_path(state_file)
    if not os.path.lexists(path):
        raise ScanCannotRun(t("baseline: no baseline at {path}: 'llm-doctor daemon' writes it beside its "
                              "state file ({state_file}) at its first healthy evaluation and on kill "
                              "-USR2; --state-file names another", path=path, state_file=state_file))
    found = baseline.read(path)  # old by nature: its age is no reason to refuse it
    if found.unknown:  # absent, broken or dated in the future
        raise ScanCannotRun(t("baseline: {why}", why=found.unknown))
    return typed(found.report)  # checked by the state's reader


def _scanned(replay: str | None, level: str | None) -> SavedScan:
    rules, config = load_setup(None)
    host = open_host(replay)
    options = scan_options(config, level, host=host, no_requests=replay is None)
    return typed(to_dict(scan(host, options, PROBES, rules, config)))


def _resolve(side: _Side, state_file: str, rule_ids: frozenset[str]) -> None:
    spec = side.spec
    if spec == "live":
        return
    if spec == "baseline":
        side.report = _baseline(state_file)
        return
    path = Path(spec)
    if path.is_dir():
        if not (path / "host.toml").is_file():
            raise ScanCannotRun(t("{side} {spec}: a directory without host.toml is no recorded host; "
                                  "{hint}", side=side.which, spec=spec, hint=_hint()))
        side.report = _scanned(spec, None)
    elif path.is_file():
        side.report = _saved_or_state(path, rule_ids)
    elif os.path.lexists(spec):
        raise ScanCannotRun(t("{side} {spec}: neither a regular file nor a directory; {hint}",
                              side=side.which, spec=spec, hint=_hint()))
    else:
        raise ScanCannotRun(t("{side} {spec}: no such file or directory; {hint}", side=side.which,
                              spec=spec, hint=_hint()))


def _saved_or_state(path: Path, rule_ids: frozenset[str]) -> SavedScan:
    """A saved JSON scan, or a state file of the daemon (its report is one), read as such."""
    try:
        return read_saved(path, ScanCannotRun, rule_ids)
    except ScanCannotRun as not_a_scan:
        found = daemon_state.read(path)
        if found.report and not (found.unknown and found.age_s < -daemon_state.FUTURE_SLACK_S):
            return typed(found.report)
        raise not_a_scan from None


def run_diff(before: str, after: str, level: str | None, state_file: str,
             different_hosts: bool, rule_files: tuple[str, ...] = ()) -> Diff:
    sides = _Side("BEFORE", before), _Side("AFTER", after)
    rule_ids = known_rule_ids(None, rule_files)
    for side in sides:
        _resolve(side, state_file, rule_ids)
    for side, other in (sides, sides[::-1]):
        if side.report is None:
            chosen = level or (other.report.level if other.report else "quick")
            side.report = _scanned(None, chosen)
    b, a = sides[0].report, sides[1].report
    assert b is not None and a is not None
    return compare(b, a, (before, after), different_hosts)


def _text(diff: Diff, fmt: str) -> str:
    if fmt in RENDERERS:
        return rendered(diff, fmt, RENDERERS)
    from rich.console import Console

    from reports.diff_terminal import render as to_terminal

    console = Console(record=True, width=120, file=io.StringIO())
    to_terminal(diff, console)
    return console.export_text()


@click.command()
@click.argument("before", metavar="BEFORE")
@click.argument("after", metavar="AFTER")
@click.option("--different-hosts", is_flag=True,
              help="Compare two hosts that are not one machine (refused otherwise).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal", show_default=True)
@click.option("--output", "-o", metavar="FILE", help="Write the diff to FILE instead of stdout.")
@click.option("--state-file", default=None, metavar="FILE",
              help="The daemon's state file: 'baseline' is baseline.json in its folder "
                   f"(default: the config's [daemon] state_file, else {daemon_state.DEFAULT_PATH}).")
@click.option("--level", type=click.Choice(Level.names()), default=None,
              help="The level of a 'live' side (default: the other side's, else quick).")
@click.option("--rules", "rule_files", multiple=True, metavar="FILE",
              help="A rule file the saved scans were made with (repeatable): its rule ids are known.")
def diff(before, after, different_hosts, fmt, output, state_file, level, rule_files) -> None:
    """What changed between two states of this host: BEFORE and AFTER are each a capture
    directory, a saved JSON scan, 'live' (scan now) or 'baseline' (the daemon's).

    \b
    llm-doctor diff yesterday.json live          what changed since yesterday's scan
    llm-doctor diff baseline live                since the daemon last found it healthy
    llm-doctor diff /tmp/host-a /tmp/host-b --format markdown -o diff.md
    llm-doctor diff monday.json live --format html -o diff.html

    Exit: 0 no material change, 1 changes at warning, 2 regression likely, 3 not compared.
    """
    check_output(output, CANNOT_WRITE)
    result = run_diff(before, after, level, state_file_of(state_file), different_hosts, rule_files)
    if fmt == "terminal" and output is None:
        from rich.console import Console

        from reports.diff_terminal import render as to_terminal

        to_terminal(result, Console())
    else:
        emit(_text(result, fmt), output, lazy("diff written to {output}"), CANNOT_WRITE)
    sys.exit(result.exit_code)
