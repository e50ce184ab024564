"""``llm-doctor fix``: the plan for a scan's findings, to read first; ``--apply`` and
``--revert`` on consent (docs/fix.md)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from pathlib import Path

import click

from doctor.commands.emit import emit
from doctor.commands.setup import ScanCannotRun, known_rule_ids, load_setup, open_host, scan_options
from doctor.fix.apply import FixError, apply_plan, revert_plan, status_said
from doctor.fix.model import Plan
from doctor.fix.plan import PlanTooLarge, build_plan
from doctor.fix.script import to_json, to_markdown, to_sh
from doctor.fix.verify import judge, said
from doctor.i18n import lazy, t
from doctor.model import Level
from doctor.saved_scan import typed
from probes.registry import PROBES

PLANS_DIR = "/var/lib/llm-doctor/plans"
PLAN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}(-\d{1,3})?")


def _plans_dir(plans_dir: str | None, root: str | None) -> Path:
    if plans_dir:
        return Path(plans_dir)
    return Path(root) / PLANS_DIR.lstrip("/") if root else Path(PLANS_DIR)


def _probes(names: set[str]) -> tuple:
    """The registry's probes named, with those they need, in the registry's order."""
    wanted = set(names)
    specs = {spec.name: spec for spec in PROBES}
    todo = list(wanted)
    while todo:
        name = todo.pop()
        for need in specs[name].needs if name in specs else ():
            if need not in wanted and need in specs:
                wanted.add(need)
                todo.append(need)
    return tuple(spec for spec in PROBES if spec.name in wanted)


def _scan(replay: str | None, config_path: str | None, level: str | None,
          probe_names: set[str] | None) -> tuple[dict, dict[str, tuple[str, ...]]]:
    from doctor.scan import scan
    from reports.json_report import to_dict

    rules, config = load_setup(config_path, ())
    host = open_host(replay)
    options = scan_options(config, level or (None if replay else "quick"), host=host)
    probes = _probes(probe_names) if probe_names else PROBES
    report = scan(host, options, probes, rules, config)
    return to_dict(report), {rule.id: tuple(rule.probes) for rule in rules}


def _rule_probes(config_path: str | None) -> dict[str, tuple[str, ...]]:
    rules, _ = load_setup(config_path, ())
    return {rule.id: tuple(rule.probes) for rule in rules}


def _fresh_id(plan: Plan, plans: Path) -> Plan:
    plan_id, n = plan.id, 1
    while (plans / plan_id).exists() and n < 100:
        n += 1
        plan_id = f"{plan.id}-{n}"
    return dataclasses.replace(plan, id=plan_id)


def _emit(text: str, output: str | None) -> None:
    emit(text, output, lazy("plan written to {output}"), lazy("{output}: cannot write the plan: {why}"))


@click.command()
@click.option("--replay", metavar="DIR", help="Plan for a host recorded by 'llm-doctor capture DIR'.")
@click.option("--from", "saved", metavar="SAVED.json", help="Plan for a saved JSON scan ('scan --format json').")
@click.option("--format", "fmt", type=click.Choice(["sh", "json", "markdown"]), default="sh",
              show_default=True, help="sh: a POSIX script, a dry run unless given --apply; json "
                                     "(docs/fix-plan-schema.json); markdown: a change ticket.")
@click.option("--output", "-o", metavar="FILE", help="Write the plan to FILE instead of standard output.")
@click.option("--root", metavar="DIR", help="Apply the file changes under DIR instead of /; live "
              "settings are left alone (unless --live) and commands never run.")
@click.option("--apply", "do_apply", is_flag=True, help="Make the changes now, saving what each replaces.")
@click.option("--live", is_flag=True, help="With --root: write the live settings (sysctl, sysfs) on this host too.")
@click.option("--revert", "revert_id", metavar="ID", help="Put back everything plan ID changed.")
@click.option("--plans-dir", metavar="DIR", help=f"Where plans keep what they replaced (default {PLANS_DIR}, under --root if given).")
@click.option("--only", "only", multiple=True, metavar="RULE", help="Only the findings of this rule (repeatable).")
@click.option("--level", type=click.Choice(Level.names()), default=None,
              help="The scan's level (live default: quick).")
@click.option("--config", "config_path", metavar="FILE", help="Threshold overrides, as for scan.")
def fix(replay, saved, fmt, output, root, do_apply, live, revert_id, plans_dir, only, level,
        config_path) -> None:
    """Write the fix plan for this host's findings (or a recorded host's, or a saved scan's).

    \b
    llm-doctor fix                         the plan as a shell script (dry run by default)
    llm-doctor fix --format markdown       the same as a change ticket
    llm-doctor fix --apply                 make the changes, then scan again to verify
    llm-doctor fix --revert ID             put back what plan ID changed

    Nothing on the host changes without --apply. Engine flags are shown, never edited;
    BIOS, kernel command line and hands-on steps are a checklist, never commands.
    """
    plans = _plans_dir(plans_dir, root)
    if revert_id is not None:
        if do_apply or replay or saved:
            raise ScanCannotRun(t("--revert ID takes no --apply, --replay or --from: it puts back what plan ID saved"))
        if not PLAN_ID.fullmatch(revert_id):
            raise ScanCannotRun(t("--revert {id!r}: not a plan id (as 'fix --apply' prints it, "
                                  "e.g. 20261201T194100Z-3fa2c1)", id=revert_id))
        try:
            for line in revert_plan(plans, revert_id, root):
                click.echo(line)
        except FixError as exc:
            raise ScanCannotRun(str(exc)) from None
        click.echo(t("plan {id} reverted", id=revert_id))
        return
    if replay and saved:
        raise ScanCannotRun(t("--replay and --from each give the findings: name one"))
    if do_apply and (replay or saved) and not root:
        raise ScanCannotRun(t("--apply with --replay or --from would change this host by another scan's "
                              "findings: add --root DIR to write the files under DIR"))
    if live and not root:
        raise ScanCannotRun(t("--live goes with --root (without --root, --apply writes live settings anyway)"))
    if saved:
        from reports.json_report import read

        # the one reader of a saved scan: held to the schema (a bad field is one line with
        # its JSON path), then typed; the plan reads its accessors, not the dict
        report = read(Path(saved), ScanCannotRun, known_rule_ids(config_path))
        rule_probes = _rule_probes(config_path)
        source = t("saved scan {path}", path=saved)
    else:
        first = None
        if only:
            rule_probes = _rule_probes(config_path)
            unknown = [r for r in only if r not in rule_probes]
            if unknown:
                raise ScanCannotRun(t("--only {rule}: no such rule ('llm-doctor rules' lists them)",
                                      rule=unknown[0]))
            first = {p for r in only for p in rule_probes[r]}
        data, rule_probes = _scan(replay, config_path, level, first)
        report = typed(data)  # to_dict's data: the shape the reader checks a saved scan for
        source = t("replay {path}", path=replay) if replay else t("live scan")
    try:
        plan = build_plan(report, source, rule_probes, only=tuple(only))
    except PlanTooLarge as exc:
        raise ScanCannotRun(str(exc)) from None
    if not do_apply:
        text = {"sh": lambda: to_sh(plan, str(plans / plan.id)), "json": lambda: to_json(plan),
                "markdown": lambda: to_markdown(plan)}[fmt]()
        _emit(text, output)
        return
    sys.exit(_apply(plan, plans, root, live, replay, saved, config_path, level))


def _apply(plan: Plan, plans: Path, root: str | None, live: bool, replay, saved, config_path, level) -> int:
    if not plan.steps:
        click.echo(t("nothing to apply: the scan found nothing with a machine-side fix"))
        return 0
    plan = _fresh_id(plan, plans)
    try:
        outcomes = apply_plan(plan, plans, to_json(plan), Path(root) if root else None, live)
    except FixError as exc:
        raise ScanCannotRun(str(exc)) from None
    click.echo(t("plan {id}: {n} step(s)", id=plan.id, n=len(plan.steps)))
    for outcome in outcomes:
        click.echo(f"  {outcome.step}: {status_said(outcome.status)}"
                   + (t(" ({detail})", detail=outcome.detail) if outcome.detail else ""))
    failed = any(o.status == "failed" for o in outcomes)
    if failed:
        click.echo(t("stopped at the failed step; the steps before it stay applied"), err=True)
    if replay or saved or (root and not live):
        click.echo(t("verify: not scanned (the plan came from another scan, or only files under --root changed)"))
    elif plan.probes:
        after, _ = _scan(None, config_path, level, set(plan.probes))
        verdicts = judge(plan, outcomes, typed(after))
        _write_verify(plans / plan.id / "verify.json", json.dumps(verdicts, indent=1) + "\n")
        for step_id, verdict in verdicts.items():
            click.echo("  " + t("verify {step}: {verdict}", step=step_id, verdict=said(verdict)))
    flag = f" --plans-dir {plans}" if str(plans) != PLANS_DIR else ""
    click.echo(t("revert: {command}", command=f"llm-doctor fix --revert {plan.id}{flag}"))
    return 1 if failed else 0


def _write_verify(path: Path, text: str) -> None:
    """verify.json, 0600 like the rest of the plan's folder, never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(fd, 0o600)
        out.write(text)
