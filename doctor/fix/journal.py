"""A plan's journal: what ``fix --apply`` did, written so that ``fix --revert`` can prove it.

The plans folder (0700) holds ``.key``, 32 random bytes made (0600) on first use, and one
folder (0700) per plan with ``plan.json`` and ``journal.jsonl`` (both 0600). The journal is
one JSON line per entry, appended and fsync'd before the change it records is made, so a
crash leaves every change before it revertible and ``--apply`` writes each entry once.
Its first line, the head, ties it to its plan: the plan's id, the root and plans folder it
was applied under, when, the SHA-256 of ``plan.json``, and the files, live settings and
commands the plan's own steps may touch. Every line carries an HMAC-SHA256 under the key
over its own fields and the previous line's MAC, so no line can be forged, changed,
reordered or dropped from the middle without the key.

Reading (``read``) trusts nothing the MAC has not proved and checks what it has anyway:
the folders and files must be the user's own and closed to others (as sudo and ssh refuse
loose permissions), opened without following a link and without blocking (a FIFO), and
sized before being read; each line is parsed with a bound on depth and numbers
(``doctor/jsonfile.py``); each entry has exactly its fields, of their types, and names
only what the head lists, under the head's root. A last line without its newline is a
write a crash cut short: the change it announced was never made, so it is dropped.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor.fix import confine
from doctor.fix.confine import Refused
from doctor.fix.undo import undo_of
from doctor.i18n import t
from doctor.jsonfile import parse

KEY = ".key"
JOURNAL = "journal.jsonl"
PLAN = "plan.json"
VERSION = 1
MAX_JOURNAL_BYTES = 64 << 20
MAX_PLAN_BYTES = 64 << 20
MAX_LINES = 100_000
MAX_DEPTH = 4   # an entry is an object of strings, numbers and lists of them
MAX_OLD_CHARS = (confine.MAX_FILE_BYTES + 2) // 3 * 4
MAX_TEXT = 4096
_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC

# Each entry's fields and their types: exactly these, no more
_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "head": {"seq": (int,), "type": (str,), "journal": (int,), "plan": (str,), "root": (str,),
             "plans": (str,), "created_at": (str,), "plan_sha256": (str,), "files": (list,),
             "live": (list,), "commands": (list,)},
    "file": {"seq": (int,), "type": (str,), "step": (str,), "path": (str,), "mode": (int,),
             "old": (str, type(None)), "created_dirs": (list,)},
    "live": {"seq": (int,), "type": (str,), "step": (str,), "path": (str,), "name": (str,),
             "old": (str,)},
    "command": {"seq": (int,), "type": (str,), "step": (str,), "index": (int,)},
    "reverted": {"seq": (int,), "type": (str,), "at": (str,)},
}


class FixError(Exception):
    """A plan cannot be applied or reverted; the message names the file and what to do."""


def _mac(key: bytes, prev: str, entry: dict) -> str:
    body = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(key, prev.encode() + b"\n" + body.encode(), hashlib.sha256).hexdigest()


def _own(info: os.stat_result, path: Path, folder: bool) -> None:
    """Refuse what is not a folder (a regular file) of the user running llm-doctor, closed
    to group and others."""
    kind = stat.S_ISDIR if folder else stat.S_ISREG
    want = "700" if folder else "600"
    if not kind(info.st_mode):
        raise FixError(t("{path}: not a {what} as llm-doctor makes it: move it away",
                         path=path, what=t("folder") if folder else t("regular file")))
    me = os.geteuid()
    if info.st_uid != me:
        raise FixError(t("{path}: owned by uid {uid}, not by the user running llm-doctor (uid {me}): "
                         "'chown {me} {path}' if it is trusted, else remove it", path=path,
                         uid=info.st_uid, me=me))
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise FixError(t("{path}: mode {mode:04o} lets others in; a plans folder must be the user's "
                         "alone: 'chmod {want} {path}'", path=path, mode=stat.S_IMODE(info.st_mode),
                         want=want))


def check_folder(path: Path) -> None:
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise FixError(t("{path}: {why}", path=path, why=exc.strerror)) from None
    _own(info, path, folder=True)


def _read_own(path: Path, limit: int) -> bytes:
    """The bytes of the user's own closed file ``path``: never through a link, never a FIFO
    (opened non-blocking), sized before it is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _OPEN)
    except OSError as exc:
        raise FixError(t("{path}: cannot read it ({why}); a symbolic link is never followed",
                         path=path, why=exc.strerror)) from None
    try:
        info = os.fstat(fd)
        _own(info, path, folder=False)
        if info.st_size > limit:
            raise FixError(t("{path}: {size:,} bytes, more than a plan ever writes: not llm-doctor's",
                             path=path, size=info.st_size))
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise FixError(t("{path}: cannot read it ({why})", path=path, why=exc.strerror)) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise FixError(t("{path}: grew past {limit:,} bytes while read", path=path, limit=limit))
    return data


