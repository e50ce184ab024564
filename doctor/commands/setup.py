"""What a command needs before and after a scan, shared by the CLI and the daemon: rules
and config loaded, the host chosen, the options settled, the report rendered.

Errors are the exceptions ``doctor.commands.cli.main`` maps to one line and exit 3:
``RuleError``, ``ConfigError``, ``RecordedHostError``, ``ScanCannotRun``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from doctor.config import Config, ConfigError, check_against_rules, find_config, load_config
from doctor.daemon.service import DaemonSetup
from doctor.endpoints import Endpoint, EndpointError
from doctor.endpoints import parse as parse_endpoint
from doctor.daemon.settings import load_settings, with_flags
from doctor.seam.host import Host
from doctor.seam.live import LiveHost
from doctor.i18n import t
from doctor.model import Level, ScanOptions, ScanReport
from probes.helpers.collective_file import beside
from probes.registry import by_name
from doctor.rules.ids import declared_ids
from doctor.rules.loader import Rule, builtin_files, load_rules



class ScanCannotRun(Exception):
    """The scan could not start; the message says why and what to do."""


def load_setup(config_path: str | None, rule_files: tuple[str, ...] = ()) -> tuple[list[Rule], Config]:
    """The built-in rules, the config's and the command line's rule files, and the config."""
    config = load_config(find_config(config_path))
    files = builtin_files()
    files += [Path(f) for f in config.scan.get("rule_files", [])]
    files += [Path(f) for f in rule_files]
    rules = load_rules(files, by_name())
    check_against_rules(config, rules)
    return rules, config


def known_rule_ids(config_path: str | None, rule_files: tuple[str, ...] = ()) -> frozenset[str]:
    """The rule ids a saved scan may name: the built-in rules', and those of the rule files
    the config's scan.rule_files and the command line name (read for their ids only)."""
    config = load_config(find_config(config_path))
    return declared_ids([*config.scan.get("rule_files", []), *rule_files])


def open_host(replay: str | None) -> Host:
    """This machine, or the recorded host in ``replay``."""
    if not replay:
        return LiveHost()
    from doctor.seam.recorded import RecordedHost

    return RecordedHost(replay)


def scan_options(config: Config, level: str | None, model_dirs: tuple[str, ...] = (),
                 endpoints: tuple[str, ...] = (), host: Host | None = None,
                 no_requests: bool = False, busy_ok: bool = False,
                 announce: Callable[[str], None] | None = None,
                 requests_to: str | None = None) -> ScanOptions:
    """The one place a scan's options are settled, for ``scan``, ``capture`` and the daemon
    (whose flags come here merged with its [daemon] table): the command line first, then a
    recorded host's capture settings (its level, model directories and endpoints; a
    capture made with --no-requests or --busy-ok replays with them), then [scan] of the
    config file, then the defaults.
    ``no_requests`` (--no-requests) wins over [scan] requests; requests are sent by default.
    ``requests_to`` (--requests-to) wins over [scan] requests_to; "named" by default: with
    endpoints named, requests go to those only, and the engines discovered are only read."""
    meta = getattr(host, "manifest", {}).get("host", {}) if host is not None else {}
    chosen = level or meta.get("level") or config.scan.get("level", "standard")
    if chosen not in Level.names():
        raise ConfigError(t("{file}: scan.level = {value}; use quick, standard or full",
                            file=config.path, value=repr(chosen)))
    dirs = tuple(model_dirs) or tuple(meta.get("model_dirs", [])) or tuple(config.scan.get("model_dirs", []))
    urls = (tuple(endpoints) or tuple(meta.get("endpoints", []))
            or tuple(config.scan.get("endpoints", [])))
    # a recording made without requests has none to answer from: its replay sends none
    requests = not no_requests and config.scan.get("requests", True) and meta.get("requests", True)
    return ScanOptions(level=Level.parse(chosen), model_dirs=dirs, endpoints=_parsed(urls),
                       requests=requests, busy_ok=busy_ok or meta.get("busy_ok", False),
                       announce=announce,
                       requests_to=requests_to or config.scan.get("requests_to", "named"),
                       replicas=replica_groups(config),
                       collective_file=collective_file(config))


def collective_file(config: Config) -> str | None:
    """Where net.collective finds `llm-doctor collective`'s last result: beside the daemon's
    state file as the config's [daemon] state_file names it (None: beside the default one).
    A [daemon] table the daemon would refuse is the daemon's error to show, not the scan's:
    the default then."""
    if config.path is None:
        return None
    try:
        return beside(load_settings(config.path).state_file)
    except ConfigError:
        return None


