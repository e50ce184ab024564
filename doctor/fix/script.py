"""A plan as a POSIX shell script to read first, and as a markdown change ticket.

The script changes nothing unless it is given ``--apply``: it prints each file as a diff
against what is on the host now, each live setting as its value now and the new one, and
each command it would run. Engine flags and manual steps are printed, never run.
"""

from __future__ import annotations

import json
import shlex

from doctor.fix.model import Plan, Step
from doctor.fix.plan import to_dict
from doctor.i18n import t

EOF_MARK = "LLM_DOCTOR_EOF"

PRELUDE = r'''set -eu

APPLY=0
case "${1-}" in
  --apply) APPLY=1 ;;
  '') ;;
  *) echo "usage: $0 [--apply]" >&2; exit 2 ;;
esac
PLAN_DIR=${PLAN_DIR:-%(plan_dir)s}

say() { printf '%%s\n' "$*"; }

# put_file PATH SAVED_NAME, the new content on stdin: a diff, and with --apply the write
# (the file it replaces is saved under $PLAN_DIR first).
put_file() {
  new=$(mktemp)
  cat > "$new"
  if [ -f "$1" ] && cmp -s "$new" "$1"; then
    say "  %(in_place_file)s"
  else
    old=/dev/null
    if [ -f "$1" ]; then old=$1; fi
    say "  --- %(now)s"
    say "  +++ %(after)s"
    diff -u "$old" "$new" | tail -n +3 | sed 's/^/  /' || true
    if [ "$APPLY" = 1 ]; then
      mkdir -p "$PLAN_DIR" "$(dirname "$1")"
      if [ -f "$1" ]; then cp -p "$1" "$PLAN_DIR/$2"; fi
      cp "$new" "$1"
      chmod 0644 "$1"
      say "  %(written)s"
    fi
  fi
  rm -f "$new"
}

# set_value PATH NAME NEW SAVED_NAME: a live setting, its value now and the new one.
set_value() {
  if [ ! -e "$1" ]; then
    say "  %(absent)s"
    return 0
  fi
  old=$(cat "$1")
  if [ "$old" = "$3" ]; then
    say "  %(in_place_value)s"
    return 0
  fi
  say "  $2: $old -> $3"
  if [ "$APPLY" = 1 ]; then
    mkdir -p "$PLAN_DIR"
    printf '%%s\n' "$old" > "$PLAN_DIR/$4"
    printf '%%s\n' "$3" > "$1"
  fi
}

# run COMMAND...: printed, and run with --apply.
run() {
  say "  %(run)s"
  if [ "$APPLY" = 1 ]; then
    "$@"
  fi
}

# Before a daemon-reload on a host with NVIDIA GPUs: the /dev/char links must exist, or
# systemd drops the device rules of running GPU containers and they lose their GPUs
# (195:255 is /dev/nvidiactl's number, fixed by the driver).
guard_dev_char() {
  if [ "$APPLY" = 1 ] && [ -e /dev/nvidiactl ] && [ ! -e /dev/char/195:255 ]; then
    say "  %(stopped)s" >&2
    exit 1
  fi
}
'''


def prelude_words() -> dict[str, str]:
    """What the prelude's functions print, in the current language: each goes inside a
    double-quoted shell word, its shell parameters ($1, $2, $3, $*) filled in as they are."""
    words = {
        "in_place_file": t("in place: {path}", path="$1"),
        "now": t("{path} (now)", path="$1"), "after": t("{path} (after)", path="$1"),
        "written": t("written: {path}", path="$1"),
        "absent": t("{name}: {path} is absent on this host, skipped", name="$2", path="$1"),
        "in_place_value": t("in place: {name} = {value}", name="$2", value="$3"),
        "run": t("run: {command}", command="$*"),
        "stopped": t("stopped: /dev/char lacks the NVIDIA links; run "
                     "'nvidia-ctk system create-dev-char-symlinks --create-all' first"),
    }
    for key, text in words.items():  # a catalogue's text must not end the shell word early
        if any(c in text.replace("$1", "").replace("$2", "").replace("$3", "").replace("$*", "")
               for c in '"$`\\%'):
            raise ValueError(f"the prelude's {key!r} holds a character the shell would read: {text!r}")
    return words


def _q(text: object) -> str:
    return shlex.quote(str(text))