def _create(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN, 0o600)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_plans(plans: Path, root: str) -> None:
    """Make the plans folder 0700 whatever the umask (under the root, by the walk that
    refuses links), or refuse one that is not the user's own and closed."""
    where = os.path.abspath(plans)
    inside = root != "/" and os.path.commonpath([root, where]) == root
    try:
        if inside:
            with confine.folder(root, where[len(root):] + "/" + KEY, create=True) as (fd, made):
                if made and fd is not None:
                    os.fchmod(fd, 0o700)
        else:
            plans.parent.mkdir(parents=True, exist_ok=True)
            try:
                plans.mkdir(mode=0o700)
                confine.chmod_folder(str(plans), 0o700)
            except FileExistsError:
                pass
    except Refused as exc:
        raise FixError(str(exc)) from None
    except OSError as exc:
        raise FixError(t("{path}: cannot make the plans folder ({why}); choose another with --plans-dir",
                         path=plans, why=exc.strerror)) from None
    check_folder(plans)


def key(plans: Path, create: bool) -> bytes:
    path = plans / KEY
    if create:
        try:
            _create(path, secrets.token_bytes(32))
        except FileExistsError:
            pass
        except OSError as exc:
            raise FixError(t("{path}: cannot make the plans' key ({why})", path=path,
                             why=exc.strerror)) from None
    if not create and not os.path.lexists(path):
        raise FixError(t("{path}: the plans folder's key is missing: no journal in it can be "
                         "proved, so none is reverted", path=path))
    data = _read_own(path, 64)
    if len(data) != 32:
        raise FixError(t("{path}: not a key llm-doctor made (32 bytes)", path=path))
    return data