def _parsed(urls: tuple[str, ...]) -> tuple[Endpoint | str, ...]:
    """Each endpoint as the value the probes use, parsed once here (the flag, the config, the
    daemon's settings and a recording each checked it already); one that does not parse
    stays text, for discovery to show its error."""
    out: list[Endpoint | str] = []
    for url in urls:
        try:
            out.append(parse_endpoint(url))
        except EndpointError:
            out.append(url)
    return tuple(out)


def replica_groups(config: Config) -> tuple[tuple[str, ...], ...]:
    """[scan] replicas as groups of base URLs (the config check refused anything else)."""
    return tuple(tuple(parse_endpoint(url).base_url for url in group)
                 for group in config.scan.get("replicas", []))


def load_daemon(config_path: str | None, rule_files: tuple[str, ...],
                flags: dict[str, Any], host: Host | None = None) -> DaemonSetup:
    """The daemon's settings, config, rules and scan options, built as a scan's are: the
    flags, then [daemon], then [scan]; but requests go to an engine only with [daemon]
    requests = true (whatever [scan] says), and to one serving requests only with
    kernels_while_serving. A recorded ``host`` brings its capture's level, model
    directories and endpoints, as for scan --replay. Raises ConfigError or RuleError naming
    the file."""
    path = find_config(config_path)
    settings = with_flags(load_settings(path), **{**flags, "rule_files": tuple(rule_files)})
    rules, config = load_setup(config_path, settings.rule_files)
    unknown = set(settings.for_s) - {r.id for r in rules}
    if unknown:
        raise ConfigError(t("{file}: [daemon.for] names no rule: {ids}", file=path,
                            ids=", ".join(sorted(unknown))))
    options = scan_options(config, settings.level or None, settings.model_dirs, settings.endpoints,
                           host=host, announce=logging.getLogger("llm-doctor.requests").info)
    meta = getattr(host, "manifest", {}).get("host", {}) if host is not None else {}
    options = replace(options, requests=settings.requests and meta.get("requests", True),
                      busy_ok=settings.kernels_while_serving or meta.get("busy_ok", False),
                      collective_file=beside(settings.state_file))  # its --state-file too
    return DaemonSetup(settings, config, rules, options)


def check_model_dirs(options: ScanOptions) -> None:
    for path in options.model_dirs:
        try:
            os.stat(path)
        except FileNotFoundError:
            raise ScanCannotRun(t("--model-dir {path}: no such file or directory",
                                  path=path)) from None
        except PermissionError:  # a folder on the way this user may not enter
            raise ScanCannotRun(t("--model-dir {path}: this user may not look inside a folder on "
                                  "its way (permission denied); run as the user that runs the "
                                  "engine, or as root", path=path)) from None
        except OSError as exc:
            raise ScanCannotRun(f"--model-dir {path}: {exc.strerror}") from None


def _json(report: ScanReport, verbose: bool = False) -> str:
    from reports.json_report import render

    return render(report)  # every probe, always


def _markdown(report: ScanReport, verbose: bool = False) -> str:
    from reports.markdown import render

    return render(report, verbose)


def _terminal(report: ScanReport, verbose: bool = False) -> str:
    """The terminal report as plain text, for a file (a terminal gets it in colour)."""
    import io

    from rich.console import Console

    from reports.terminal import render

    console = Console(record=True, width=120, file=io.StringIO())
    render(report, console, verbose)
    return console.export_text()


def _html(report: ScanReport, verbose: bool = False) -> str:
    from reports.html import render

    return render(report, verbose=verbose)


def _prom(report: ScanReport, verbose: bool = False) -> str:
    """node_exporter's textfile collector's format (doctor/fleet/textfile.py)."""
    from doctor.fleet.textfile import scan_text

    return scan_text(report)


# Output formats: one table. Each renders a whole report to text; ``verbose`` gives every
# probe its own row (else a family skipped for one reason is one row).
FORMATS: dict[str, Callable[[ScanReport, bool], str]] = {
    "terminal": _terminal,
    "json": _json,
    "markdown": _markdown,
    "html": _html,
    "prom": _prom,
}


def render(report: ScanReport, fmt: str, verbose: bool = False) -> str:
    return FORMATS[fmt](report, verbose)
