"""A plan as a POSIX shell script to read first, and as a markdown change ticket.

The script changes nothing unless it is given ``--apply``: it prints each file as a diff
against what is on the host now, each live setting as its value now and the new one, and
each command it would run. Engine flags and manual steps are printed, never run.
"""

from __future__ import annotations

import json
import re
import shlex

from doctor.fix.model import Plan, Step
from doctor.fix.plan import to_dict
from doctor.fix.text import one_line
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
      (umask 077 && mkdir -p "$PLAN_DIR")  # root-only, as 'fix --revert' requires
      mkdir -p "$(dirname "$1")"
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
    (umask 077 && mkdir -p "$PLAN_DIR")
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
    """One comment line: whatever ``text`` holds (a line break of any kind, a control
    character), the shell reads all of it as the comment and runs none of it."""
    return "# " + one_line(text)


def _say(text: str) -> str:
    """A message the script prints: one printable line (its indent kept), one quoted word."""
    indent = text[:len(text) - len(text.lstrip(" "))][:8]
    return "say " + _q(indent + one_line(text))


def _eof_mark(content: str) -> str:
    """The here-document's end mark: one that ``content`` does not hold anywhere, so no line
    of it can end the document early (each line is the catalogue's, but a mark the content
    cannot hold is a proof, not a hope)."""
    mark, n = EOF_MARK, 1
    while mark in content:  # ends: content holds fewer marks than it has characters
        n += 1
        mark = f"{EOF_MARK}_{n}"
    return mark


def _step_sh(step: Step) -> list[str]:
    out = ["", _comment(t("{id}: finding {finding}; cause {cause}; kind {kind}; risk {risk}", id=step.id,
                          finding=step.finding, cause=step.cause, kind=step.kind.value,
                          risk=step.risk.value)),
           _comment(t("check: {text}", text=step.check)),
           _comment(t("verify: {text}", text=step.verify)),
           _comment(t("revert: {text}", text=step.revert)),
           _say(t("{id} [{kind}, risk {risk}]: {title}", id=step.id, kind=step.kind.value,
                  risk=step.risk.value, title=step.title))]
    for n, change in enumerate(step.files, 1):
        mark = _eof_mark(change.content)
        out += [f"put_file {_q(change.path)} {_q(f'{step.id}.file{n}')} <<'{mark}'",
                change.content.rstrip("\n"), mark]
    for n, value in enumerate(step.live, 1):
        out.append(f"set_value {_q(value.path)} {_q(value.name)} {_q(value.new)} {_q(f'{step.id}.live{n}')}")
    for command in step.commands:
        if command.argv[:2] == ("systemctl", "daemon-reload"):
            out.append("guard_dev_char")
        out.append("run " + " ".join(_q(a) for a in command.argv))
    if step.flags:
        out.append(_say("  " + t("engine flags of {engine} (shown, not applied; they live in {where}):",
                                 engine=step.flags.engine, where=step.flags.where)))
        if step.flags.remove:
            out.append(_say("  - " + " ".join(step.flags.remove)))
        if step.flags.add:
            out.append(_say("  + " + " ".join(step.flags.add)))
    for item in step.manual:
        out.append(_say("  " + t("by hand: {item}", item=item)))
    return out


def to_sh(plan: Plan, plan_dir: str) -> str:
    lines = ["#!/bin/sh",
             "# shellcheck disable=SC2016  # the messages quote commands in backticks, as printed",
             _comment(t("llm-doctor fix plan {id}: {n} step(s) for {host}, from {source}, {created}.",
                        id=plan.id, n=len(plan.steps), host=plan.host, source=plan.source,
                        created=plan.created_at)),
             _comment(t("Read it first. As it is, it changes nothing: it prints each change as a diff.")),
             _comment(t("With --apply it makes them, saving each file and value it replaces under $PLAN_DIR;")),
             _comment(t("the first step that fails stops it. Engine flags and manual steps are only printed.")),
             _comment(t("'llm-doctor fix --apply' does the same and keeps what 'llm-doctor fix --revert ID' needs."))]
    lines.append(PRELUDE % {"plan_dir": _q(plan_dir), **prelude_words()})
    for step in plan.steps:
        lines += _step_sh(step)
    if plan.no_steps:
        lines += ["", _comment(t("Findings without a step:"))]
        lines += [_comment(f"- {n.rule} {n.key}: {n.why}") for n in plan.no_steps]
    lines += ["", f"if [ \"$APPLY\" = 1 ]; then say {_quoted(one_line(t('applied')))}; "
              f"else say {_quoted(one_line(t('dry run: nothing changed (--apply makes the changes)')))}; fi", ""]
    return "\n".join(lines)


