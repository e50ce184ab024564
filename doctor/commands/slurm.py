"""``llm-doctor slurm-healthcheck``: Slurm's HealthCheckProgram and Prolog (docs/slurm.md).

It reads the daemon's state file, never probes, and acts through scontrol:

    healthcheck  drains the node at a critical finding, resumes it once the finding has cleared
                 (only a node whose reason is ours), leaves alone a node someone else holds.
                 Exit 0 ok, 1 a critical finding, 2 unknown (state absent, broken or stale:
                 nothing changed), 3 scontrol could not be run or failed. slurmd does not act
                 on the exit status; it logs a non-zero one with the program's stdout (not its
                 stderr, Slurm 22.05), so every line goes to stdout in this mode.
                 With --dry-run the scontrol lines go to stdout, the rest to stderr; where
                 Slurm is not installed (no scontrol) it still says what it would do, the
                 node's state unread, and exits with the verdict's code.
    prolog       at a critical finding drains the node with our reason (so that the health
                 check resumes it later) and exits 1: slurmd then requeues the job. Anything
                 else exits 0 without calling scontrol: an unknown state never fails a job.
"""

from __future__ import annotations

import os
import re
import socket
import sys

import click

from doctor.commands import lang
from doctor.commands.click_words import speak_click_too
from doctor.daemon import state
from doctor.redact import safe_display
from doctor.fleet.slurm import SlurmError, decide, drain_update, parse_node, resume_update, shown
from doctor.fleet.slurm_scontrol import Scontrol, ScontrolMissing
from doctor.fleet.verdict import Status, Verdict, judge
from doctor.i18n import LangError, t
from doctor.model import Severity

EXIT_ERROR = 3
WIDTH = 200  # a line in slurmd's log, not a terminal
# A node name goes into NodeName=<name> as one argument: no blank, '=' or ',' (a node list).
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
PLACEHOLDER = "<node>"  # a dry run's node whose name could not be determined


def _say(line: str, err: bool = False) -> None:
    """One line, its control characters shown as escapes: titles come from the host."""
    click.echo(safe_display(line), err=err)


def node_name(given: str | None, dry_run: bool = False) -> tuple[str, str]:
    """(name, "") from --node, else slurmd's SLURMD_NODENAME (set for HealthCheckProgram and
    Prolog), else the short host name (slurmd's default NodeName). A dry run whose host name
    is no node name gets (PLACEHOLDER, why) instead of the error: it can still say what it
    would do."""
    name = given or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if _NODE_NAME.fullmatch(name):
        return name, ""
    where = "--node" if given else ("$SLURMD_NODENAME" if os.environ.get("SLURMD_NODENAME")
                                    else t("the host name"))
    problem = t("{where} {name} is not a Slurm node name (letters, digits, '.', '-', '_'): "
                "pass the node's NodeName as --node NAME", where=where, name=repr(name))
    if dry_run and not given and not os.environ.get("SLURMD_NODENAME"):
        return PLACEHOLDER, problem
    raise SlurmError(problem)


@click.command("slurm-healthcheck")
@click.option("--state-file", metavar="FILE", default=state.DEFAULT_PATH, show_default=True,
              help="The daemon's state file (its --state-file).")
@click.option("--node", metavar="NAME", default=None,
              help="The node's NodeName (default $SLURMD_NODENAME, else the short host name).")
@click.option("--dry-run", is_flag=True,
              help="Print the scontrol update line(s) instead of running them (the node is "
                   "still read).")
@click.option("--mode", type=click.Choice(["healthcheck", "prolog"]), default="healthcheck",
              show_default=True,
              help="healthcheck for HealthCheckProgram; prolog for Prolog (exits 1 at a "
                   "critical finding, so that Slurm drains the node and requeues the job).")
@click.option("--scontrol", "scontrol_path", metavar="PATH", default="scontrol",
              show_default=True, help="The scontrol to run.")
