"""``llm-doctor daemon``, ``llm-doctor report`` and ``llm-doctor rules export``."""

from __future__ import annotations

import re

import logging
import sys
from pathlib import Path

import click

from doctor.model import Level
from doctor.commands.emit import emit
from doctor.commands.load import ENDPOINT
from doctor.config import ConfigError
from doctor.i18n import current, lazy, t

_DURATION = click.STRING


def _seconds(value: str | None, flag: str) -> float | None:
    from doctor.durations import DurationError, parse

    if value is None:
        return None
    try:
        return parse(value)
    except DurationError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


@click.command()
@click.option("--listen", metavar="HOST:PORT", default=None,
              help="Where to serve /metrics. Default 127.0.0.1:9411 (loopback only); "
                   "[::1]:9411 for IPv6; port 0 picks a free port.")
@click.option("--interval", metavar="DURATION", default=None,
              help="How often the read-only probes run and the rules are evaluated "
                   "(default 15s; '1s', '30s', '2m').")
@click.option("--kernel-interval", metavar="DURATION", default=None,
              help="How often the micro-kernels run (default 6h; 0 = only on SIGUSR1).")
@click.option("--level", type=click.Choice(Level.names()), default=None,
              help="quick never runs micro-kernels. Default standard.")
@click.option("--model-dir", "model_dirs", multiple=True, metavar="DIR",
              help="Where the model weights live (repeatable), as for scan.")
@click.option("--endpoint", "endpoints", multiple=True, metavar="URL", type=ENDPOINT,
              help="A serving engine to read (repeatable), as for scan: one behind a proxy, in "
                   "another network namespace or on another host; a key as http://:KEY@host:8000 "
                   "is sent to that origin only, never shown.")
@click.option("--config", "config_path", metavar="FILE",
              help="Config file with a [daemon] table (docs/daemon.md). SIGHUP re-reads it.")
@click.option("--rules", "rule_files", multiple=True, metavar="FILE",
              help="An extra rule file (repeatable).")
@click.option("--report-dir", metavar="DIR", default=None,
              help="Write an HTML incident report here when an alert fires.")
@click.option("--state-file", metavar="FILE", default=None,
              help="Write the last evaluation here after every beat, atomically, for "
                   "'llm-doctor npd' and 'slurm-healthcheck' (default "
                   "/var/lib/llm-doctor/state.json; '' writes none).")
@click.option("--textfile", metavar="FILE", default=None,
              help="Also write the metrics to FILE after every beat, atomically, for "
                   "node_exporter's textfile collector (a name ending in .prom in its "
                   "--collector.textfile.directory; docs/textfile.md).")
@click.option("--alertmanager", multiple=True, metavar="URL",
              help="Send alerts to this Alertmanager (v2 API; repeatable).")
@click.option("--webhook", multiple=True, metavar="URL",
              help="POST alerts as JSON to this URL (repeatable).")
@click.option("--replay", metavar="DIR", default=None,
              help="Run on a host recorded by 'llm-doctor capture DIR' instead of this one: "
                   "for demos, fleet tests, or a customer's capture through your own alerting.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def daemon(listen, interval, kernel_interval, level, model_dirs, endpoints, config_path,
           rule_files, report_dir, state_file, textfile, alertmanager, webhook, replay, log_level) -> None:
    """Run the probes on a schedule, export metrics, send alerts, write incident reports.

    \b
    llm-doctor daemon                                  serve 127.0.0.1:9411/metrics
    llm-doctor daemon --alertmanager http://127.0.0.1:9093 --report-dir /var/lib/llm-doctor
    llm-doctor daemon --replay DIR --listen 127.0.0.1:0   a recorded host's metrics
    kill -HUP <pid>     re-read the config and rules
    kill -USR1 <pid>    run the micro-kernels now
    kill -TERM <pid>    stop
    """
    import signal

    from doctor.commands.setup import load_daemon, open_host
    from doctor.daemon.service import Daemon
    from doctor.fleet.textfile import daemon_text

    # Until the server is up (Daemon.run installs the daemon's handlers): SIGTERM and SIGINT
    # stop it wherever its start is, and a reload or kernel request has nothing to act on yet.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    flags = {"listen": listen, "interval_s": _seconds(interval, "--interval"),
             "kernel_interval_s": _seconds(kernel_interval, "--kernel-interval"),
             "level": level, "report_dir": report_dir, "state_file": state_file,
             "textfile": textfile, "alertmanager": tuple(alertmanager),
             "webhook": tuple(webhook), "model_dirs": tuple(model_dirs),
             "endpoints": tuple(endpoints),  # each checked as its key is (settings.with_flags)
             # a recording's kernel results cost its engine nothing: replayed while it serves
             "kernels_while_serving": True if replay else None}

    host = open_host(replay)  # a broken recording is a ConfigError naming its file

    def reload():  # the scan's options built as a scan builds them (doctor/commands/setup.py)
        return load_daemon(config_path, rule_files, flags, host)

    # --lang wins over the config's lang, which wins over LLM_DOCTOR_LANG and the locale
    from doctor.commands.lang import argv_lang

    service = Daemon(reload(), reload, host=host, textfile=daemon_text,
                     lang_flag=argv_lang(sys.argv[1:]))
    sys.exit(service.run())