def _quoted(text: str) -> str:
    """``text`` in single quotes always (``_q`` leaves a plain word bare)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _comment(text: str) -> str:
    return " ".join(str(text).split())


def _step_sh(step: Step) -> list[str]:
    out = ["", "# " + t("{id}: finding {finding}; cause {cause}; kind {kind}; risk {risk}", id=step.id,
                        finding=_comment(step.finding), cause=step.cause, kind=step.kind.value,
                        risk=step.risk.value),
           "# " + t("check: {text}", text=_comment(step.check)),
           "# " + t("verify: {text}", text=_comment(step.verify)),
           "# " + t("revert: {text}", text=_comment(step.revert)),
           "say " + _q(t("{id} [{kind}, risk {risk}]: {title}", id=step.id, kind=step.kind.value,
                         risk=step.risk.value, title=_comment(step.title)))]
    for n, change in enumerate(step.files, 1):
        if EOF_MARK in change.content.splitlines():  # never: each line is the catalogue's
            raise ValueError(f"{change.path}: content holds the here-document's end mark")
        out += [f"put_file {_q(change.path)} {_q(f'{step.id}.file{n}')} <<'{EOF_MARK}'",
                change.content.rstrip("\n"), EOF_MARK]
    for n, value in enumerate(step.live, 1):
        out.append(f"set_value {_q(value.path)} {_q(value.name)} {_q(value.new)} {_q(f'{step.id}.live{n}')}")
    for command in step.commands:
        if command.argv[:2] == ("systemctl", "daemon-reload"):
            out.append("guard_dev_char")
        out.append("run " + " ".join(_q(a) for a in command.argv))
    if step.flags:
        out.append("say " + _q("  " + t("engine flags of {engine} (shown, not applied; they live in {where}):",
                                         engine=step.flags.engine, where=step.flags.where)))
        if step.flags.remove:
            out.append(f"say {_q('  - ' + ' '.join(step.flags.remove))}")
        if step.flags.add:
            out.append(f"say {_q('  + ' + ' '.join(step.flags.add))}")
    for item in step.manual:
        out.append("say " + _q("  " + t("by hand: {item}", item=_comment(item))))
    return out


def to_sh(plan: Plan, plan_dir: str) -> str:
    lines = ["#!/bin/sh",
             "# shellcheck disable=SC2016  # the messages quote commands in backticks, as printed",
             "# " + t("llm-doctor fix plan {id}: {n} step(s) for {host}, from {source}, {created}.",
                      id=plan.id, n=len(plan.steps), host=_comment(plan.host),
                      source=_comment(plan.source), created=plan.created_at),
             "# " + t("Read it first. As it is, it changes nothing: it prints each change as a diff."),
             "# " + t("With --apply it makes them, saving each file and value it replaces under $PLAN_DIR;"),
             "# " + t("the first step that fails stops it. Engine flags and manual steps are only printed."),
             "# " + t("'llm-doctor fix --apply' does the same and keeps what 'llm-doctor fix --revert ID' needs.")]
    lines.append(PRELUDE % {"plan_dir": _q(plan_dir), **prelude_words()})
    for step in plan.steps:
        lines += _step_sh(step)
    if plan.no_steps:
        lines += ["", "# " + t("Findings without a step:")]
        lines += [f"# - {_comment(n.rule)} {_comment(n.key)}: {_comment(n.why)}" for n in plan.no_steps]
    lines += ["", f"if [ \"$APPLY\" = 1 ]; then say {_quoted(t('applied'))}; "
              f"else say {_quoted(t('dry run: nothing changed (--apply makes the changes)'))}; fi", ""]
    return "\n".join(lines)


def to_json(plan: Plan) -> str:
    return json.dumps(to_dict(plan), indent=2) + "\n"


def _md_step(step: Step) -> list[str]:
    out = [f"### {step.id}: {step.title}", "",
           "- " + t("finding: `{finding}` (cause `{cause}`)", finding=step.finding, cause=step.cause),
           "- " + t("kind: {kind}; risk: {risk}", kind=step.kind.value, risk=step.risk.value),
           "- " + t("check: {text}", text=step.check), "- " + t("verify: {text}", text=step.verify),
           "- " + t("revert: {text}", text=step.revert), ""]
    for change in step.files:
        out += [t("File `{path}`:", path=change.path), "", "```", change.content.rstrip("\n"), "```", ""]
    if step.live:
        out += [f"| {t('setting')} | {t('now')} | {t('after')} |", "|---|---|---|"]
        out += [f"| `{v.name}` | {v.seen if v.seen is not None else '?'} | {v.new} |" for v in step.live]
        out.append("")
    for command in step.commands:
        undo = t(" (undo: `{command}`)", command=shlex.join(command.undo)) if command.undo else ""
        out.append("- " + t("run `{command}`{undo}: {why}", command=shlex.join(command.argv), undo=undo,
                             why=command.why))
    if step.commands:
        out.append("")
    if step.flags:
        out += [t("Engine flags of {engine} (shown, not applied; they live in {where}):",
                  engine=step.flags.engine, where=step.flags.where),
                "", "```diff"]
        out += [f"- {' '.join(step.flags.remove)}"] if step.flags.remove else []
        out += [f"+ {' '.join(step.flags.add)}"] if step.flags.add else []
        out += ["```", ""]
    out += [f"- [ ] {item}" for item in step.manual]
    return out + ([""] if step.manual else [])


def to_markdown(plan: Plan) -> str:
    out = [t("# Change: llm-doctor fix plan {id}", id=plan.id), "",
           t("Host `{host}`, from {source}, {created}. Rollback: `llm-doctor fix --revert {id}`.",
             host=plan.host, source=plan.source, created=plan.created_at, id=plan.id), "",
           f"| {t('step')} | {t('finding')} | {t('kind')} | {t('risk')} |", "|---|---|---|---|"]
    out += [f"| {s.id} | `{s.finding}` | {s.kind.value} | {s.risk.value} |" for s in plan.steps]
    if not plan.steps:
        out[-2:] = [t("No step: the scan found nothing with a machine-side fix.")]
    out.append("")
    for step in plan.steps:
        out += _md_step(step)
    if plan.no_steps:
        out += ["## " + t("Findings without a step"), ""]
        out += [f"- `{(n.rule + ' ' + n.key).strip()}`: {n.why}" for n in plan.no_steps]
        out.append("")
    return "\n".join(out)
