"""The ``llm-doctor`` command line.

Exit codes, as monitoring plugins use them: 0 nothing at warning or above, 1 a warning,
2 a critical finding, 3 the scan itself could not run (bad flag, config, rule or recorded
host).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from doctor import __version__
from doctor.commands import lang
from doctor.commands import load as cli_load
from doctor.commands.filled import FilledCommand, FilledOption
from doctor.commands.click_words import speak_click_too
from doctor.commands.emit import CannotWrite, check_output, emit
from doctor.commands.setup import (FORMATS, ScanCannotRun, check_model_dirs, load_setup, open_host, render,
                        scan_options)
from doctor.commands.plan import plan
from doctor.commands.why import command_args as why_args
from doctor.commands.why import run as why_run
from doctor.commands.sent import announce as _announce
from doctor.commands.sent import say_sent as _say_sent
from doctor.config import ConfigError
from doctor.endpoints import Endpoint
from doctor.i18n import LangError, lazy, t, translated
from doctor.seam.host import Host
from doctor.seam.http import display_url
from doctor.seam.live import LiveHost
from doctor.model import Level, ScanOptions, ScanReport
from doctor.seam.recorded import RecordedHostError, RecordingHost
from probes.registry import PROBES, by_name
from doctor.rules.loader import RuleError, load_file

EXIT_UNKNOWN = 3
LEVELS = click.Choice(Level.names())


def _progress(console):
    """A spinner naming the running probes, on stderr, only when stderr is a terminal."""
    if not console.is_terminal:
        return None, None
    status = console.status(t("starting probes…"))
    running: list[str] = []

    def on_event(event, spec, result):
        if event == "start":
            running.append(spec.name)
        elif spec.name in running:
            running.remove(spec.name)
        status.update(t("running {probes}", probes=", ".join(running) or "…"))

    return status, on_event


CANNOT_WRITE = lazy("{output}: cannot write the report: {reason}")


def _check_output(output: str | None) -> None:
    """Fail before a scan of several seconds, not after it, when the report cannot be written."""
    check_output(output, CANNOT_WRITE)


def _run_scan(host: Host, options: ScanOptions, rules, config, show_progress: bool) -> ScanReport:
    from rich.console import Console

    from doctor.scan import scan

    status, on_event = _progress(Console(stderr=True)) if show_progress else (None, None)
    if status is None:
        return scan(host, options, PROBES, rules, config)
    with status:
        return scan(host, options, PROBES, rules, config, on_event)


def _emit(report: ScanReport, fmt: str, output: str | None, verbose: bool = False) -> None:
    if fmt == "terminal" and output is None:
        from rich.console import Console

        from reports.terminal import render as to_terminal

        to_terminal(report, Console(), verbose)
        return
    emit(render(report, fmt, verbose), output, lazy("report written to {output}"), CANNOT_WRITE)


_COSTS = [spec.cost for spec in PROBES if spec.cost is not None]


def _level_figures() -> dict[str, object]:
    """What the standard level sends at most, for --level's help."""
    return {"requests": sum(c.requests for c in _COSTS), "seconds": sum(c.seconds for c in _COSTS)}

