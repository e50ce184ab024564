"""``fix --revert`` against journals and plan folders it did not write: it proves the journal
(its MAC chain, its plan, its root, its plans folder, who owns what) before touching
anything, checks every entry even when the MAC holds, never runs a command a journal names,
and answers every malformed shape with one line and exit 3 (never a traceback or a hang)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
from pathlib import Path

import pytest

from doctor.fix.apply import apply_plan
from doctor.fix.model import Command, FileWrite, Kind, Plan, Risk, Step
from doctor.fix.script import to_json
from tests.conftest import run_cli
from tests.fuzz_runs import Run, run_forked, warm_up
from tests.test_fix_root_confine import _tree  # one walk of a tree for both files

warm_up()  # each revert below runs in a fork of this process, every module already imported

PLAN_ID = "20261201T194100Z-abcdef"
OTHER_ID = "20261201T194100Z-123456"
NEW = "/etc/sysctl.d/60-llm-doctor-a.conf"
OWN = "/etc/sysctl.d/50-own.conf"
DROP_IN = "/etc/systemd/system/vllm.service.d/llm-doctor.conf"


def _step(n: int, files=(), commands=()) -> Step:
    return Step(id=f"0{n}-step", rule="network-backlog-small", key="", cause="network-backlog-small",
                kind=Kind.FILE, risk=Risk.NONE, title="t", check="c", verify="v", revert="r",
                files=files, commands=commands)


def _plan(plan_id: str = PLAN_ID, steps=None) -> Plan:
    steps = steps or (_step(1, (FileWrite(NEW, "net.core.somaxconn = 4096\n"), FileWrite(OWN, "new\n"))),
                      _step(2, (FileWrite(DROP_IN, "[Service]\nLimitNOFILE=1048576\n"),),
                            (Command(("systemctl", "daemon-reload"), ("systemctl", "daemon-reload")),)))
    return Plan(id=plan_id, created_at="2026-12-01T19:41:00Z", host="h", source="test", probes=(),
                steps=steps)


@pytest.fixture
def host(tmp_path):
    """A root with a file of its own the plan replaces, the plan applied under it, and an
    outside folder with a file and a folder a forged journal would like to touch."""
    root = tmp_path / "root"
    (root / "etc/sysctl.d").mkdir(parents=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / OWN.lstrip("/")).write_text("old\n")
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "passwd").write_text("root:x:0:0\n")
    before = _tree(root)
    plans = tmp_path / "plans"
    outcomes = apply_plan(_plan(), plans, to_json(_plan()), root)
    assert [o.status for o in outcomes] == ["applied", "applied"]
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    canary = tmp_path / "canary-ran"
    for name in ("canary", "systemctl", "nvidia-smi", "nvidia-ctk"):
        (bin_ / name).write_text(f"#!/bin/sh\necho {name} \"$@\" >> {canary}\n")
        (bin_ / name).chmod(0o755)
    return {"root": root, "plans": plans, "outside": outside, "before": before, "tmp": tmp_path,
            "canary": canary, "path": f"{bin_}:{os.environ['PATH']}", "outside_before": _tree(outside)}


def _revert(h: dict, *extra: str, plan_id: str = PLAN_ID) -> Run:
    os.environ["PATH"], old = h["path"], os.environ["PATH"]
    try:
        return run_forked(["fix", "--revert", plan_id, "--plans-dir", str(h["plans"]), *extra], 20, h["tmp"])
    finally:
        os.environ["PATH"] = old


def _refused(h: dict, run: Run, *words: str) -> None:
    """One line, exit 3, no traceback, nothing outside touched, no command run."""
    assert run.rc == 3, (run.rc, run.stdout, run.stderr, run.uncaught)
    assert not run.uncaught and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    for word in words:
        assert word in run.stderr, run.stderr
    assert _tree(h["outside"]) == h["outside_before"]
    assert not h["canary"].exists()


def _journal(h: dict, plan_id: str = PLAN_ID) -> Path:
    return h["plans"] / plan_id / "journal.jsonl"


def _entries(h: dict) -> list[dict]:
    return [json.loads(line) for line in _journal(h).read_text().splitlines()]


def _sign(h: dict, entries: list[dict]) -> None:
    """Write ``entries`` back with a MAC chain made with the plans folder's own key: the
    strongest forger, one who holds the key, and whose entries are still checked."""
    key = (h["plans"] / ".key").read_bytes()
    prev, lines = "", []
    for entry in entries:
        body = {k: v for k, v in entry.items() if k != "mac"}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        prev = hmac.new(key, prev.encode() + b"\n" + text.encode(), hashlib.sha256).hexdigest()
        lines.append(json.dumps({**body, "mac": prev}))
    _journal(h).write_text("\n".join(lines) + "\n")


def test_a_real_journal_reverts_the_tree_and_says_so_once(host):
    run = _revert(host)
    assert run.rc == 0, run.stderr
    assert _tree(host["root"]) == host["before"]
    _refused(host, _revert(host), "reverted already")


def test_the_plans_folder_and_its_files_are_closed_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        root = tmp_path / "root"
        root.mkdir()
        apply_plan(_plan(), tmp_path / "plans", to_json(_plan()), root)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in [tmp_path / "plans", *(tmp_path / "plans").rglob("*")]}
    assert modes == {"plans": 0o700, ".key": 0o600, PLAN_ID: 0o700, "plan.json": 0o600, "journal.jsonl": 0o600}


def _edit(field: str, value) -> callable:
    def edit(entries: list[dict]) -> None:
        entries[1][field] = value
    return edit


@pytest.mark.parametrize("edit, words", [
    (_edit("path", "/etc/passwd"), "not a file of the plan"),
    (_edit("mode", 0o4755), "not a plain file's"),
    (_edit("mode", 0o666), "not a plain file's"),
    (_edit("created_dirs", ["/etc/sysctl.d", "/tmp"]), "created_dirs"),
    (_edit("old", "!!not base64!!"), "not base64"),
    (_edit("mode", "0644"), "not of its type"),
    (_edit("mode", 2**62), "not a plain file's"),
    (_edit("undo", ["canary"]), "are not those of a file entry"),
    (lambda e: e[1].pop("old"), "are not those of a file entry"),
    (lambda e: e[0].update(files=[*e[0]["files"], "/etc/sysctl.d/../../tmp/x"]), "'..'"),
    (lambda e: e[0].update(files=["/etc/cron.d/x"]), "refused"),
    (lambda e: e[0].update(commands=[["01-step", 0, ["canary"], ["canary"]]]), "not a command llm-doctor plans"),
    (lambda e: e.append({"type": "command", "step": "01-step", "index": 0, "seq": len(e)}), "under --root"),
    (lambda e: e.insert(1, {"type": "reverted", "at": "x", "seq": 1}), "'reverted' mark"),
    (lambda e: e[0].update(plan=OTHER_ID), "the journal of plan"),
    (lambda e: e[0].update(plan_sha256="0" * 64), "plan.json is not the plan"),
    (lambda e: e[0].update(plans="/var/lib/llm-doctor/plans"), "written in the plans folder"),
    (lambda e: e.__setitem__(1, [1, 2]), "not a journal entry"),
])
def test_a_forged_entry_is_refused_even_under_the_key(host, edit, words):
    entries = _entries(host)
    edit(entries)
    for n, entry in enumerate(entries):
        if isinstance(entry, dict) and "seq" in entry and entry.get("type") != "reverted":
            entry["seq"] = n
    applied = _tree(host["root"])
    if isinstance(entries[1], list):
        _journal(host).write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    else:
        _sign(host, entries)
    _refused(host, _revert(host), words)
    assert _tree(host["root"]) == applied  # nothing reverted halfway


@pytest.mark.parametrize("change", ["tamper", "reorder", "drop", "foreign key"])
def test_a_journal_changed_without_the_key_is_refused(host, change):
    lines = _journal(host).read_text().splitlines()
    if change == "tamper":
        lines[1] = lines[1].replace('"mode":420', '"mode":2541')
    elif change == "reorder":
        lines[1], lines[2] = lines[2], lines[1]
    elif change == "drop":
        del lines[1]
    else:
        (host["plans"] / ".key").write_bytes(os.urandom(32))
    _journal(host).write_text("\n".join(lines) + "\n")
    _refused(host, _revert(host), "MAC does not match")


def test_a_journal_of_another_plan_or_root_is_refused(host):
    (host["plans"] / OTHER_ID).mkdir(mode=0o700)
    for name in ("plan.json", "journal.jsonl"):
        data = (host["plans"] / PLAN_ID / name).read_bytes()
        (host["plans"] / OTHER_ID / name).write_bytes(data)
        (host["plans"] / OTHER_ID / name).chmod(0o600)
    _refused(host, _revert(host, plan_id=OTHER_ID), "the journal of plan")
    _refused(host, _revert(host, "--root", str(host["outside"])), "not under --root")


@pytest.mark.parametrize("what, how, words", [
    ("plans", 0o755, "chmod 700"), ("plan", 0o750, "chmod 700"), ("journal", 0o644, "chmod 600"),
    ("key", 0o640, "chmod 600"), ("plan.json", 0o660, "chmod 600"), ("journal", "nobody", "chown 0"),
    ("plans", "nobody", "chown 0"), ("key", "link", "symbolic link"), ("journal", "link", "symbolic link"),
])
def test_loose_permissions_and_strange_owners_are_refused(host, what, how, words):
    path = {"plans": host["plans"], "plan": host["plans"] / PLAN_ID, "journal": _journal(host),
            "key": host["plans"] / ".key", "plan.json": host["plans"] / PLAN_ID / "plan.json"}[what]
    if how == "nobody":
        os.chown(path, 65534, 65534)
    elif how == "link":
        real = path.with_name(path.name + ".real")
        path.rename(real)
        path.symlink_to(real)
    else:
        path.chmod(how)
    _refused(host, _revert(host), words)


def _write_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


def _write_sparse(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(2 << 30)


@pytest.mark.parametrize("shape", [
    '{"type": "head"', "[" * 100_000 + "]" * 100_000, '{"a": ' * 50 + "1" + "}" * 50,
    '{"mode": 99999999999999999999999999999999, "mac": "x"}', '{"mode": 1e999, "mac": "x"}',
    '{"mac": 5}', "null", "[]", '"text"', "\xff\xfe", "", "\n\n\n", '{"mac": "' + "a" * 64 + '"}',
    "fifo", "sparse", "directory", "dev-zero",
])
def test_every_malformed_journal_is_one_line_and_exit_3(host, shape):
    path = _journal(host)
    if shape == "fifo":
        _write_fifo(path)
    elif shape == "sparse":
        _write_sparse(path)
    elif shape == "directory":
        path.unlink()
        path.mkdir(mode=0o700)
    elif shape == "dev-zero":
        path.unlink()
        path.symlink_to("/dev/zero")
    else:
        # each shape as a whole line (a last line without its newline is a torn write, dropped)
        path.write_bytes(shape.encode() + b"\n" if shape != "\xff\xfe" else b"\xff\xfe\n")
    run = _revert(host)
    assert run.rc is not None, "revert hung on the journal"
    _refused(host, run)


@pytest.mark.slow
def test_the_filed_attack_a_hand_made_journal_json_does_nothing(tmp_path):
    """The attack as it was filed, with no plan applied first: a hand-made journal.json in a
    root-only plans folder that deletes a file outside, makes a mode-04755 file, removes a
    folder and names an undo argv. Before, revert did all four."""
    plans, outside, bin_ = tmp_path / "plans", tmp_path / "outside", tmp_path / "bin"
    (plans / OTHER_ID).mkdir(parents=True, mode=0o700)
    plans.chmod(0o700)
    (outside / "keep").mkdir(parents=True)
    (outside / "passwd").write_text("root:x:0:0\n")
    bin_.mkdir()
    (bin_ / "canary").write_text(f"#!/bin/sh\ntouch {tmp_path / 'canary-ran'}\n")
    (bin_ / "canary").chmod(0o755)
    journal = plans / OTHER_ID / "journal.json"
    journal.write_text(json.dumps({"plan": OTHER_ID, "root": None, "entries": [
        {"step": "x", "type": "file", "path": str(outside / "passwd"), "mode": 0o644, "old": None,
         "created_dirs": [str(outside / "keep")]},
        {"step": "x", "type": "file", "path": str(outside / "suid"), "mode": 0o4755,
         "old": base64.b64encode(b"#!/bin/sh\n").decode(), "created_dirs": []},
        {"step": "x", "type": "command", "argv": ["true"], "undo": ["canary"]}]}))
    journal.chmod(0o600)
    before = _tree(outside)
    done = run_cli("fix", "--revert", OTHER_ID, "--plans-dir", str(plans),
                   env={"PATH": f"{bin_}:{os.environ['PATH']}"})
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert _tree(outside) == before and not (tmp_path / "canary-ran").exists()


def test_a_link_planted_after_apply_is_not_followed_by_revert(host):
    """Between apply and revert /etc/sysctl.d becomes a link to a folder outside that holds
    files of the plan's names: revert removes and writes nothing there."""
    sysctl = host["root"] / "etc/sysctl.d"
    sysctl.rename(host["tmp"] / "moved")
    (host["outside"] / "60-llm-doctor-a.conf").write_text("someone else's\n")
    (host["outside"] / "50-own.conf").write_text("someone else's\n")
    host["outside_before"] = _tree(host["outside"])
    sysctl.symlink_to(host["outside"])
    _refused(host, _revert(host), "symbolic link")
    assert (host["root"] / DROP_IN.lstrip("/")).exists()  # checked before any change: none made


