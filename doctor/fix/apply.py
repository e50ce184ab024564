"""``fix --apply`` and ``fix --revert``: the steps carried out in order, each old value and
file saved first in the plan's journal (``doctor/fix/journal.py``), and put back byte for
byte by a revert that believes only what the journal's MAC proves.

Every file a plan writes is one of the shapes the catalogue writes, reached under the root
without following a link (``doctor/fix/confine.py``); a command runs only if it is of a
shape whose undo llm-doctor knows (``doctor/fix/undo.py``), and its undo is built from that
shape, never read from the journal. Under ``root`` the files go below it instead of /,
live settings are left alone unless ``live`` says to write them (on this host, e.g. in a
network namespace of a test's own), and commands never run: a root is for review and tests.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from doctor.fix import confine, journal
from doctor.fix.confine import Refused
from doctor.fix.journal import FixError, Journal
from doctor.fix.model import Command, FileWrite, LiveWrite, Plan, Step
from doctor.fix.undo import RELOAD, undo_of
from doctor.i18n import lazy, t, translated

__all__ = ["FixError", "Outcome", "apply_plan", "revert_plan", "status_said"]

COMMAND_TIMEOUT_S = 120
NVIDIACTL = Path("/dev/nvidiactl")
NVIDIACTL_LINK = Path("/dev/char/195:255")  # /dev/nvidiactl's number, fixed by the driver


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


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _head(plan: Plan, root: str, plans: Path) -> dict:
    """What the journal is for: the plan, where, and everything its steps may touch. A path
    or command of any shape llm-doctor does not write refuses the plan before any change."""
    files: set[str] = set()
    live: set[str] = set()
    commands: list[list] = []
    try:
        for step in plan.steps:
            files.update(confine.checked(change.path) for change in step.files)
            live.update(confine.live_checked(value.path) for value in step.live)
            for n, command in enumerate(step.commands):
                if undo_of(command.argv, command.undo) is None:
                    raise Refused(t("{command}: not a command llm-doctor plans; refused",
                                    command=" ".join(command.argv)[:200]))
                commands.append([step.id, n, list(command.argv), list(command.undo)])
    except Refused as exc:
        raise FixError(str(exc)) from None
    return {"plan": plan.id, "root": root, "plans": os.path.abspath(plans), "created_at": _now(),
            "files": sorted(files), "live": sorted(live), "commands": commands}


def _apply_file(change: FileWrite, step: Step, root: str, journal_: Journal) -> bool:
    path = confine.checked(change.path)
    name, shown = path.rsplit("/", 1)[1], confine.shown(root, path)
    try:
        new = change.content.encode()
    except UnicodeEncodeError:
        raise Refused(t("{path}: its content is not text that can be written", path=shown)) from None
    with confine.folder(root, path, create=True) as (fd, made):
        assert fd is not None  # noqa: S101 (create=True makes every folder or raises)
        old = confine.read_file(fd, name, shown)
        if old is not None and old[0] == new:
            return False
        mode = old[1] & confine.MODE_BITS if old is not None else 0o644
        journal_.add({"type": "file", "step": step.id, "path": path, "mode": mode,
                      "old": None if old is None else base64.b64encode(old[0]).decode(),
                      "created_dirs": made})
        confine.write_file(fd, name, new, mode)
    return True


def _read_live(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read(journal.MAX_TEXT + 1)
    if len(text) > journal.MAX_TEXT:
        raise Refused(t("{path}: longer than any live setting", path=path))
    return text


def _apply_live(value: LiveWrite, step: Step, journal_: Journal) -> bool:
    path = confine.live_checked(value.path)
    try:
        old = _read_live(path)
    except OSError as exc:
        raise FixError(t("{path} ({name}): cannot read it ({why})", path=value.path, name=value.name,
                         why=exc.strerror)) from None
    if old.strip() == value.new:
        return False
    journal_.add({"type": "live", "step": step.id, "path": path, "name": value.name[:200], "old": old})
    try:
        Path(path).write_text(value.new + "\n")
    except OSError as exc:
        raise FixError(t("{path} ({name}): cannot write {value} ({why})", path=value.path, name=value.name,
                         value=value.new, why=exc.strerror)) from None
    return True


def _guard(command: Command) -> None:
    if command.argv[:2] == ("systemctl", "daemon-reload") and NVIDIACTL.exists() and not NVIDIACTL_LINK.exists():
        raise FixError(t("/dev/char lacks the NVIDIA links: a daemon-reload would detach the GPUs of running "
                         "containers; run 'nvidia-ctk system create-dev-char-symlinks --create-all' first"))


def apply_step(step: Step, root: str, live: bool, journal_: Journal, run: Runner) -> Outcome:
    if not (step.files or step.live or step.commands):
        return Outcome(step.id, "shown", t("not applied: an engine flag diff") if step.flags
                       else t("not applied: a manual step"))
    under_root = root != "/"
    changed, skipped = 0, []
    try:
        for change in step.files:
            changed += _apply_file(change, step, root, journal_)
        if step.live and under_root and not live:
            skipped.append(t("{n} live setting(s) left alone under --root (--live writes them)",
                             n=len(step.live)))
        else:
            for value in step.live:
                changed += _apply_live(value, step, journal_)
        if step.commands and under_root:
            skipped.append(t("{n} command(s) not run under --root", n=len(step.commands)))
        elif step.commands and changed == 0 and step.files:
            skipped.append(t("commands not run: the files were already in place"))
        else:
            for n, command in enumerate(step.commands):
                _guard(command)
                failed = run(command.argv)
                if failed:
                    raise FixError(failed)
                journal_.add({"type": "command", "step": step.id, "index": n})
                changed += 1
    except (FixError, Refused) as exc:
        return Outcome(step.id, "failed", str(exc))
    except OSError as exc:
        return Outcome(step.id, "failed", f"{exc.filename or step.id}: {exc.strerror}")
    except ValueError as exc:  # text that cannot be written (a lone surrogate in a value)
        return Outcome(step.id, "failed", f"{step.id}: {exc}")
    status = "applied" if changed else ("skipped" if skipped and not (step.files or step.live) else "in place")
    return Outcome(step.id, status, t("; ").join(skipped))


def apply_plan(plan: Plan, plans: Path, plan_json: str, root: Path | None = None,
               live: bool = False, run: Runner = run_command) -> list[Outcome]:
    """Every step in order; the first that fails stops the plan (those before it stay applied
    and revertible with ``revert_plan``). The plan is kept in ``plans``/<its id>."""
    root_s = os.path.abspath(root) if root is not None else "/"
    head = _head(plan, root_s, plans)
    try:
        os.makedirs(root_s, exist_ok=True)  # the folder named by --root: made as named
    except OSError as exc:
        raise FixError(t("{path}: cannot make the --root folder ({why})",
                         path=root_s, why=exc.strerror)) from None
    journal_ = Journal(plans, root_s, head, plan_json)
    outcomes = []
    try:
        for step in plan.steps:
            outcome = apply_step(step, root_s, live, journal_, run)
            outcomes.append(outcome)
            if outcome.status == "failed":
                break
    finally:
        journal_.close()
    return outcomes


def revert_plan(plans: Path, plan_id: str, root: str | None = None,
                run: Runner = run_command) -> list[str]:
    """Undo the journal's changes, last first; returns a line per change put back. The
    journal must prove itself (``journal.read``) before anything is touched."""
    record = journal.read(plans, plan_id, root)
    if record.reverted:
        raise FixError(t("{path}: this plan was reverted already", path=record.path))
    head = record.head
    commands = {(c[0], c[1]): (c[2], c[3]) for c in head["commands"]}
    done, reload = [], False
    try:
        for entry in record.entries:  # every folder reached without a link before any change
            if entry["type"] == "file":
                with confine.folder(head["root"], entry["path"], create=False):
                    pass
        for entry in reversed(record.entries):
            if entry["type"] == "command":
                argv, planned = commands[(entry["step"], entry["index"])]
                undo = undo_of(argv, planned)
                if undo == RELOAD:
                    reload = True  # once, after the drop-ins it would read are gone
                    continue
                done.append(_undo_command(argv, undo, run))
            elif entry["type"] == "file":
                done.append(_undo_file(entry, head["root"]))
            else:
                done.append(_undo_live(entry))
    except Refused as exc:
        raise FixError(str(exc)) from None
    except OSError as exc:
        raise FixError(t("{path}: {why}", path=exc.filename, why=exc.strerror)) from None
    if reload:
        _guard(Command(RELOAD))
        failed = run(RELOAD)
        if failed:
            raise FixError(failed)
        done.append(t("ran {command}", command="systemctl daemon-reload"))
    journal.append(record, plans, {"type": "reverted", "at": _now()})
    return done


def _undo_file(entry: dict, root: str) -> str:
    path = entry["path"]
    name, shown = path.rsplit("/", 1)[1], confine.shown(root, path)
    if entry["old"] is None:
        with confine.folder(root, path, create=False) as (fd, _):
            if fd is not None:
                confine.remove_file(fd, name)
        confine.remove_folders(root, entry["created_dirs"])
        return t("removed {path}", path=shown)
    with confine.folder(root, path, create=True) as (fd, _):
        assert fd is not None  # noqa: S101 (create=True makes every folder or raises)
        confine.write_file(fd, name, base64.b64decode(entry["old"], validate=True), entry["mode"])
    return t("restored {path}", path=shown)


def _undo_live(entry: dict) -> str:
    try:
        Path(confine.live_checked(entry["path"])).write_text(entry["old"])
    except OSError as exc:
        raise FixError(t("{path}: cannot write the saved value back ({why})", path=entry["path"],
                         why=exc.strerror)) from None
    return f"{entry['name'] or entry['path']} = {entry['old'].strip()}"


def _undo_command(argv: list[str], undo: tuple[str, ...] | None, run: Runner) -> str:
    if undo is None:
        raise FixError(t("{command}: not a command llm-doctor plans; its undo is not run",
                         command=" ".join(argv)[:200]))
    if not undo:
        return t("nothing to undo for {command}", command=" ".join(argv))
    failed = run(undo)
    if failed:
        raise FixError(failed)
    return t("ran {command}", command=" ".join(undo))