_COMMON = [
    click.option("--level", type=LEVELS, default=None, cls=FilledOption, fill=_level_figures,
                 help="quick: read-only (about a second). standard (default): adds bounded "
                      "micro-kernels (memory bandwidth, a 1 GiB read of the weights; seconds) "
                      "and each engine's warm-up and output sampling (up to {requests} "
                      "completion requests, {seconds:g} s; see --no-requests). "
                      "full: longer measurements (reads up to 16 GiB of the weights)."),
    click.option("--model-dir", "model_dirs", multiple=True, metavar="DIR",
                 help="Where the model weights live (repeatable). Engines' own --model paths "
                      "are found from their command lines."),
    click.option("--endpoint", "endpoints", multiple=True, metavar="URL", type=cli_load.ENDPOINT,
                 help="A serving engine to read (repeatable), when it runs elsewhere or behind a "
                      "proxy: http://host:8000; a key as http://:KEY@host:8000 is sent, to that "
                      "host and port only, and never shown."),
    click.option("--config", "config_path", metavar="FILE",
                 help="Threshold overrides. Default: ./llm-doctor.toml, else "
                      "~/.config/llm-doctor/config.toml."),
    click.option("--rules", "rule_files", multiple=True, metavar="FILE",
                 help="An extra rule file to load beside the built-in checks (repeatable)."),
    click.option("--format", "fmt", type=click.Choice(list(FORMATS)),
                 default="terminal", show_default=True, help="How to print the report."),
    click.option("--output", "-o", metavar="FILE",
                 help="Write the report to FILE instead of standard output: a new file, or a "
                      "regular file replaced whole (atomically). '-' and /dev/stdout write to "
                      "standard output; a terminal, /dev/null or a FIFO with a reader is "
                      "written through. A directory, a symbolic link or any other device is "
                      "refused (exit 3) and left as it was."),
    click.option("--no-requests", is_flag=True,
                 help="Send no request to any engine: engine.warmup and engine.output, which "
                      "send completions, are skipped with the reason; the engines' pages "
                      "(/metrics, /v1/models, /health, /slots) are still read. As [scan] "
                      "requests = false in the config file."),
    click.option("--requests-to", "requests_to", type=click.Choice(["named", "all"]),
                 default=None,
                 help="Which engines the warm-up and output requests go to. named (default): "
                      "only the --endpoint URLs when any are given; the engines discovered "
                      "beside them are read (/metrics, /v1/models), never sent completions. "
                      "With no --endpoint, every engine found on this host. all: the named "
                      "ones and every engine discovered. As [scan] requests_to in the config "
                      "file."),
    click.option("--busy-ok", is_flag=True,
                 help="Send the warm-up and output requests even to an engine that is serving "
                      "requests now. By default such an engine is not sent to (its users "
                      "would wait behind them): its own count of requests in flight "
                      "(/metrics, llama.cpp /slots) is read first."),
    click.option("--no-progress", is_flag=True, help="No spinner on stderr."),
    click.option("--verbose", "-v", is_flag=True,
                 help="Every probe on its own row; by default probes of one family skipped "
                      "for one reason (no NVIDIA driver, no engine) share a row."),
]


def _common(fn):
    for option in reversed(_COMMON):
        fn = option(fn)
    return fn


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="llm-doctor")
def cli() -> None:
    """Diagnose an LLM inference host: measure, find causes, say what to do.

    \b
    llm-doctor scan                       scan this host (level standard)
    llm-doctor scan --level quick         read-only, about a second
    llm-doctor scan --model-dir /models   include where the weights live
    llm-doctor scan --format json -o r.json
    llm-doctor capture DIR                record this host for someone else
    llm-doctor scan --replay DIR          scan a recorded host
    llm-doctor probes | rules | playbook CAUSE

    Exit codes: 0 ok, 1 warning, 2 critical, 3 the scan could not run.
    """


def _scan_costs() -> dict[str, object]:
    """What scan's probes send, as they declare it (their COST), for scan's help."""
    return {"costs": "\n".join(f"  {spec.name:<14} {spec.cost.text()}" for spec in PROBES
                               if spec.cost is not None)}


# {costs} is filled where the help is shown (doctor/commands/filled.py), after the lookup.
SCAN_HELP = """Scan this host (or a recorded one) and report findings with remediations.

Each finding names its cause id, the troubleshooting-table rows it explains, the
evidence measured, the first step to take and a playbook. Run it as the user that
runs the engine: with no engine running, this shell's limits are what it would get.

\b
What a scan sends each engine it finds or is given (levels standard and full):
{costs}

Each of these probes prints its line on stderr before its first request, and what it
sent after the scan (the report says it too). An engine serving requests is not sent to
(--busy-ok to measure it anyway). --no-requests, or --level quick, sends no request
to an engine and still reads its pages (/metrics, /v1/models, /health, /slots).

\b
Exit codes: 0 nothing at warning or above, 1 warning, 2 critical,
            3 the scan could not run (the message says which file and line).
"""