class Journal:
    """The journal of one plan being applied, appended to as the plan goes."""

    def __init__(self, plans: Path, root: str, head: dict, plan_json: str) -> None:
        ensure_plans(plans, root)
        self.key = key(plans, create=True)
        folder = plans / head["plan"]
        try:
            folder.mkdir(mode=0o700)
            confine.chmod_folder(str(folder), 0o700)
        except FileExistsError:
            raise FixError(t("{path}: a plan of that id is already there; run again for a new id",
                             path=folder)) from None
        except OSError as exc:
            raise FixError(t("{path}: cannot make the plan directory ({why}); choose another with --plans-dir",
                             path=folder, why=exc.strerror)) from None
        data = plan_json.encode("utf-8", "backslashreplace")
        try:
            _create(folder / PLAN, data)
            self.fd = os.open(folder / JOURNAL, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _OPEN, 0o600)
            os.fchmod(self.fd, 0o600)
        except OSError as exc:
            raise FixError(t("{path}: cannot make the plan directory ({why}); choose another with --plans-dir",
                             path=folder, why=exc.strerror)) from None
        self.prev, self.seq = "", 0
        self.add({"type": "head", "journal": VERSION, **head, "plan_sha256": hashlib.sha256(data).hexdigest()})

    def add(self, entry: dict) -> None:
        """Append ``entry`` (its sequence number and MAC added) and sync it to the disk."""
        entry = {**entry, "seq": self.seq}
        mac = _mac(self.key, self.prev, entry)
        line = json.dumps({**entry, "mac": mac}, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        view = memoryview((line + "\n").encode())
        while view:
            view = view[os.write(self.fd, view):]
        os.fsync(self.fd)
        self.prev, self.seq = mac, self.seq + 1

    def close(self) -> None:
        os.close(self.fd)


@dataclass(frozen=True, slots=True)
class Record:
    """A journal proved: its head, its entries (each checked), and whether it ends reverted."""

    head: dict
    entries: tuple[dict, ...]
    reverted: bool
    path: Path
    last_mac: str   # where the chain goes on
    next_seq: int
    size: int       # the bytes up to the last whole line


def _lines(path: Path, data: bytes) -> list[str]:
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a line a crash cut short
    if len(lines) > MAX_LINES:
        raise FixError(t("{path}: more than {n:,} entries: not a journal llm-doctor wrote",
                         path=path, n=MAX_LINES))
    out = []
    for n, line in enumerate(lines, 1):
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise FixError(t("{path}:{line}: not UTF-8: not a journal llm-doctor wrote",
                             path=path, line=n)) from None
    return out


def _entries(path: Path, lines: list[str], key_: bytes) -> tuple[list[dict], str]:
    """Each line parsed and its MAC proved against the chain."""
    prev, out = "", []
    for n, line in enumerate(lines, 1):
        doc = parse(line, f"{path}:{n}", FixError, MAX_DEPTH)
        mac = doc.get("mac") if isinstance(doc, dict) else None
        if not isinstance(mac, str):
            raise FixError(t("{path}:{line}: not a journal entry llm-doctor wrote (no MAC)", path=path, line=n))
        body = {k: v for k, v in doc.items() if k != "mac"}
        if not hmac.compare_digest(mac.encode("ascii", "replace"), _mac(key_, prev, body).encode()):
            raise FixError(t("{path}:{line}: the entry's MAC does not match: the journal was changed, "
                             "reordered or cut after llm-doctor wrote it, or belongs to another plans "
                             "folder; nothing was reverted", path=path, line=n))
        _fields(body, path, n)
        out.append(body)
        prev = mac
    return out, prev


def _fields(entry: dict, path: Path, n: int) -> None:
    kind = entry.get("type")
    fields = _FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None or (n == 1) != (kind == "head"):
        raise FixError(t("{path}:{line}: an entry of type {kind}: not one llm-doctor writes here",
                         path=path, line=n, kind=repr(kind)[:40]))
    if set(entry) != set(fields):
        raise FixError(t("{path}:{line}: the fields {fields} are not those of a {kind} entry",
                         path=path, line=n, fields=", ".join(sorted(map(str, entry)))[:200], kind=kind))
    for name, types in fields.items():
        value = entry[name]
        if isinstance(value, bool) or not isinstance(value, types) or not _text(value):
            raise FixError(t("{path}:{line}: {field} is {value}, not of its type", path=path, line=n,
                             field=name, value=repr(value)[:40]))
    if entry["seq"] != n - 1:
        raise FixError(t("{path}:{line}: entry number {seq}, out of order", path=path, line=n, seq=entry["seq"]))


def _text(value: Any) -> bool:
    """A string that can be written back (no lone surrogate, which JSON can spell)."""
    try:
        if isinstance(value, str):
            value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _strings(value: Any, size: int) -> bool:
    return isinstance(value, list) and len(value) <= size and all(isinstance(v, str) for v in value)


def _head(head: dict, path: Path, plan_id: str, plans: Path, root: str | None, plan: bytes) -> None:
    """The head must be this plan's, under the root and plans folder named, and list only
    what llm-doctor writes."""
    if head["journal"] != VERSION or head["plan"] != plan_id:
        raise FixError(t("{path}: the journal of plan {other}, not of {plan}", path=path,
                         other=repr(head["plan"])[:60], plan=plan_id))
    if head["plans"] != os.path.abspath(plans):
        raise FixError(t("{path}: written in the plans folder {other}, read from {plans}: a plan is "
                         "reverted from where it was applied", path=path, other=repr(head["plans"])[:200],
                         plans=os.path.abspath(plans)))
    if root is not None and head["root"] != os.path.abspath(root):
        raise FixError(t("{path}: applied under the root {other}, not under --root {root}", path=path,
                         other=repr(head["root"])[:200], root=os.path.abspath(root)))
    if not head["root"].startswith("/") or os.path.abspath(head["root"]) != head["root"]:
        raise FixError(t("{path}: the root {root} is not an absolute path", path=path, root=repr(head["root"])[:200]))
    if not hmac.compare_digest(head["plan_sha256"], hashlib.sha256(plan).hexdigest()):
        raise FixError(t("{path}: plan.json is not the plan this journal was written for", path=path))
    if not (_strings(head["files"], MAX_LINES) and _strings(head["live"], MAX_LINES)):
        raise FixError(t("{path}: the plan's files are not a list of paths", path=path))
    try:
        for file in head["files"]:
            confine.checked(file)
        for file in head["live"]:
            confine.live_checked(file)
    except Refused as exc:
        raise FixError(f"{path}: {exc}") from None
    for command in head["commands"]:
        if not (isinstance(command, list) and len(command) == 4 and isinstance(command[0], str)
                and isinstance(command[1], int) and _strings(command[2], 16) and _strings(command[3], 16)):
            raise FixError(t("{path}: the plan's commands are not [step, index, argv, undo]", path=path))
        if undo_of(command[2], command[3]) is None:
            raise FixError(t("{path}: {command}: not a command llm-doctor plans; nothing was reverted",
                             path=path, command=" ".join(command[2])[:200]))


def _entry(entry: dict, head: dict, path: Path, n: int, last: bool) -> None:
    """An entry names only what the head lists; a file's mode is plain; folders are the
    file's own parents; old bytes decode."""
    kind = entry["type"]

    def bad(what: str) -> FixError:
        return FixError(t("{path}:{line}: {what}; nothing was reverted", path=path, line=n, what=what))

    if kind == "reverted" and not last:
        raise bad(t("a 'reverted' mark before the last entry"))
    if kind == "file":
        if entry["path"] not in head["files"]:
            raise bad(t("{file} is not a file of the plan", file=repr(entry["path"])[:200]))
        if not 0 <= entry["mode"] <= 0o7777 or entry["mode"] & ~confine.MODE_BITS:
            raise bad(t("mode {mode} is not a plain file's (no setuid, setgid, sticky, group or "
                        "other write)", mode=oct(entry["mode"])[:20]))
        parts = entry["path"].split("/")
        parents = {"/".join(parts[:k]) for k in range(2, len(parts))}
        if not _strings(entry["created_dirs"], 16) or not set(entry["created_dirs"]) <= parents \
                or (entry["created_dirs"] and entry["old"] is not None):
            raise bad(t("created_dirs are not folders the file's write made"))
        if entry["old"] is not None:
            if len(entry["old"]) > MAX_OLD_CHARS:
                raise bad(t("the saved bytes are longer than any file llm-doctor replaces"))
            try:
                base64.b64decode(entry["old"], validate=True)
            except (binascii.Error, ValueError):
                raise bad(t("the saved bytes are not base64")) from None
    elif kind == "live":
        if entry["path"] not in head["live"] or len(entry["old"]) > MAX_TEXT or len(entry["name"]) > 200:
            raise bad(t("{file} is not a live setting of the plan", file=repr(entry["path"])[:200]))
    elif kind == "command":
        if head["root"] != "/":
            raise bad(t("a command under --root, where none runs"))
        if not any(c[0] == entry["step"] and c[1] == entry["index"] for c in head["commands"]):
            raise bad(t("a command that is not the plan's"))


def read(plans: Path, plan_id: str, root: str | None) -> Record:
    """The journal of ``plan_id`` in ``plans``, proved and checked; FixError otherwise."""
    folder = plans / plan_id
    if not os.path.lexists(folder):
        raise FixError(t("{path}: no such plan; 'llm-doctor fix --apply' writes one "
                         "(its id is printed; --plans-dir must be the same)", path=folder))
    check_folder(plans)
    check_folder(folder)
    key_ = key(plans, create=False)
    path = folder / JOURNAL
    if not os.path.lexists(path):
        raise FixError(t("{path}: no journal: this plan was not applied by this llm-doctor", path=path))
    data = _read_own(path, MAX_JOURNAL_BYTES)
    lines = _lines(path, data)
    if not lines:
        raise FixError(t("{path}: empty: not a journal llm-doctor wrote", path=path))
    entries, last_mac = _entries(path, lines, key_)
    head = entries[0]
    _head(head, path, plan_id, plans, root, _read_own(folder / PLAN, MAX_PLAN_BYTES))
    for n, entry in enumerate(entries[1:], 2):
        _entry(entry, head, path, n, last=n == len(entries))
    reverted = entries[-1]["type"] == "reverted"
    return Record(head, tuple(entries[1:-1] if reverted else entries[1:]), reverted, path,
                  last_mac, len(entries), data.rfind(b"\n") + 1)


def append(record: Record, plans: Path, entry: dict) -> None:
    """One more entry at the end of a proved journal (the revert's mark), after cutting a
    last line a crash left without its newline."""
    journal = Journal.__new__(Journal)
    journal.key, journal.prev, journal.seq = key(plans, create=False), record.last_mac, record.next_seq
    journal.fd = os.open(record.path, os.O_WRONLY | os.O_APPEND | _OPEN)
    try:
        os.ftruncate(journal.fd, record.size)
        journal.add(entry)
    finally:
        journal.close()
