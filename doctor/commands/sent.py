"""What a command says on stderr about the requests it sends engines: a probe's plan line
before it sends (``announce``), and after the run what each probe sent (``say_sent``).
Shared by ``scan``, ``capture`` and ``why``."""

from __future__ import annotations

import click

from doctor.i18n import t
from doctor.model import ScanReport
from doctor.seam.host import Host
from probes.registry import by_name


def announce(line: str) -> None:
    """A probe's plan line, before it sends: on stderr, above the spinner."""
    click.echo(line, err=True)


def say_sent(report: ScanReport, host: Host) -> None:
    """What the probes that send requests sent, on stderr once the scan is done (a replay
    sent nothing: its records say what the capture sent)."""
    if host.kind == "recorded":
        return
    specs = by_name()
    costly = [r for r in report.probes if r.name in specs and specs[r.name].cost is not None]
    sent = [(r.name, s) for r in costly if r.status == "ok"
            for s in getattr(r.record, "sent", tuple)()]
    for name, item in sent:
        click.echo(f"{name} {item.text()}", err=True)
    for result in costly:
        if result.status in ("error", "timeout"):  # it may have sent before it failed
            click.echo(t("{probe} ended {status}: what it sent is not known, at most what it "
                         "said it would", probe=result.name, status=result.status), err=True)
    if costly and all(r.status == "skipped" for r in costly):
        click.echo(t("no request was sent to an engine"), err=True)
