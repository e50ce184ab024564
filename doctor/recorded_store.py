"""The recorded directory on disk: guarded reads and checked manifests.

Every read a replay makes of a recorded host goes through ``Store``: only regular files
and directories inside the recorded directory are read. A symbolic link out of it (or
to itself), a FIFO, a device or an oversized file is refused with a message that names
it, so that a recording from someone else can neither hang a scan nor make it read and
report this machine's files. ``load_manifest`` and ``load_json`` check every section's
types before a probe sees them: a wrong value is an error naming the file and key.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from doctor.host import HostReadError, Reason
from doctor.tomlfile import parse as parse_toml

FS_FILE_LIMIT = 16 << 20  # a /proc or /sys file; cpuinfo of 512 CPUs is ~1 MiB
DATA_FILE_LIMIT = 64 << 20  # host.toml, measurements.json, a recorded page
READABLE_FORMATS = (1, 2)
LEVELS = ("quick", "standard", "full")
MAX_INT = 2**63


class RecordedHostError(Exception):
    """A recorded host directory cannot be read; the message says which file and why."""


class Store:
    """A recorded host's directory, read only through guards."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.real_root = os.path.realpath(self.root)
        self.fs = self.root / "fs"

    def _inside(self, real: str) -> bool:
        return real == self.real_root or real.startswith(self.real_root + os.sep)

    def read_bytes(self, local: Path, what: str, limit: int = FS_FILE_LIMIT) -> bytes:
        """A regular file inside the directory; HostReadError(what, …) otherwise."""
        if not os.path.lexists(local):
            raise HostReadError(what, Reason.NOT_FOUND)
        real = os.path.realpath(local)
        if not self._inside(real):
            raise HostReadError(what, Reason.FAILED, f"{local} points outside the recorded host")
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as exc:  # a link to itself (ELOOP), to nothing, or unreadable
            raise HostReadError(what, Reason.FAILED, f"{local}: {exc.strerror}") from None
        mode = os.fstat(fd).st_mode  # before fdopen, which refuses a directory itself
        if not stat.S_ISREG(mode):
            os.close(fd)
            if stat.S_ISDIR(mode):
                raise HostReadError(what, Reason.NOT_FOUND, f"{local} is a directory")
            raise HostReadError(what, Reason.FAILED,
                                f"{local} is a {_kind_of(mode)}, not a regular file")
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise HostReadError(what, Reason.FAILED, f"{local} is larger than {limit >> 20} MiB")
        return data

    def list_dirs(self, local: Path, what: str) -> list[str]:
        """Real subdirectories (not links, not dot-names) of a directory inside the root."""
        real = os.path.realpath(local)
        if not self._inside(real):
            raise HostReadError(what, Reason.FAILED, f"{local} points outside the recorded host")
        if os.path.islink(local) or not os.path.isdir(local):
            raise HostReadError(what, Reason.NOT_FOUND)
        try:
            with os.scandir(local) as it:
                return sorted(e.name for e in it
                              if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
        except OSError as exc:
            raise HostReadError(what, Reason.FAILED, f"{local}: {exc.strerror}") from None

    def read_link(self, local: Path, what: str) -> str:
        """The target text of a stored link; the target itself is never followed."""
        parent = os.path.realpath(local.parent)
        if not self._inside(parent):
            raise HostReadError(what, Reason.FAILED, f"{local} points outside the recorded host")
        if not os.path.islink(local):
            raise HostReadError(what, Reason.NOT_FOUND)
        return os.readlink(local)


def _kind_of(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _read_data(store: Store, name: str) -> str | None:
    path = store.root / name
    try:
        data = store.read_bytes(path, str(path), DATA_FILE_LIMIT)
    except HostReadError as exc:
        if exc.reason == Reason.NOT_FOUND:
            return None
        raise RecordedHostError(f"{path}: cannot be read: {exc.detail or exc.reason}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordedHostError(f"{path}: not UTF-8 text (byte {exc.start}); "
                                "recordings are written as UTF-8") from None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number; write null for a value that is absent")


def load_json(store: Store, name: str, default: Any) -> Any:
    """``name`` inside the directory as JSON (no NaN, no Infinity), or ``default``."""
    text = _read_data(store, name)
    if text is None:
        return default
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise RecordedHostError(f"{store.root / name}: not valid JSON: {exc}") from None
    except RecursionError:
        raise RecordedHostError(f"{store.root / name}: nested too deeply to be a recording") from None
    except ValueError as exc:  # NaN, or an integer of thousands of digits
        raise RecordedHostError(f"{store.root / name}: {exc}") from None


def load_manifest(store: Store) -> dict[str, Any]:
    path = store.root / "host.toml"
    text = _read_data(store, "host.toml")
    if text is None:
        raise RecordedHostError(
            f"{path}: not found. A recorded host is a directory written by "
            "'llm-doctor capture DIR' with a host.toml inside (docs/recorded-host.md).")
    manifest = parse_toml(text, path, RecordedHostError)  # keys and nesting bounded first
    check_manifest(manifest, str(path))
    return manifest


class _Checker:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, key: str, expected: str, value: Any) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise RecordedHostError(f"{self.where}: {key}: expected {expected}, got {shown}")

    def table(self, value: Any, key: str) -> dict:
        if not isinstance(value, dict):
            self.fail(key, "a table", value)
        return value

    def text(self, value: Any, key: str) -> str:
        if not isinstance(value, str):
            self.fail(key, "a string", value)
        return value

    def count(self, value: Any, key: str, low: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < MAX_INT:
            self.fail(key, f"an integer from {low} to 2^63", value)
        return value

    def strings(self, value: Any, key: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(key, "a list of strings", value)
        return value

    def reason(self, value: Any, key: str) -> None:
        if not isinstance(value, str) or value not in {r.value for r in Reason}:
            self.fail(key, "a read-failure reason (" + ", ".join(r.value for r in Reason) + ")", value)


def check_manifest(manifest: dict[str, Any], where: str) -> None:
    """Every section's types, so that a probe never meets a wrong one (docs/recorded-host.md)."""
    c = _Checker(where)
    host = c.table(manifest.get("host", {}), "[host]")
    version = host.get("format")
    if isinstance(version, bool) or not isinstance(version, int):
        c.fail("[host] format", "an integer format version", version)
        return
    if version not in READABLE_FORMATS:
        newer = version > max(READABLE_FORMATS)
        raise RecordedHostError(
            f"{where}: [host] format = {version}; this llm-doctor reads format "
            f"{' and '.join(map(str, READABLE_FORMATS))}. "
            + ("Upgrade llm-doctor to replay it." if newer else "Re-capture the host with this version."))
    for key in ("hostname", "captured_at", "llm_doctor_version"):
        if key in host:
            c.text(host[key], f"[host] {key}")
    if "level" in host and host["level"] not in LEVELS:
        c.fail("[host] level", "one of quick, standard, full", host["level"])
    if "model_dirs" in host:
        c.strings(host["model_dirs"], "[host] model_dirs")
    for key, reason in c.table(manifest.get("errors", {}), "[errors]").items():
        c.reason(reason, f"[errors] {key!r}")
    for path, info in c.table(manifest.get("paths", {}), "[paths]").items():
        at = f"[paths.{path!r}]"
        c.table(info, at)
        device = c.text(info.get("device"), f"{at} device")
        if not all(p.isdigit() for p in device.split(":")) or device.count(":") != 1:
            c.fail(f"{at} device", "MAJOR:MINOR like '259:1'", device)
        if not isinstance(info.get("is_dir", True), bool):
            c.fail(f"{at} is_dir", "true or false", info.get("is_dir"))
        for key in ("fs_total_bytes", "fs_free_bytes"):
            c.count(info.get(key), f"{at} {key}")
    for path, listing in c.table(manifest.get("files", {}), "[files]").items():
        for name, size in c.table(listing, f"[files.{path!r}]").items():
            c.count(size, f"[files.{path!r}] {name!r}")
    for path, listing in c.table(manifest.get("links", {}), "[links]").items():
        for name, target in c.table(listing, f"[links.{path!r}]").items():
            c.text(target, f"[links.{path!r}] {name!r}")
    commands = manifest.get("commands", [])
    if not isinstance(commands, list):
        c.fail("[[commands]]", "an array of tables", commands)
    for i, cmd in enumerate(commands):
        at = f"[[commands]] #{i + 1}"
        c.table(cmd, at)
        if not c.strings(cmd.get("argv"), f"{at} argv"):
            c.fail(f"{at} argv", "a non-empty list of strings", [])
        if "rc" in cmd and (isinstance(cmd["rc"], bool) or not isinstance(cmd["rc"], int)
                            or not -256 < cmd["rc"] < 256):
            c.fail(f"{at} rc", "an exit status from -255 to 255", cmd["rc"])
        for key in ("stdout_file", "stderr"):
            if key in cmd:
                c.text(cmd[key], f"{at} {key}")


def check_entries(entries: Any, where: str, key_fields: tuple[str, ...]) -> list[dict]:
    """http.json and nvml.json: a list of objects with ``key_fields`` and a value or error."""
    c = _Checker(where)
    if not isinstance(entries, list):
        c.fail("top level", "a JSON list of objects", entries)
    for i, entry in enumerate(entries):
        at = f"entry #{i + 1}"
        c.table(entry, at)
        for key in key_fields:
            if key not in entry:
                c.fail(at, f"a '{key}' field", entry)
        if "error" in entry:
            c.reason(entry["error"], f"{at} error")
    return entries
