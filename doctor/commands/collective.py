"""``llm-doctor collective``: an all-reduce across hosts, run on every host of the group.

The command runs ``probes.kernels.xnode`` in a child process (its own session, killed whole
at the hard limit plus a margin) and shows the record of probes/net/xnode.py. With
``--format json`` it prints a saved scan holding that one probe (``net.collective``): what
``llm-doctor diff`` and the fleet's readers take. It also keeps the run's JSON in
collective.json beside the daemon's state file (``keep``), where ``net.collective`` in the
daemon and in scans reads it back (probes/helpers/collective_file.py): that is how its
findings reach the daemon's state, ``npd --family net`` and ``slurm-healthcheck``. The built-in rules (and the config's, as
``scan`` loads them) judge the record: checks/net_collective.toml; the findings are in the
saved scan and under the text. Exit status: 0 the all-reduce ran, 1 it did not (a rank never
joined, a fault on the path, the hard limit), 2 the command line was wrong, 3 it cannot run
here (torch not installed, a broken config or rule file). A finding does not change it: the
status answers "did this host's part run", which srun and torchrun gather per task, and
scan's severity codes (1 warning, 2 critical) would collide with these; a gate on the
findings reads ``--format json``'s ``findings`` (a warning or critical one).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from doctor.commands.diff import state_file_of
from doctor.commands.setup import load_setup
from doctor.config import Config
from doctor.i18n import t
from doctor.model import Level, ProbeResult, ScanReport
from doctor.rules.evaluate import evaluate
from doctor.rules.loader import Rule, builtin_files, load_rules
from doctor.output import write_atomic
from doctor.seam.host import MeasurementError
from doctor.seam.live import LiveHost
from probes.helpers import collective_file
from probes.helpers.kernel_child import run_kernel
from probes.net import xnode
from probes.registry import by_name
from reports.json_report import render

PROBE_NAME = "net.collective"
CHILD_MARGIN_S = 15.0  # the kernel reports by its limit; this kills the kernel itself

EPILOG = """\b
Examples:
  two hosts, one CPU rank each (gloo), host A is 10.0.0.1:
    A$ llm-doctor collective --master 10.0.0.1:29500 --rank 0 --world 2
    B$ llm-doctor collective --master 10.0.0.1:29500 --rank 1 --world 2
  eight GPUs per host (NCCL), the second host's ranks are 8-15:
    B$ llm-doctor collective --master 10.0.0.1:29500 --rank 8 --world 16 --devices 0,1,2,3,4,5,6,7
  under torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK), one rank a process:
    A$ torchrun --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 $(which llm-doctor) collective
  under Slurm (SLURM_PROCID, SLURM_NTASKS, the master from SLURM_LAUNCH_NODE_IPADDR):
    srun -N 4 -n 4 llm-doctor collective --pairwise --format json
    srun -N 2 --ntasks-per-node 8 --gpus-per-node 8 llm-doctor collective --devices local
  the interface is GLOO_SOCKET_IFNAME (NCCL_SOCKET_IFNAME on GPUs) where set, else the one
  that routes to the master; a missing or down one is named before anything starts."""


def kernel_args(master: str | None, rank: int | None, world: int | None, cpu: int,
                devices: str | None, pairwise: bool, timeout_s: float, budget_s: float,
                join_s: float | None, nbytes: int | None) -> list[str]:
    args = ["--limit-s", f"{timeout_s:g}", "--budget-s", f"{budget_s:g}"]
    for flag, value in (("--master", master), ("--rank", rank), ("--world", world),
                        ("--devices", devices), ("--join-s", join_s), ("--bytes", nbytes)):
        if value is not None:
            args += [flag, str(value)]
    args += ["--cpu", str(cpu)] if cpu else []
    return args + (["--pairwise"] if pairwise else [])


def report_of(data: dict, took_s: float, started: float, rules: list[Rule] | None = None,
              config: Config | None = None) -> ScanReport:
    """The scan holding the one probe ``net.collective``, judged by ``rules`` (the built-in
    rules where None)."""
    rec = xnode.record(data)
    result = ProbeResult(name=PROBE_NAME, status="ok", duration_s=took_s, record=rec,
                         summary=xnode.summary(rec))
    if rules is None:
        rules = load_rules(builtin_files(), by_name())
    findings, errors = evaluate(rules, [result], config)
    return ScanReport(host=LiveHost().describe(), level=Level.FULL,
                      started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                      duration_s=round(took_s, 3), probes=[result], findings=findings,
                      rule_errors=errors)


def saved_scan(data: dict, took_s: float, started: float, rules: list[Rule] | None = None,
               config: Config | None = None) -> str:
    """A saved scan (docs/report-schema.json) holding the one probe ``net.collective`` and
    its findings."""
    return render(report_of(data, took_s, started, rules, config))


@click.command("collective", epilog=EPILOG)
@click.option("--master", metavar="HOST:PORT", default=None,
              help="Rank 0's host and a free port on it (its TCP store). Default: torchrun's "
                   "MASTER_ADDR/MASTER_PORT, else Slurm's.")
@click.option("--rank", type=click.IntRange(0, 1023), default=None,
              help="This host's first rank (with --cpu K or --devices, K ranks from it).")
@click.option("--world", type=click.IntRange(2, 1024), default=None,
              help="Ranks in the whole group, every host's.")
@click.option("--cpu", type=click.IntRange(0, 64), default=0,
              help="Ranks on this host's CPU, with gloo (default 1 when --devices is not given).")
@click.option("--devices", metavar="0,1,...", default=None,
              help="This host's GPUs (NVML indexes), one rank each, with NCCL; 'local' under "
                   "torchrun or srun: the GPU of LOCAL_RANK / SLURM_LOCALID.")
@click.option("--pairwise", is_flag=True,
              help="Time the ranks in pairs (0-1, 2-3, ..., then rotated by one) to find the "
                   "host that slows every partner.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: a saved scan holding the probe net.collective.")
@click.option("--save", metavar="FILE", default=None,
              help="Also write the saved scan (JSON) to FILE.")
@click.option("--state-file", metavar="FILE", default=None,
              help="The daemon's state file: the result is kept beside it as collective.json, "
                   "where the daemon and scans read it back (a day at most); \"\" keeps none. "
                   "Default: the config's [daemon] state_file, else "
                   "/var/lib/llm-doctor/state.json.")
@click.option("--timeout-s", type=click.FloatRange(5, 600), default=60.0, show_default=True,
              help="Hard limit: every rank of this host is killed by then.")
@click.option("--join-s", type=click.FloatRange(1, 600), default=None,
              help="How long the master waits for every rank to join (default half the limit).")
@click.option("--budget-s", type=click.FloatRange(0.1, 60), default=3.0, show_default=True,
              help="Seconds of timed all-reduces.")
@click.option("--bytes", "nbytes", type=click.IntRange(4, 8 << 30), default=None,
              help="Message size (default 16 MiB on the CPU, 256 MiB on GPUs).")
def collective(master: str | None, rank: int | None, world: int | None, cpu: int,
               devices: str | None, pairwise: bool, fmt: str, save: str | None,
               state_file: str | None, timeout_s: float, join_s: float | None, budget_s: float,
               nbytes: int | None) -> None:
    """All-reduce across hosts: run it on every host; it names a rank that never joins and
    holds busbw against the line rate of the path the ranks used."""
    started, t0 = time.time(), time.perf_counter()
    rules, config = load_setup(None)  # before the run: a broken config fails fast, exit 3
    state_file = state_file_of(state_file)  # the daemon's, as diff finds it: [daemon] read too
    args = kernel_args(master, rank, world, cpu, devices, pairwise, timeout_s, budget_s, join_s,
                       nbytes)
    try:
        data = run_kernel("xnode", *args, timeout_s=timeout_s + CHILD_MARGIN_S)
    except MeasurementError as exc:
        data = {"outcome": "failed", "failed_step": "start", "failure": str(exc)[:400]}
    if isinstance(data.get("skip"), str):
        click.echo("llm-doctor collective: " + t("cannot run here: {why}", why=data["skip"][:300]),
                   err=True)
        sys.exit(3)
    took = time.perf_counter() - t0
    report = report_of(data, took, started, rules, config)
    keep(data, report.host, state_file)
    if save or fmt == "json":
        text = render(report)
        if save:
            try:
                write_atomic(save, text)
            except OSError as exc:
                click.echo("llm-doctor collective: " + t("cannot write {path}: {why}", path=save,
                                                         why=exc.strerror or exc), err=True)
                sys.exit(2)
        if fmt == "json":
            click.echo(text, nl=False)
    if fmt == "text":
        click.echo("\n".join(xnode.describe(xnode.record(data))))
        if report.findings or report.rule_errors:
            _show_findings(report)
    sys.exit(0 if data.get("outcome") == "ok" else 1)


def keep(data: dict, host: dict[str, str], state_file: str) -> str:
    """Keep the kernel's JSON in collective.json beside the daemon's state file, atomically,
    for net.collective in the daemon and scans (probes/helpers/collective_file.py); the path
    written, or "" when none is kept. A folder this user cannot write (the daemon's is
    root's) is one line on stderr: the run itself still stands, and its exit status says so."""
    path = collective_file.beside(state_file)
    if not path or _not_first_here(data):
        return ""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, collective_file.text_of(data, time.time(), host))
    except (OSError, ValueError) as exc:  # ValueError: a number JSON cannot hold
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        click.echo("llm-doctor collective: " + t(
            "the result is not kept for the daemon: cannot write {path}: {why} (run as the "
            "daemon's user, or name its state file with --state-file; \"\" keeps none)",
            path=path, why=why), err=True)
        return ""
    return path


def _not_first_here(data: dict) -> bool:
    """Whether this process is one of several on its host and not the first (torchrun's
    LOCAL_RANK, srun's SLURM_LOCALID above 0): the first, the host's lowest rank (rank 0 on
    the master's host, which alone names the ranks that never joined), keeps the host's
    result; the others would replace it with theirs, last writer wins."""
    var = {"torchrun": "LOCAL_RANK", "slurm": "SLURM_LOCALID"}.get(data.get("rendezvous") or "")
    return var is not None and os.environ.get(var, "0").strip() not in ("", "0")


def _show_findings(report: ScanReport) -> None:
    """The findings as scan shows them, after a blank line; rule errors in one line each."""
    from rich.console import Console  # the text path only: JSON output never loads rich

    from reports.terminal import findings

    console = Console(highlight=False)
    console.print()
    console.print(findings(report))
    for message in report.rule_errors:
        click.echo(t("rule error: {message}", message=message), err=True)