@cli.command(cls=FilledCommand, fill=_scan_costs, help=SCAN_HELP)
@_common
@click.option("--replay", metavar="DIR", help="Scan a host recorded by 'llm-doctor capture DIR' "
              "instead of this one (docs/recorded-host.md).")
@click.option("--nccl-log", "nccl_log", metavar="PATH",
              help="A log with NCCL's own lines, from an engine or test started with "
                   "NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET shows the network part): "
                   "net.nccl_log says which network and transports NCCL chose, whether "
                   "GPUDirect RDMA was used and why init failed. Its first MiB and last 2 MiB "
                   "are read; a FIFO or device is not. Without it, each engine's "
                   "stdout/stderr is read where it is sent to a file.")
@click.option("--hccl-log", "hccl_log", metavar="PATH",
              help="A saved log with HCCL's lines on an Ascend host: an engine's output or a "
                   "plog file (~/ascend/log/debug/plog/plog-*.log): npu.hccl_log says whether "
                   "an NPU port was down or HCCL timed out, and after how long. Its first MiB "
                   "and last 2 MiB are read; a FIFO or device is not. Without it, each "
                   "engine's stdout/stderr, journal and newest plog files are read.")
@click.option("--symptom", metavar="SYMPTOM",
              help="Answer one complaint instead: as 'llm-doctor why SYMPTOM' (docs/why.md).")
def scan(level, model_dirs, endpoints, config_path, rule_files, fmt, output, no_requests,
         requests_to, busy_ok, no_progress, verbose, replay, nccl_log, hccl_log, symptom) -> None:
    if symptom is not None:
        why_run(symptom, fmt, output, replay, level, config_path, rule_files,
                **why_args(model_dirs, endpoints, no_requests, requests_to, busy_ok))
    _check_output(output)
    rules, config = load_setup(config_path, rule_files)
    host: Host = open_host(replay)  # a recording's --model-dir and level, unless named here
    options = scan_options(config, level, model_dirs, tuple(endpoints), host=host,
                           no_requests=no_requests, busy_ok=busy_ok, announce=_announce,
                           requests_to=requests_to)
    if nccl_log:
        options = dataclasses.replace(options, nccl_log=str(Path(nccl_log).absolute()))
    if hccl_log:
        options = dataclasses.replace(options, hccl_log=str(Path(hccl_log).absolute()))
    if not replay:
        check_model_dirs(options)
    report = _run_scan(host, options, rules, config, not no_progress)
    _say_sent(report, host)
    _emit(report, fmt, output, verbose)
    sys.exit(report.exit_code())


WHY_HELP = """Why SYMPTOM: every cause the rules tie to it, confirmed, ruled out or not checked.

SYMPTOM is a symptom row (slow-first-token), its words in English or Chinese
(首个token延迟过高), or a plain word (slow, oom, queue, ttft); a word that may mean
several rows lists them (exit 3). Runs only the probes those causes need, at the level
they need (standard at most unless --level full), and says first what it will send to
an engine. Each cause: confirmed (finding, evidence, fix), ruled out (the values and the
condition they fail), or not checked (why, and the command that would check it).

\b
llm-doctor why slowdown
llm-doctor why 首个token延迟过高 --no-requests
llm-doctor why queue --replay DIR --format markdown

\b
Exit codes: 0 nothing at warning or above, 1 warning, 2 critical,
            3 the symptom or the run is wrong (the message says which).
"""


@cli.command(help=WHY_HELP)
@click.argument("symptom", metavar="SYMPTOM")
@_common
@click.option("--replay", metavar="DIR", help="Scan a host recorded by 'llm-doctor capture DIR' "
              "instead of this one (docs/recorded-host.md).")
