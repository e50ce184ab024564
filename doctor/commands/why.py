"""``llm-doctor why SYMPTOM`` (and ``scan --symptom``): the probes the symptom's candidate
causes need, run at the level they need, then the differential (doctor/why/) rendered.

Before any request goes to an engine, stderr says which probes will send what (their
declared cost) or, with --no-requests, which causes that leaves unchecked; the probes' own
plan lines follow. Exit codes as scan's, over this symptom's findings; 3 when the symptom
names no row or several (the choices are listed).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

from doctor.commands.emit import check_output, emit, rendered
from doctor.commands.sent import announce, say_sent
from doctor.commands.setup import (ScanCannotRun, check_model_dirs, load_setup, open_host,
                                   scan_options)
from doctor.i18n import lazy, t
from doctor.model import Level, ProbeSpec, ScanOptions
from doctor.scan import scan
from doctor.vocabulary import symptom_words
from doctor.why.differential import build, candidates, probes_needed
from doctor.why.model import Differential
from doctor.why.words import Ambiguous, resolve
from probes.registry import by_name

FORMATS = ("terminal", "json", "markdown", "html")
RENDERERS = {"terminal": "reports.why_text", "json": "reports.why_json",
             "markdown": "reports.why_markdown", "html": "reports.why_html"}
CANNOT_WRITE = lazy("{output}: cannot write the report: {reason}")


def symptom_of(word: str) -> str:
    """The symptom id ``word`` names; ScanCannotRun (exit 3) listing the choices otherwise."""
    try:
        return resolve(word)
    except Ambiguous as exc:
        choices = "; ".join(f"{s} ({symptom_words(s)})" for s in exc.choices)
        if exc.unknown:
            raise ScanCannotRun(t("'{word}' names no symptom row; choose one: {choices}",
                                  word=exc.word, choices=choices)) from None
        raise ScanCannotRun(t("'{word}' may mean several symptom rows; name one "
                              "(llm-doctor why ROW): {choices}", word=exc.word,
                              choices=choices)) from None


def level_needed(specs: list[ProbeSpec]) -> Level:
    """The level the probes need, standard at most: full's long measurements stay opt-in
    (a rule that needs one says so, with the command)."""
    return min(max((s.level for s in specs), default=Level.QUICK), Level.STANDARD)


def _plan(symptom: str, specs: list[ProbeSpec], options: ScanOptions, causes: int, rules: int,
          say: Callable[[str], None], recorded: bool = False) -> None:
    """What this run will do, and send, before it does (a replay sends nothing: its records
    answer)."""
    chosen = [s for s in specs if s.level <= options.level]
    say(t("why {symptom}: {causes} candidate cause(s) from {rules} rule(s); {probes} probe(s) at "
          "level {level}", symptom=symptom, causes=causes, rules=rules, probes=len(chosen),
          level=options.level.name.lower()))
    costly = [s for s in chosen if s.cost is not None and not recorded]
    if costly and options.requests:
        for spec in costly:
            assert spec.cost is not None
            say(t("{probe} will send each engine it may: {cost}", probe=spec.name,
                  cost=spec.cost.text()))
    elif costly:
        say(t("no request will be sent to an engine (--no-requests): {probes} will not run",
              probes=", ".join(s.name for s in costly)))


def differential(word: str, replay: str | None, level: str | None, config_path: str | None,
                 rule_files: tuple[str, ...], option_args: dict) -> Differential:
    """Resolve the symptom, run what its causes need, and build the differential."""
    symptom = symptom_of(word)
    rules, config = load_setup(config_path, rule_files)
    specs = by_name()
    chosen = candidates(symptom, rules)
    needed = [specs[name] for name in probes_needed(chosen, specs)]
    host = open_host(replay)  # a recording answers at its capture's level unless named
    if level is None and not replay:
        level = level_needed(needed).name.lower()
    options = scan_options(config, level, host=host, announce=announce, **option_args)
    if not replay:
        check_model_dirs(options)
    _plan(symptom, needed, options, len({r.cause for r in chosen}), len(chosen), announce,
          recorded=host.kind == "recorded")
    report = scan(host, options, tuple(needed), chosen, config)
    say_sent(report, host)
    diff = build(symptom, chosen, report.probes, report.findings, specs, options.level,
                 options.requests, config, rule_errors=report.rule_errors)
    return dataclasses.replace(diff, host=report.host, started_at=report.started_at,
                               duration_s=report.duration_s)


def text_of(diff: Differential, fmt: str) -> str:
    if fmt not in FORMATS:
        raise ScanCannotRun(t("--format {format} is not made for why; use {choices}",
                              format=fmt, choices=", ".join(FORMATS)))
    return rendered(diff, fmt, RENDERERS)


def run(word: str, fmt: str, output: str | None, replay: str | None, level: str | None,
        config_path: str | None, rule_files: tuple[str, ...], **option_args) -> None:
    """The command: the differential of ``word``, written, and the exit code."""
    if fmt not in FORMATS:
        text_of(Differential("", Level.QUICK, False, ()), fmt)  # refuses, before any probe
    check_output(output, CANNOT_WRITE)
    diff = differential(word, replay, level, config_path, rule_files, option_args)
    emit(text_of(diff, fmt), output, lazy("report written to {output}"), CANNOT_WRITE)
    sys.exit(diff.exit_code())


def command_args(model_dirs, endpoints, no_requests, requests_to, busy_ok) -> dict:
    """scan's options that ``why`` passes on to ``scan_options``."""
    return {"model_dirs": tuple(model_dirs), "endpoints": tuple(endpoints),
            "no_requests": no_requests, "busy_ok": busy_ok, "requests_to": requests_to}