def slurm_healthcheck(state_file: str, node: str | None, dry_run: bool, mode: str,
                      scontrol_path: str) -> None:
    """Drain this Slurm node at a critical finding, resume it when cleared (docs/slurm.md)."""
    # slurmd logs a health check's stdout only: there, what went wrong goes to stdout too.
    to_stderr = dry_run or mode == "prolog"
    try:
        name, unnamed = node_name(node, dry_run)
    except SlurmError as exc:
        _say(f"llm-doctor: {exc}", to_stderr)
        sys.exit(EXIT_ERROR)
    verdict = judge(state.read(state_file), None, Severity.CRITICAL, width=WIDTH)
    if verdict.status is not Status.PROBLEM and (mode == "prolog"
                                                 or verdict.status is Status.UNKNOWN):
        # Nothing to change: an unknown state drains nothing and resumes nothing, and a
        # prolog has no business with a healthy node.
        _say("llm-doctor: " + t("{node} unchanged: {verdict}", node=name, verdict=verdict.line),
             to_stderr and verdict.status is Status.UNKNOWN)
        sys.exit(int(verdict.status) if mode == "healthcheck" else 0)
    try:
        _act(verdict, name, dry_run, scontrol_path, unnamed)
    except SlurmError as exc:
        _say(f"llm-doctor: {name}: {exc}", to_stderr)
        if mode == "prolog":  # the finding stands: the job must not run here
            sys.exit(1)
        sys.exit(EXIT_ERROR)
    sys.exit(1 if verdict.status is Status.PROBLEM else 0)


def _act(verdict: Verdict, name: str, dry_run: bool, scontrol_path: str,
         unnamed: str = "") -> None:
    unread = [unnamed] if unnamed else []  # a dry run only: no node to read by a placeholder
    try:
        scontrol = Scontrol(scontrol_path)
    except ScontrolMissing as exc:
        if not dry_run:
            raise
        unread.insert(0, str(exc))
    if unread:
        _unread(verdict, name, scontrol_path, "; ".join(unread))
        return
    action = decide(verdict, parse_node(scontrol.show_node(name), name))
    if action.update and dry_run:
        _say(shown(scontrol_path, action.update))
        _say("llm-doctor: " + t("dry run, not done: {says}", says=action.says), True)
        return
    if action.update:
        scontrol.run(*action.update)
    _say(f"llm-doctor: {action.says}", dry_run)  # dry run: stdout is the lines only


def _unread(verdict: Verdict, name: str, scontrol_path: str, why: str) -> None:
    """A dry run that could not read the node (no scontrol, or no name for it): the line it
    would run on stdout (a drain at a problem), and on stderr why the node was not read, the
    condition the line depends on and the verdict."""
    _say("llm-doctor: " + t("dry run: {why}; the node's state was not read", why=why), True)
    if name == PLACEHOLDER:
        _say("llm-doctor: " + t("{placeholder} stands for the node's name, which could not be "
                                "determined", placeholder=PLACEHOLDER), True)
    if verdict.status is Status.PROBLEM:
        assert verdict.finding is not None  # a PROBLEM names its finding
        _say(shown(scontrol_path, drain_update(name, verdict.finding)))
        says = t("{node} would be drained unless another party holds it or llm-doctor already "
                 "drained it for this rule: {verdict}", node=name, verdict=verdict.line)
    else:
        says = t("{node} would be resumed only if llm-doctor had drained it ({command}), else "
                 "left as it is: {verdict}", node=name,
                 command=shown(scontrol_path, resume_update(name)), verdict=verdict.line)
    _say("llm-doctor: " + t("dry run, not done: {says}", says=says), True)


def main(args: list[str] | None = None) -> None:
    """``python -m doctor.commands.slurm`` (and ``llm-doctor slurm-healthcheck``, which
    doctor/commands/entry.py sends here): the same command without the whole CLI's imports
    (every probe and the daemon, ~0.6 s of a health check's time); usage errors exit 3 as
    there. ``args``: the command's arguments (default: the process's). The language is
    chosen as the whole command line chooses it (--lang, LLM_DOCTOR_LANG, the locale)."""
    args = list(args if args is not None else sys.argv[1:])
    try:
        lang.choose(slurm_healthcheck, args)
    except LangError as exc:
        click.echo(f"llm-doctor: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    try:
        slurm_healthcheck.main(args=args, prog_name="llm-doctor slurm-healthcheck",
                               standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_ERROR)
    except click.exceptions.Abort:
        click.echo(t("aborted"), err=True)
        sys.exit(EXIT_ERROR)


lang.install(slurm_healthcheck)  # --lang here too: this module runs alone (entry.py)
speak_click_too()


if __name__ == "__main__":
    main()