def why(symptom, level, model_dirs, endpoints, config_path, rule_files, fmt, output, no_requests,
        requests_to, busy_ok, no_progress, verbose, replay) -> None:
    why_run(symptom, fmt, output, replay, level, config_path, rule_files,
            **why_args(model_dirs, endpoints, no_requests, requests_to, busy_ok))


@cli.command()
@click.argument("directory", metavar="DIR")
@_common
@click.option("--force", is_flag=True, help="Write into DIR even if it is not empty.")
def capture(directory, level, model_dirs, endpoints, config_path, rule_files, fmt, output,
            no_requests, requests_to, busy_ok, no_progress, verbose, force) -> None:
    """Record everything the probes read on this host into DIR, and scan it.

    DIR can be sent to someone else, edited by hand to plant a fault, and scanned with
    'llm-doctor scan --replay DIR' (format: docs/recorded-host.md). Engines' command
    lines are kept with API keys and tokens masked, other processes' are cut to their
    program name; the rest of /proc and /sys that the probes read is kept as it is.
    """
    root = Path(directory)
    if root.exists() and any(root.iterdir()) and not force:
        raise ScanCannotRun(t("{root} is not empty; choose a new directory or pass --force",
                              root=root))
    _check_output(output)
    rules, config = load_setup(config_path, rule_files)
    options = scan_options(config, level, model_dirs, tuple(endpoints), no_requests=no_requests,
                           busy_ok=busy_ok, announce=_announce, requests_to=requests_to)
    check_model_dirs(options)
    recording = RecordingHost(LiveHost(), root)
    report = _run_scan(recording, options, rules, config, not no_progress)
    _say_sent(report, recording)
    recording.save({"level": options.level.name.lower(), "llm_doctor_version": __version__,
                    "model_dirs": list(options.model_dirs),
                    # without their keys: a replay answers from the recording, keyed the same
                    "endpoints": [u.base_url if isinstance(u, Endpoint) else display_url(u)
                                  for u in options.endpoints],
                    # a replay repeats them: probes the capture did not run (--no-requests)
                    # have nothing recorded to answer from, and would fail
                    "requests": options.requests, "busy_ok": options.busy_ok})
    _emit(report, fmt, output, verbose)
    click.echo(t("recorded host written to {root}; replay: llm-doctor scan --replay {root}",
                 root=root), err=True)
    sys.exit(report.exit_code())


@cli.command()
@click.option("--fields", is_flag=True,
              help="Also list each probe's record fields, the names a rule's expressions use "
                   "(host.limits.processes[].nofile_soft is item.nofile_soft under each).")
def probes(fields) -> None:
    """List the probes: name, level, timeout, what each measures and reads."""
    from doctor.rules.schema import record_fields

    for spec in PROBES:
        click.echo(t("{name}  (level {level}, timeout {timeout:g} s)",
                     name=click.style(spec.name, bold=True), level=spec.level.name.lower(),
                     timeout=spec.timeout_s))
        click.echo(f"    {translated(spec.description)}")
        click.echo("    " + t("reads: {reads}", reads=translated(spec.reads)))
        if spec.cost is not None:
            click.echo("    " + t("sends each engine: {cost} (--no-requests skips it)",
                                  cost=spec.cost.text()))
        if fields:
            for name, type_name in record_fields(spec):
                click.echo(f"      {spec.name}.{name}: {type_name}")


@cli.group(invoke_without_command=True)
@click.option("--config", "config_path", metavar="FILE", help="Show thresholds from this config.")
@click.pass_context
def rules(ctx, config_path) -> None:
    """List the rules (id, severity, cause, symptom rows); 'rules check FILE' validates one."""
    if ctx.invoked_subcommand:
        return
    loaded, config = load_setup(config_path, ())
    for rule in loaded:
        params = {**rule.params, **{k: v for k, v in config.rules.get(rule.id, {}).items()
                                    if k in rule.params}}
        click.echo(t("{rule}  [{severity}]  cause {cause}  ({file})",
                     rule=click.style(rule.id, bold=True), severity=rule.severity.word,
                     cause=rule.cause, file=rule.source.rsplit("/", 1)[-1]))
        click.echo("    " + t("rows: {rows}", rows=", ".join(rule.symptoms)))
        if params:
            click.echo("    " + t("params: {params}",
                                  params=", ".join(f"{k}={v}" for k, v in params.items())))


