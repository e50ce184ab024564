"""``llm-doctor npd``: node-problem-detector's custom plugin, and the config that runs it.

As a plugin (``--family``) it reads the daemon's state file and answers within NPD's time
limit: exit 0 OK, 1 a problem, 2 unknown, and one line of at most 80 bytes on stdout
(doctor/fleet/npd.py). Whatever goes wrong (a bad flag, an unreadable state, a file that
cannot be written, even a bug) is exit 2 with its line on stdout, so that NPD shows why in the
condition's message: a Python traceback would exit 1, which NPD reads as a problem, and a node
condition may cordon the node.

This module imports nothing of the probes, the rules' loader or the renderers' heavy parts:
``llm-doctor npd`` is dispatched here before the rest of the command line loads
(doctor/commands/entry.py).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, NoReturn

import click

from doctor.commands import lang
from doctor.commands.click_words import speak_click_too
from doctor.commands.emit import CannotWrite, emit
from doctor.daemon.state import DEFAULT_PATH, FAMILIES
from doctor.fleet import npd as protocol
from doctor.i18n import LangError, lazy, t
from doctor.redact import redact_text

EXIT_UNKNOWN = 2  # NPD reads every code but 0 and 1 as Unknown; 2 is its own Unknown
# under the 3 s rule timeout that 'npd --config' writes, with the start-up and the rules' load
FALLBACK_BUDGET_S = 2.0


def _unknown(why: str) -> NoReturn:
    """Unknown: the cut line on stdout (NPD's condition message), the whole on stderr (NPD
    logs a plugin's stderr; a person at a terminal reads it), masked on both: a flag's
    value may be a secret pasted in the wrong place."""
    click.echo(f"llm-doctor npd: {redact_text(why)}", err=True)
    _say(*protocol.unknown(why))


def _say(code: int, line: str) -> NoReturn:
    """The plugin's answer: its line on stdout and its code (sys.exit, which click passes
    through both as ``llm-doctor npd`` alone and under the whole command line)."""
    click.echo(line)
    sys.exit(code)


class _PluginCommand(click.Command):
    """A usage error (a bad flag or value) is the plugin's unknown, exit 2 with its line on
    stdout, not click's message on stderr (under NPD, stdout is the condition's message), and
    so is any failure inside."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            _unknown(t("usage: {message} (llm-doctor npd --help)", message=exc.format_message()))

    def invoke(self, ctx: click.Context) -> Any:
        """Any failure inside is unknown too, under either entry: a Python traceback would exit
        1, which NPD reads as a problem (and a problem may cordon the node)."""
        try:
            return super().invoke(ctx)
        except click.exceptions.Exit:
            raise
        except (click.exceptions.Abort, KeyboardInterrupt):
            _unknown(t("interrupted"))
        except Exception as exc:
            _unknown(t("llm-doctor npd failed: {error}", error=f"{type(exc).__name__}: {exc}"))


@click.command(cls=_PluginCommand)
@click.option("--family", type=click.Choice(FAMILIES),
              help="Which condition to answer for: gpu, engine or host (the family of each "
                   "rule is that of the first probe it reads).")
@click.option("--state-file", metavar="FILE", default=DEFAULT_PATH, show_default=True,
              help="The daemon's state file (its --state-file / daemon.state_file).")
@click.option("--min-severity", type=click.Choice(list(protocol.MIN_SEVERITIES)),
              default=protocol.DEFAULT_MIN_SEVERITY.label, show_default=True,
              help="The least severe finding that makes the condition True. A node condition "
                   "may cordon the node, so warnings are left to the exporter by default.")
@click.option("--fallback-quick", is_flag=True,
              help="With no state file at all (no daemon on this node), run a quick-level "
                   "scan here and answer from it, within --fallback-budget.")
@click.option("--fallback-budget", type=click.FloatRange(min=0.001, max=60.0),
              default=FALLBACK_BUDGET_S, show_default=True, metavar="SECONDS",
              help="The quick scan's time; past it the answer is unknown. Keep it under the "
                   "rule's timeout in NPD's config less the start-up (a few hundred ms).")
@click.option("--config", "write_config", is_flag=True,
              help="Write node-problem-detector's custom plugin monitor JSON instead (one "
                   "permanent rule per family) and exit.")
@click.option("--output", "-o", metavar="FILE",
              help="With --config: write the JSON to FILE (atomically) instead of stdout.")