def test_commands_are_undone_from_their_shape_never_from_the_journal(tmp_path):
    """A plan that ran commands on this host (no root): persistence mode's undo is built from
    the argv, the reload runs once at the end, and the plan's own undo is read for digits only."""
    ran: list[tuple[str, ...]] = []

    def run(argv):
        ran.append(tuple(argv))
        return None

    plan = _plan(steps=(_step(1, commands=(Command(("nvidia-smi", "-i", "0,1", "-pm", "1"),
                                                   ("nvidia-smi", "-i", "0,1", "-pm", "0")),
                                           Command(("nvidia-smi", "-i", "1", "-pl", "350"),
                                                   ("nvidia-smi", "-i", "1", "-pl", "300")))),
                        _step(2, commands=(Command(("systemctl", "daemon-reload"), ("systemctl", "daemon-reload")),))))
    plans = tmp_path / "plans"
    outcomes = apply_plan(plan, plans, to_json(plan), None, run=run)
    assert [o.status for o in outcomes] == ["applied", "applied"]
    ran.clear()
    from doctor.fix.apply import revert_plan

    revert_plan(plans, PLAN_ID, run=run)
    assert ran == [("nvidia-smi", "-i", "1", "-pl", "300"), ("nvidia-smi", "-i", "0,1", "-pm", "0"),
                   ("systemctl", "daemon-reload")]