@rules.command("check")
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
def rules_check(files) -> None:
    """Validate rule files: fields, cause ids, symptom rows, expressions and field names."""
    for name in files:
        loaded = load_file(Path(name), by_name())
        if not loaded:
            raise RuleError(t("{file}: holds no [[rule]] tables (format: 'llm-doctor rules --help')",
                              file=name))
        more = t(", … and {count} more", count=len(loaded) - 20) if len(loaded) > 20 else ""
        click.echo(t("{file}: {count} rule(s) ok: {ids}{more}", file=name, count=len(loaded),
                     ids=", ".join(r.id for r in loaded[:20]), more=more))


@cli.command()
@click.argument("cause")
def playbook(cause) -> None:
    """Show the playbook for a cause id (what it means, confirm, fix, verify)."""
    from rich.console import Console
    from rich.markdown import Markdown

    from doctor.vocabulary import CAUSES, suggest
    from playbooks import text_of

    text = text_of(cause)  # a known cause id only: never a path built from the argument
    if text is None:
        known = [c for c in CAUSES if text_of(c) is not None]
        hint = suggest(cause, known) or t("; 'llm-doctor rules' shows each rule's cause id, "
                                          "playbooks/README.md lists them all")
        raise ScanCannotRun(t("no playbook for '{cause}'{hint}", cause=cause, hint=hint))
    Console().print(Markdown(text))


cli.add_command(plan)
cli.add_command(cli_load.warmup)
cli.add_command(cli_load.load)
from doctor.commands.daemon import daemon, report, rules_export  # noqa: E402 (the daemon's commands)

cli.add_command(daemon)
cli.add_command(report)
rules.add_command(rules_export)
from doctor.commands.diff import diff  # noqa: E402 (what changed: docs/diff.md)
from doctor.commands.fix import fix  # noqa: E402 (fix plans: docs/fix.md)
from doctor.commands.npd import npd  # noqa: E402 (node-problem-detector's plugin)
from doctor.commands.slurm import slurm_healthcheck  # noqa: E402 (docs/slurm.md)

cli.add_command(diff)
cli.add_command(fix)
cli.add_command(npd)
cli.add_command(slurm_healthcheck)
from doctor.commands.collective import collective  # noqa: E402 (across hosts: probes/net/xnode.py)

cli.add_command(collective)
lang.install(cli)  # --lang on every command (doctor/commands/lang.py)
speak_click_too()  # click's plurals, and help measured in columns (doctor/commands/click_words.py)


def main() -> None:
    """Entry point: maps every expected failure to one clear line and exit code 3."""
    try:
        lang.choose(cli, sys.argv[1:])
    except LangError as exc:
        click.echo(f"llm-doctor: {exc}", err=True)
        sys.exit(EXIT_UNKNOWN)
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo(t("aborted"), err=True)
        sys.exit(EXIT_UNKNOWN)
    except click.ClickException as exc:  # usage errors: exit 3, not click's 2 (= critical)
        exc.show()
        sys.exit(EXIT_UNKNOWN)
    except (RuleError, ConfigError, RecordedHostError, ScanCannotRun, CannotWrite) as exc:
        from doctor.redact import safe_display

        click.echo(f"llm-doctor: {safe_display(str(exc))}", err=True)
        sys.exit(EXIT_UNKNOWN)
    except OSError as exc:  # the output file or capture directory cannot be written
        click.echo(f"llm-doctor: {exc.filename or ''}: {exc.strerror}", err=True)
        sys.exit(EXIT_UNKNOWN)
    except KeyboardInterrupt:
        click.echo(t("interrupted"), err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
