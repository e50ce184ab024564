"""Fuzz kind "fix-revert": ``llm-doctor fix --revert ID`` on forged, mutated and moved
journals and plan folders.

Each input starts from plans ``fix --apply`` really wrote: files under a root (new files,
a replaced one, a drop-in in a folder the plan made) and a plan that ran commands on this
host (persistence mode, a power limit, a daemon-reload; applied in this process with a
runner that runs nothing). It then breaks them in one of three ways: the journal's bytes
without the key (a byte flipped, lines dropped, swapped, repeated, cut, junk appended, the
file replaced by garbage, deep nesting, huge numbers, a FIFO, a 2 GiB sparse file, a link
to /dev/zero, the filed attack's hand-made ``journal.json``); its entries re-signed with the
plans folder's own key (a path outside or with ``..``, a mode 04755, folders outside to
remove, bad base64, an ``undo`` argv, a command of no known shape, wrong types); or the
folders (loose modes, another owner, the key gone or a link, plan.json changed, the plan
moved to another id, a link planted in the root after apply, another --root).

Besides what every run must hold (tests/fuzz_runs.py ``check``): exit 0 or 3 only, nothing
changed outside the root and the plans folder, and no command run but the undo the
catalogue's table builds for the plan's own commands (the programs on PATH are canaries
that log their argv).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fuzz_fix_apply import escapes, snapshot
from tests.fuzz_runs import Run, Tried, check

PLAN_ID = "20261201T194100Z-abcdef"
CMD_ID = "20261201T194100Z-c0ffee"
CANARIES = ("canary", "nvidia-smi", "systemctl", "nvidia-ctk", "rm", "chmod")
ALLOWED_RUNS = {"nvidia-smi -i 1 -pl 300", "nvidia-smi -i 0,1 -pm 0", "systemctl daemon-reload"}


def _plan(plan_id: str, steps: tuple) -> Any:
    from doctor.fix.model import Plan
    return Plan(id=plan_id, created_at="2026-12-01T19:41:00Z", host="h", source="fuzz", probes=(), steps=steps)


def _step(n: int, files=(), commands=()) -> Any:
    from doctor.fix.model import Kind, Risk, Step
    return Step(id=f"0{n}-step", rule="network-backlog-small", key="", cause="network-backlog-small",
                kind=Kind.FILE, risk=Risk.NONE, title="t", check="c", verify="v", revert="r",
                files=files, commands=commands)


def base_plans(base: Path) -> Path:
    """The applied plans, once per campaign: base/fix-revert/{root,plans}."""
    from doctor.fix.apply import apply_plan
    from doctor.fix.model import Command, FileWrite
    from doctor.fix.script import to_json

    top = base / "fix-revert"
    if top.exists():
        return top
    root = top / "root"
    (root / "etc/sysctl.d").mkdir(parents=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/sysctl.d/50-own.conf").write_text("old\n")
    files = _plan(PLAN_ID, (
        _step(1, (FileWrite("/etc/sysctl.d/60-llm-doctor-a.conf", "net.core.somaxconn = 4096\n"),
                  FileWrite("/etc/sysctl.d/50-own.conf", "new\n"))),
        _step(2, (FileWrite("/etc/systemd/system/vllm.service.d/llm-doctor.conf", "[Service]\n"),),
              (Command(("systemctl", "daemon-reload"), ("systemctl", "daemon-reload")),))))
    apply_plan(files, top / "plans", to_json(files), root)
    commands = _plan(CMD_ID, (
        _step(1, commands=(Command(("nvidia-smi", "-i", "0,1", "-pm", "1"), ("nvidia-smi", "-i", "0,1", "-pm", "0")),
                           Command(("nvidia-smi", "-i", "1", "-pl", "350"), ("nvidia-smi", "-i", "1", "-pl", "300")))),
        _step(2, commands=(Command(("systemctl", "daemon-reload"), ("systemctl", "daemon-reload")),))))
    apply_plan(commands, top / "plans", to_json(commands), None, run=lambda argv: None)
    return top


def _resign(plans: Path, journal: Path, entries: list) -> None:
    key = (plans / ".key").read_bytes()
    prev, lines = "", []
    for entry in entries:
        body = {k: v for k, v in entry.items() if k != "mac"} if isinstance(entry, dict) else entry
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        prev = hmac.new(key, prev.encode() + b"\n" + text.encode(), hashlib.sha256).hexdigest()
        lines.append(json.dumps({**body, "mac": prev}) if isinstance(body, dict) else text)
    journal.write_text("\n".join(lines) + "\n")


def _bytes_mutation(rng: random.Random, journal: Path, outside: Path) -> str:
    data = journal.read_bytes()
    lines = data.split(b"\n")[:-1]
    choice = rng.randrange(12)
    if choice == 0 and data:
        i = rng.randrange(len(data))
        journal.write_bytes(data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:])
        return "a bit flipped"
    if choice == 1 and len(lines) > 1:
        del lines[rng.randrange(len(lines))]
    elif choice == 2 and len(lines) > 1:
        i, j = rng.sample(range(len(lines)), 2)
        lines[i], lines[j] = lines[j], lines[i]
    elif choice == 3:
        lines.append(rng.choice(lines))
    elif choice == 4:
        journal.write_bytes(data[:rng.randrange(len(data) + 1)])
        return "cut"
    elif choice == 5:
        journal.write_bytes(rng.choice([b"[" * 200_000, b'{"a":' * 5000, b'{"mac": 1e999}\n',
                                        b'{"seq": 99999999999999999999999}\n', bytes(rng.randrange(256) for _ in range(500)),
                                        b"", b"\n", b"null\n", b"\xff\xfe\n"]))
        return "garbage"
    elif choice == 6:
        journal.unlink()
        os.mkfifo(journal, 0o600)
        return "a FIFO"
    elif choice == 7:
        with open(journal, "r+b") as f:
            f.truncate(2 << 30)
        return "2 GiB sparse"
    elif choice == 8:
        journal.unlink()
        journal.symlink_to(rng.choice(["/dev/zero", str(outside / "theirs.conf"), "/proc/self/mem"]))
        return "a link"
    elif choice == 9:
        (journal.parent / "journal.json").write_text(json.dumps({"plan": PLAN_ID, "root": None, "entries": [
            {"step": "x", "type": "file", "path": str(outside / "theirs.conf"), "old": None,
             "created_dirs": [str(outside / "keep")]},
            {"step": "x", "type": "command", "argv": ["true"], "undo": ["canary", "ran"]}]}))
        journal.unlink()
        return "the filed attack's journal.json"
    else:
        lines.append(b'{"type":"file","seq":' + str(len(lines)).encode() + b',"mac":"' + b"0" * 64 + b'"}')
    journal.write_bytes(b"\n".join(lines) + b"\n")
    return f"lines ({choice})"


def _keyed_mutation(rng: random.Random, plans: Path, journal: Path, outside: Path) -> str:
    entries: list = [json.loads(line) for line in journal.read_text().splitlines()]
    entry = rng.choice(entries[1:] or entries)
    head = entries[0]
    target = str(outside / "theirs.conf")
    choices: list[tuple[str, Callable[[], Any]]] = [
        ("path outside", lambda: entry.__setitem__("path", target)),
        ("path climbs", lambda: entry.__setitem__("path", "/etc/sysctl.d/../../" + "../" * rng.randint(1, 9) + "x")),
        ("head lists outside", lambda: head["files"].append(target)),
        ("head lists ..", lambda: head["files"].append("/etc/sysctl.d/../../outside/theirs.conf")),
        ("mode 04755", lambda: entry.__setitem__("mode", rng.choice([0o4755, 0o2755, 0o1777, 0o666, -1, 2**62, 1.5]))),
        ("created_dirs outside", lambda: entry.__setitem__("created_dirs", [str(outside), str(outside / "keep"), "/etc"])),
        ("bad base64", lambda: entry.__setitem__("old", rng.choice(["!!", "YQ", "=" * 9, "a" * 2_000_000]))),
        ("an undo argv", lambda: entry.__setitem__("undo", ["canary", "undo"])),
        ("an argv", lambda: entry.__setitem__("argv", ["canary", "argv"])),
        ("a command of no known shape", lambda: head["commands"].append(["01-step", 9, ["canary"], ["canary"]])
         or entries.append({"type": "command", "step": "01-step", "index": 9})),
        ("head command changed", lambda: [c.__setitem__(2, ["canary", "x"]) for c in head["commands"][:1]]),
        ("planned undo changed", lambda: [c.__setitem__(3, ["canary", "-i", "1", "-pl", "1; canary"])
                                          for c in head["commands"][:2]]),
        ("wrong type", lambda: entry.__setitem__(rng.choice(list(entry)), rng.choice([None, [], {}, 1, "x", True]))),
        ("a field gone", lambda: entry.pop(rng.choice(list(entry)))),
        ("live outside", lambda: entries.append({"type": "live", "step": "x", "path": target, "name": "x", "old": "1"})),
        ("reverted early", lambda: entries.insert(1, {"type": "reverted", "at": "x"})),
        ("another plan", lambda: head.__setitem__("plan", CMD_ID)),
        ("plan.json hash", lambda: head.__setitem__("plan_sha256", "0" * 64)),
    ]
    name, change = rng.choice(choices)
    change()
    for n, e in enumerate(entries):
        if isinstance(e, dict):
            e["seq"] = n if rng.random() < 0.95 else n + 1
    _resign(plans, journal, entries)
    return f"keyed: {name}"


def _folder_mutation(rng: random.Random, work: Path, plans: Path, plan_id: str, root: Path,
                     outside: Path) -> tuple[str, list[str]]:
    folder = plans / plan_id
    choice = rng.randrange(9)
    if choice == 0:
        rng.choice([plans, folder]).chmod(rng.choice([0o755, 0o750, 0o777, 0o701]))
        return "a folder open to others", []
    if choice == 1:
        path = rng.choice([plans, folder, folder / "journal.jsonl", plans / ".key", folder / "plan.json"])
        rng.choice([lambda: os.chown(path, 65534, 65534), lambda: path.chmod(0o644)])()
        return f"{path.name}: another owner or open", []
    if choice == 2:
        key = plans / ".key"
        key.unlink()
        rng.choice([lambda: None, lambda: key.symlink_to(outside / "theirs.conf"),
                    lambda: key.write_bytes(os.urandom(rng.choice([32, 31, 33])))])()
        key.chmod(0o600) if key.exists() and not key.is_symlink() else None
        return "the key gone or replaced", []
    if choice == 3:
        with open(folder / "plan.json", "a") as f:
            f.write(" ")
        return "plan.json changed", []
    if choice == 4:
        other = "20261201T194100Z-ffffff"
        shutil.copytree(folder, plans / other, symlinks=True)
        return "the plan moved to another id", ["--as", other]
    if choice == 5:
        sysctl = root / "etc/sysctl.d"
        if sysctl.exists():
            sysctl.rename(work / "moved")
            for name in ("60-llm-doctor-a.conf", "50-own.conf"):
                (outside / name).write_text("someone else's\n")
            sysctl.symlink_to(outside)
        return "a link planted after apply", []
    if choice == 6:
        return "another --root", ["--root", str(rng.choice([outside, work, Path("/")]))]
    if choice == 7:
        shutil.rmtree(folder)
        folder.symlink_to(outside)
        return "the plan folder a link", []
    return "untouched", []


def _canaries(work: Path) -> Path:
    bin_ = work / "bin"
    bin_.mkdir()
    for name in CANARIES:
        (bin_ / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {work / "ran.log"}\n')
        (bin_ / name).chmod(0o755)
    return bin_


def try_fix_revert(base: Path, work: Path, rng: random.Random, out: Any, n: int, bound_s: float,
                   runner: Callable[[list[str], float, Path], Run], evaluate_share: float) -> list[Tried]:
    top = base_plans(base)
    root, plans = work / "root", work / "plans"
    shutil.copytree(top / "root", root, symlinks=True)
    shutil.copytree(top / "plans", plans, symlinks=True)
    _rebase(top, work, plans)
    outside = work / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "theirs.conf").write_text("kernel.panic = 10\n")
    plan_id = rng.choice([PLAN_ID, PLAN_ID, CMD_ID])
    journal = plans / plan_id / "journal.jsonl"
    layer, extra = rng.randrange(4), []
    if layer == 0:
        what = _bytes_mutation(rng, journal, outside)
    elif layer == 1:
        what = _keyed_mutation(rng, plans, journal, outside)
    elif layer == 2:
        what, extra = _folder_mutation(rng, work, plans, plan_id, root, outside)
    else:
        what = "untouched"
    if extra[:1] == ["--as"]:
        plan_id, extra = extra[1], []
    before = snapshot(outside)
    bin_ = _canaries(work)
    argv = ["fix", "--revert", plan_id, "--plans-dir", str(plans), *extra]
    os.environ["PATH"], old = f"{bin_}:{os.environ['PATH']}", os.environ["PATH"]
    try:
        run = runner(argv, bound_s, work)
    finally:
        os.environ["PATH"] = old
    verdict = check(run, out, False, ())
    if snapshot(outside) != before or escapes(work):
        verdict.add("write-outside")
    ran = (work / "ran.log").read_text().splitlines() if (work / "ran.log").exists() else []
    if any(line not in ALLOWED_RUNS for line in ran):
        verdict.add("command-run")
    if run.rc is not None and run.rc not in (0, 3):
        verdict.add(f"revert-exit-{run.rc}")
    return [Tried("fix-revert", f"{plan_id}: {what}", argv, run, verdict)]


def _rebase(top: Path, work: Path, plans: Path) -> None:
    """The copied journals name the copy's root and plans folder, re-signed with the copy's
    key: the plans a real apply in ``work`` would have left."""
    for folder in plans.iterdir():
        journal = folder / "journal.jsonl"
        if not journal.exists():
            continue
        entries = [json.loads(line) for line in journal.read_text().splitlines()]
        if entries[0]["root"] != "/":
            entries[0]["root"] = str(work / "root")
        entries[0]["plans"] = str(plans)
        _resign(plans, journal, entries)