def to_json(plan: Plan) -> str:
    return json.dumps(to_dict(plan), indent=2) + "\n"


def _span(text: object, cell: bool = False) -> str:
    """``text`` to set between the catalogue's backticks: one line with no backtick (which
    would close the code span, and what follows would be read as Markdown: a link, an image,
    HTML), and in a table cell no bare ``|`` (GFM splits a cell on it even inside a span)."""
    line = one_line(text).replace("`", "'")
    return line.replace("|", "\\|") if cell else line


def _block(content: str) -> list[str]:
    """A file's content as a fenced block the content cannot close."""
    fence = "`" * max(3, max((len(run) for run in re.findall("`+", content)), default=0) + 1)
    return [fence, content.rstrip("\n"), fence]


def _md_step(step: Step) -> list[str]:
    out = [f"### {step.id}: {one_line(step.title)}", "",
           "- " + t("finding: `{finding}` (cause `{cause}`)", finding=_span(step.finding), cause=_span(step.cause)),
           "- " + t("kind: {kind}; risk: {risk}", kind=step.kind.value, risk=step.risk.value),
           "- " + one_line(t("check: {text}", text=step.check)),
           "- " + one_line(t("verify: {text}", text=step.verify)),
           "- " + one_line(t("revert: {text}", text=step.revert)), ""]
    for change in step.files:
        out += [t("File `{path}`:", path=_span(change.path)), "", *_block(change.content), ""]
    if step.live:
        out += [f"| {t('setting')} | {t('now')} | {t('after')} |", "|---|---|---|"]
        out += [f"| `{_span(v.name, True)}` | {'`' + _span(v.seen, True) + '`' if v.seen is not None else '?'} "
                f"| `{_span(v.new, True)}` |" for v in step.live]
        out.append("")
    for command in step.commands:
        undo = t(" (undo: `{command}`)", command=_span(shlex.join(command.undo))) if command.undo else ""
        out.append("- " + t("run `{command}`{undo}: {why}", command=_span(shlex.join(command.argv)), undo=undo,
                             why=one_line(command.why)))
    if step.commands:
        out.append("")
    if step.flags:
        out += [one_line(t("Engine flags of {engine} (shown, not applied; they live in {where}):",
                           engine=step.flags.engine, where=step.flags.where)),
                "", "```diff"]
        out += [f"- {_span(' '.join(step.flags.remove))}"] if step.flags.remove else []
        out += [f"+ {_span(' '.join(step.flags.add))}"] if step.flags.add else []
        out += ["```", ""]
    out += [f"- [ ] {one_line(item)}" for item in step.manual]
    return out + ([""] if step.manual else [])


def to_markdown(plan: Plan) -> str:
    """The plan as a change ticket. What came from the saved scan (the host, rule ids and
    keys) is set in code spans it cannot close, where Markdown reads no link, image or HTML."""
    out = [t("# Change: llm-doctor fix plan {id}", id=plan.id), "",
           one_line(t("Host `{host}`, from {source}, {created}. Rollback: `llm-doctor fix --revert {id}`.",
                      host=_span(plan.host), source=_span(plan.source), created=plan.created_at, id=plan.id)),
           "", f"| {t('step')} | {t('finding')} | {t('kind')} | {t('risk')} |", "|---|---|---|---|"]
    out += [f"| {s.id} | `{_span(s.finding, True)}` | {s.kind.value} | {s.risk.value} |" for s in plan.steps]
    if not plan.steps:
        out[-2:] = [t("No step: the scan found nothing with a machine-side fix.")]
    out.append("")
    for step in plan.steps:
        out += _md_step(step)
    if plan.no_steps:
        out += ["## " + t("Findings without a step"), ""]
        out += [f"- `{_span((n.rule + ' ' + n.key).strip())}`: {one_line(n.why)}" for n in plan.no_steps]
        out.append("")
    return "\n".join(out)