def test_a_command_of_no_known_shape_is_never_run_by_apply(tmp_path):
    ran: list[tuple[str, ...]] = []
    plan = _plan(steps=(_step(1, commands=(Command(("canary", "-x"), ("canary", "-y")),)),))
    from doctor.fix.apply import FixError

    with pytest.raises(FixError, match="not a command llm-doctor plans"):
        apply_plan(plan, tmp_path / "plans", to_json(plan), None, run=lambda argv: ran.append(argv))
    assert ran == [] and not (tmp_path / "plans" / PLAN_ID).exists()


def test_a_crash_mid_entry_leaves_what_came_before_revertible(host):
    """A last line cut short (no newline) announced a change never made: it is dropped."""
    with open(_journal(host), "a") as f:
        f.write('{"type":"file","path":"/etc/sysctl.d/x')
    run = _revert(host)
    assert run.rc == 0, run.stderr
    assert _tree(host["root"]) == host["before"]
    _refused(host, _revert(host), "reverted already")


def test_the_journal_is_appended_one_line_per_change(host):
    """Each change writes its own line once (apply is O(n) in bytes), chained from the head."""
    entries = _entries(host)
    assert [e["type"] for e in entries] == ["head", "file", "file", "file"]
    assert [e["seq"] for e in entries] == [0, 1, 2, 3]
    assert entries[0]["files"] == sorted([NEW, OWN, DROP_IN]) and entries[0]["root"] == str(host["root"])
    assert entries[2]["path"] == OWN and base64.b64decode(entries[2]["old"]) == b"old\n"
