"""``fix --apply`` and ``fix --revert``: the steps carried out in order, each old value and
file saved first under the plan's directory, and put back byte for byte.

The plan directory holds ``plan.json`` (the plan as planned) and ``journal.json``: one
entry per change made, in order, with what it replaced (a file's bytes and mode, or
"absent" with the folders the write created; a live setting's text; a command's undo). The
journal is rewritten (atomically) after every change, so a step that fails, or a crash,
leaves every change before it revertible.

Under ``root`` the files go below it instead of /, live settings are left alone unless
``live`` says to write them (on this host, e.g. in a network namespace of a test's own),
and commands never run: a root is for review and for tests.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from doctor.fix.model import Command, FileWrite, LiveWrite, Plan, Step
from doctor.i18n import lazy, t, translated

COMMAND_TIMEOUT_S = 120
NVIDIACTL = Path("/dev/nvidiactl")
NVIDIACTL_LINK = Path("/dev/char/195:255")  # /dev/nvidiactl's number, fixed by the driver


class FixError(Exception):
    """A plan cannot be applied or reverted; the message names the file and what to do."""


@dataclass(frozen=True, slots=True)
class Outcome:
    step: str
    status: str   # applied | in place | shown | skipped | failed
    detail: str


# An outcome's status as a person reads it (plan.json, the journal and verify read the words)
STATUS_SAID = {"applied": lazy("applied"), "in place": lazy("in place"), "shown": lazy("shown"),
               "skipped": lazy("skipped"), "failed": lazy("failed")}


def status_said(status: str) -> str:
    return translated(STATUS_SAID.get(status, status))


Runner = Callable[[tuple[str, ...]], str | None]  # None: ran; else why it failed


def run_command(argv: tuple[str, ...]) -> str | None:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                              check=False)
    except FileNotFoundError:
        return t("{program}: not found on this host", program=argv[0])
    except subprocess.TimeoutExpired:
        return t("{command}: still running after {seconds} s, stopped", command=" ".join(argv),
                 seconds=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return t("{command}: exit {code} {tail}", command=" ".join(argv), code=done.returncode,
                 tail=tail[0][:200]).rstrip()
    return None


def _target(path: str, root: Path | None) -> Path:
    return root / path.lstrip("/") if root is not None else Path(path)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.llm-doctor-tmp")
    with open(tmp, "wb") as out:
        out.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


class Journal:
    def __init__(self, plan_dir: Path, plan: Plan, root: Path | None, plan_json: str) -> None:
        self.path = plan_dir / "journal.json"
        self.entries: list[dict] = []
        self.head = {"plan": plan.id, "root": str(root) if root is not None else None}
        try:
            plan_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise FixError(t("{path}: a plan of that id is already there; run again for a new id",
                             path=plan_dir)) from None
        except OSError as exc:
            raise FixError(t("{path}: cannot make the plan directory ({why}); choose another with --plans-dir",
                             path=plan_dir, why=exc.strerror)) from None
        (plan_dir / "plan.json").write_text(plan_json)
        self.save()

    def add(self, entry: dict) -> None:
        self.entries.append(entry)
        self.save()

    def save(self) -> None:
        data = json.dumps({**self.head, "entries": self.entries}, indent=1).encode()
        _write_atomic(self.path, data, 0o600)


def _apply_file(change: FileWrite, step: Step, root: Path | None, journal: Journal) -> bool:
    target = _target(change.path, root)
    new = change.content.encode()
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise FixError(t("{path}: not a regular file; llm-doctor writes only its own files", path=target))
    old = target.read_bytes() if target.exists() else None
    if old == new:
        return False
    created = []
    parent = target.parent
    while not parent.exists():
        created.append(str(parent))
        parent = parent.parent
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o7777 if old is not None else 0o644
    journal.add({"step": step.id, "type": "file", "path": str(target), "mode": mode,
                 "old": None if old is None else base64.b64encode(old).decode(),
                 "created_dirs": created})
    _write_atomic(target, new, mode)
    return True


def _apply_live(value: LiveWrite, step: Step, journal: Journal) -> bool:
    target = Path(value.path)
    try:
        old = target.read_text()
    except OSError as exc:
        raise FixError(t("{path} ({name}): cannot read it ({why})", path=value.path, name=value.name,
                         why=exc.strerror)) from None
    if old.strip() == value.new:
        return False
    journal.add({"step": step.id, "type": "live", "path": value.path, "name": value.name, "old": old})
    try:
        target.write_text(value.new + "\n")
    except OSError as exc:
        raise FixError(t("{path} ({name}): cannot write {value} ({why})", path=value.path, name=value.name,
                         value=value.new, why=exc.strerror)) from None
    return True


def _guard(command: Command) -> None:
    if command.argv[:2] == ("systemctl", "daemon-reload") and NVIDIACTL.exists() and not NVIDIACTL_LINK.exists():
        raise FixError(t("/dev/char lacks the NVIDIA links: a daemon-reload would detach the GPUs of running "
                         "containers; run 'nvidia-ctk system create-dev-char-symlinks --create-all' first"))


def apply_step(step: Step, root: Path | None, live: bool, journal: Journal, run: Runner) -> Outcome:
    if not (step.files or step.live or step.commands):
        return Outcome(step.id, "shown", t("not applied: an engine flag diff") if step.flags
                       else t("not applied: a manual step"))
    changed, skipped = 0, []
    try:
        for change in step.files:
            changed += _apply_file(change, step, root, journal)
        if step.live and root is not None and not live:
            skipped.append(t("{n} live setting(s) left alone under --root (--live writes them)",
                             n=len(step.live)))
        else:
            for value in step.live:
                changed += _apply_live(value, step, journal)
        if step.commands and root is not None:
            skipped.append(t("{n} command(s) not run under --root", n=len(step.commands)))
        elif step.commands and changed == 0 and step.files:
            skipped.append(t("commands not run: the files were already in place"))
        else:
            for command in step.commands:
                _guard(command)
                failed = run(command.argv)
                if failed:
                    raise FixError(failed)
                journal.add({"step": step.id, "type": "command", "argv": list(command.argv),
                             "undo": list(command.undo)})
                changed += 1
    except FixError as exc:
        return Outcome(step.id, "failed", str(exc))
    except OSError as exc:
        return Outcome(step.id, "failed", f"{exc.filename}: {exc.strerror}")
    status = "applied" if changed else ("skipped" if skipped and not (step.files or step.live) else "in place")
    return Outcome(step.id, status, t("; ").join(skipped))


def apply_plan(plan: Plan, plan_dir: Path, plan_json: str, root: Path | None = None,
               live: bool = False, run: Runner = run_command) -> list[Outcome]:
    """Every step in order; the first that fails stops the plan (those before it stay applied
    and revertible with ``revert_plan``)."""
    journal = Journal(plan_dir, plan, root, plan_json)
    outcomes = []
    for step in plan.steps:
        outcome = apply_step(step, root, live, journal, run)
        outcomes.append(outcome)
        if outcome.status == "failed":
            break
    return outcomes


def revert_plan(plan_dir: Path, run: Runner = run_command) -> list[str]:
    """Undo the journal's changes, last first; returns a line per change put back."""
    path = plan_dir / "journal.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise FixError(t("{path}: no such plan; 'llm-doctor fix --apply' writes one "
                         "(its id is printed; --plans-dir must be the same)", path=path)) from None
    except (OSError, ValueError) as exc:
        raise FixError(t("{path}: cannot read the plan's journal ({why})", path=path, why=exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise FixError(t("{path}: not a journal llm-doctor wrote", path=path))
    if doc.get("reverted"):
        raise FixError(t("{path}: this plan was reverted already", path=path))
    done = []
    reload = ("systemctl", "daemon-reload")
    entries = doc["entries"]
    for entry in reversed(entries):
        if entry.get("type") == "command" and tuple(entry.get("undo") or ()) == reload:
            continue  # once, after the drop-ins it would read are gone
        done.append(_undo(entry, run))
    if any(e.get("type") == "command" and tuple(e.get("undo") or ()) == reload for e in entries):
        _guard(Command(reload))
        failed = run(reload)
        if failed:
            raise FixError(failed)
        done.append(t("ran {command}", command="systemctl daemon-reload"))
    doc["reverted"] = True
    _write_atomic(path, json.dumps(doc, indent=1).encode(), 0o600)
    return done


def _undo(entry: dict, run: Runner) -> str:
    kind = entry.get("type")
    if kind == "file":
        target = Path(entry["path"])
        if entry.get("old") is None:
            target.unlink(missing_ok=True)
            for folder in entry.get("created_dirs") or ():
                try:
                    Path(folder).rmdir()
                except OSError:
                    break  # something else was put there since: left as it is
            return t("removed {path}", path=target)
        _write_atomic(target, base64.b64decode(entry["old"]), int(entry.get("mode", 0o644)))
        return t("restored {path}", path=target)
    if kind == "live":
        try:
            Path(entry["path"]).write_text(entry["old"])
        except OSError as exc:
            raise FixError(t("{path}: cannot write the saved value back ({why})", path=entry["path"],
                             why=exc.strerror)) from None
        return f"{entry.get('name', entry['path'])} = {entry['old'].strip()}"
    if kind == "command":
        undo = tuple(entry.get("undo") or ())
        if not undo:
            return t("nothing to undo for {command}", command=" ".join(entry["argv"]))
        failed = run(undo)
        if failed:
            raise FixError(failed)
        return t("ran {command}", command=" ".join(undo))
    raise FixError(t("journal entry of unknown type {kind!r}", kind=kind))