@click.command()
@click.argument("snapshot", metavar="SNAPSHOT.json")
@click.option("--output", "-o", metavar="FILE", required=True, help="The HTML file to write.")
@click.option("--rules", "rule_files", multiple=True, metavar="FILE",
              help="A rule file the scan was made with (repeatable): its rule ids are known.")
@click.option("--config", "config_path", metavar="FILE",
              help="Config file whose scan.rule_files the scan was made with.")
def report(snapshot, output, rule_files, config_path) -> None:
    """Render a saved JSON scan ('scan --format json -o FILE') as a self-contained HTML report,
    in the language of --lang whatever language the scan was saved in."""
    from doctor.commands.setup import known_rule_ids
    from reports.html import render_data
    from reports.json_report import read

    # someone else's file: a guarded read, strict JSON, the schema's fields and types, the
    # rule ids of the rules built in or named here
    scan = read(Path(snapshot), ConfigError, known_rule_ids(config_path, rule_files))
    if not scan.translatable and scan.lang != current():
        click.echo(t("{file}: saved before llm-doctor kept its text as messages: its titles, "
                     "summaries and reasons read in the language it was saved in ({lang})",
                     file=snapshot, lang=scan.lang), err=True)
    # its text said in this command's language (--lang), from the values the scan carries
    emit(render_data(scan), output, lazy("report written to {output}"))


def _job_name(ctx, param, value: str) -> str:
    """A job name that goes into PromQL and YAML as it is: letters, digits and ``_.:/-``."""
    if not re.fullmatch(r"[A-Za-z0-9_.:/-]{1,100}", value):
        raise click.BadParameter(t("{value}: a job name of letters, digits and _.:/- (as in your "
                                   "scrape config's job_name)", value=repr(value)), ctx, param)
    return value


@click.command("export")
@click.option("--prometheus", "fmt", flag_value="prometheus",
              help="Prometheus alerting rules over llm-doctor's metrics (YAML).")
@click.option("--alertmanager", "fmt", flag_value="alertmanager",
              help="Instead: Alertmanager's inhibit rule (a critical alert hides the warning of "
                   "the same rule and key), to merge into alertmanager.yml.")
@click.option("--config", "config_path", metavar="FILE",
              help="Take 'for' overrides from this config's [daemon.for].")
@click.option("--rules", "rule_files", multiple=True, metavar="FILE")
@click.option("--output", "-o", metavar="FILE", help="Write to FILE instead of standard output.")
@click.option("--job", default="llm-doctor", show_default=True, callback=_job_name,
              help="The Prometheus scrape job that scrapes the daemons (LlmDoctorStale and "
                   "LlmDoctorAbsent watch up{job=...}).")
@click.option("--fleet", is_flag=True,
              help="Instead: the rules across the fleet (job: recording rules per cause and GPU "
                   "model, outlier alerts against a group's median; docs/fleet.md).")
@click.option("--outlier-ratio", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=None, help="--fleet: a host below this times its group's median is an "
                                 "outlier (default 0.8).")
@click.option("--outlier-for", metavar="DURATION", default=None,
              help="--fleet: how long before an outlier fires (default 15m).")
def rules_export(fmt, config_path, rule_files, output, job, fleet, outlier_ratio,
                 outlier_for) -> None:
    """Write Prometheus alerting rules, one per llm-doctor rule (check: promtool check rules).

    Per rule, one alert per severity its findings can have; LlmDoctorStale when a daemon's
    scrape fails, LlmDoctorAbsent when none is scraped. Give --job if your scrape config
    names the job other than llm-doctor. With --fleet, the rules across hosts instead: load
    both files into the Prometheus that scrapes the daemons. With --alertmanager, the
    inhibit rule that makes a critical alert hide the warning beside it (one page per
    problem; check: amtool check-config)."""
    from doctor.daemon.promrules import export, inhibit_rules
    from doctor.commands.setup import load_daemon

    if fmt is None:
        raise click.UsageError(t("give --prometheus (alerting rules) or --alertmanager (the "
                                 "inhibit rule)"))
    if fmt == "alertmanager" and (fleet or config_path or rule_files or outlier_ratio is not None
                                  or outlier_for is not None):
        raise click.UsageError(t("--alertmanager takes no other option but --output: its "
                                 "inhibit rule is the same for every rule and host"))
    if fleet and (config_path or rule_files):
        raise click.UsageError(t("--config and --rules shape the per-host rules, not --fleet's: "
                                 "export those without --fleet"))
    if fmt == "alertmanager":
        text = inhibit_rules()
    elif fleet:
        from doctor.fleet import promfleet

        for_s = _seconds(outlier_for, "--outlier-for")
        text = promfleet.export(job, outlier_ratio or promfleet.OUTLIER_RATIO,
                                promfleet.OUTLIER_FOR_S if for_s is None else for_s)
    elif outlier_ratio is not None or outlier_for is not None:
        raise click.UsageError(t("--outlier-ratio and --outlier-for go with --fleet"))
    else:
        loaded = load_daemon(config_path, rule_files, {})
        text = export(loaded.rules, loaded.settings.for_s, loaded.config.rules, job=job)
    emit(text, output, lazy("rules written to {output}"))