@click.option("--binary", metavar="PATH", default=protocol.BINARY, show_default=True,
              help="With --config: the llm-doctor that NPD execs, as a path inside NPD's "
                   "container (NPD refuses to start when it does not exist).")
def npd(family, state_file, min_severity, fallback_quick, fallback_budget, write_config, output,
        binary) -> None:
    """Answer node-problem-detector for one family, from the daemon's state file.

    \b
    llm-doctor npd --family gpu            exit 0 ok, 1 a problem, 2 unknown
    llm-doctor npd --config -o llm-doctor-monitor.json

    Prints one line (at most 80 bytes) that starts with the finding's rule id, or 'ok' or
    'unknown'. A state that is absent, broken or older than three of the daemon's intervals
    is unknown (2), never OK. See docs/kubernetes.md.
    """
    severity = protocol.MIN_SEVERITIES[min_severity]
    if write_config:
        _write_config(protocol.plugin_config(binary, state_file, severity), output)
        return
    if family is None:
        _unknown(t("usage: --family gpu|engine|host is needed (or --config to write NPD's config)"))
    if output:
        _unknown(t("usage: -o/--output goes with --config only"))
    if fallback_quick and not os.path.lexists(state_file):
        _say(*_quick_answer(family, severity, fallback_budget, state_file))
    _say(*protocol.answer(state_file, family, severity))


def _quick_answer(family: str, severity: Any, budget_s: float,
                  state_file: str) -> tuple[int, str]:
    """The answer from a quick-level scan of this node, run here; unknown when it does not
    finish within ``budget_s``, counted from here (the rules' load included). Only this path
    loads the probes and the rules."""
    clock = time.monotonic()
    from doctor.commands.setup import load_setup, open_host, scan_options
    from doctor.config import ConfigError
    from doctor.daemon.state import State, to_state
    from doctor.rules.loader import RuleError
    from doctor.scan import scan
    from probes.registry import PROBES

    try:
        rules, config = load_setup(None)
        options = scan_options(config, "quick", no_requests=True)
    except (ConfigError, RuleError) as exc:
        return protocol.unknown(t("no state file, and no quick scan: {error}", error=exc))
    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(scan(open_host(None), options, PROBES, rules, config))
        except Exception as exc:  # said as the answer, on the main thread
            failed.append(exc)

    started = time.time()
    worker = threading.Thread(target=run, name="npd quick scan", daemon=True)
    worker.start()
    worker.join(max(0.0, budget_s - (time.monotonic() - clock)))
    if failed:
        return protocol.unknown(t("no state file, and the quick scan failed: {error}",
                                  error=f"{type(failed[0]).__name__}: {failed[0]}"))
    if not done:
        # a probe still running holds nothing we need: it is left on its daemon thread
        return protocol.unknown(t("no state file at {file}, and the quick scan took longer than "
                                  "{budget:g}s", file=os.path.basename(state_file),
                                  budget=budget_s))
    data = to_state(done[0], rules, budget_s, started, 1)
    quick = State("quick scan", "", started, budget_s, time.time() - started, data["families"],
                  data["report"])
    return protocol.judged(quick, family, severity)


def _write_config(config: dict[str, Any], output: str | None) -> None:
    try:
        emit(json.dumps(config, indent=2) + "\n", output,
             lazy("node-problem-detector config written to {output}"),
             lazy("{output}: cannot write the config: {reason}"))
    except CannotWrite as exc:
        _unknown(str(exc))


def main(argv: list[str] | None = None) -> None:
    """``llm-doctor npd ARGS`` alone: exit 0, 1 or 2, never a traceback. The language is
    chosen as the whole command line chooses it (--lang, LLM_DOCTOR_LANG, the locale)."""
    args = argv if argv is not None else sys.argv[1:]
    try:
        lang.choose(npd, args)
    except LangError as exc:
        _unknown(str(exc))
    try:
        code = npd.main(args, prog_name="llm-doctor npd",
                        standalone_mode=False)  # --help returns 0 here; answers sys.exit
        sys.exit(code if isinstance(code, int) else 0)
    except click.ClickException as exc:
        _unknown(exc.format_message())
    except click.exceptions.Abort:
        _unknown(t("interrupted"))
    except KeyboardInterrupt:
        _unknown(t("interrupted"))


lang.install(npd)  # --lang here too: this module runs alone (doctor/commands/entry.py)
speak_click_too()

