"""Recorded hosts: replaying one (``RecordedHost``), capturing one (``RecordingHost``), and
the one writer of the format (``RecordWriter``), which capture and the test fixtures share.

The format is documented for people in docs/recorded-host.md: ``host.toml`` (metadata,
failed reads, stat results, listings, commands), ``measurements.json``, ``http.json`` with
``http/`` (engine pages), ``nvml.json`` (NVML calls), ``amdsmi.json`` (AMD SMI calls), and
``fs/`` with every file read at
its absolute path. Each kind of read is one class in doctor/seam/read_kinds.py.
"""

from __future__ import annotations

import json
import os
import posixpath
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from doctor.i18n import t
from doctor.redact import redact_text
from doctor.seam import identity
from doctor.seam import read_kinds as kinds
from doctor.seam import recorded_redact
from doctor.seam.host import (CommandOutput, HostReadError, HttpResponse, MeasurementError, Memo,
                              PathInfo, Reason)
from doctor.seam.live import LiveHost
from doctor.seam.recorded_store import (RecordedHostError, Store, check_amdsmi, check_entries,
                                        check_nvml, load_json, load_manifest)

FORMAT_VERSION = 2

__all__ = ["FORMAT_VERSION", "RecordedHost", "RecordedHostError", "RecordWriter", "RecordingHost"]


class _KindReads(Memo):
    """The host's reads, each one kind (doctor/seam/read_kinds.py) handed to ``_read``: a
    recorded host replays it, a recording host reads it live and writes it down."""

    def _read(self, kind: kinds.ReadKind, *args: Any) -> Any:
        raise NotImplementedError

    def read_text(self, path: str) -> str:
        return self._read(kinds.FILE, path)

    def read_bytes(self, path: str, offset: int, size: int) -> bytes:
        return self._read(kinds.BYTES, path, offset, size)

    def list_dirs(self, path: str) -> list[str]:
        return self._read(kinds.DIRS, path)

    def list_files(self, path: str) -> dict[str, int]:
        return self._read(kinds.FILES, path)

    def list_links(self, path: str) -> dict[str, str]:
        return self._read(kinds.LINKS, path)

    def read_link(self, path: str) -> str:
        return self._read(kinds.LINK, path)

    def stat(self, path: str) -> PathInfo:
        return self._read(kinds.STAT, path)

    def run(self, argv: Sequence[str], timeout_s: float = 5.0) -> CommandOutput:
        return self._read(kinds.COMMAND, tuple(argv), timeout_s)

    def http_get(self, url: str, timeout_s: float = 5.0, max_bytes: int = 8 << 20,
                 headers: dict[str, str] | None = None) -> HttpResponse:
        return self._read(kinds.HTTP, url, timeout_s, max_bytes, headers)

    def nvml(self, name: str, *args: int | str) -> Any:
        return self._read(kinds.NVML, name, *args)

    def amdsmi(self, name: str, *args: int | str) -> Any:
        return self._read(kinds.AMDSMI, name, *args)


class RecordedHost(_KindReads):
    """A host captured into a directory (see docs/recorded-host.md)."""

    kind = "recorded"

    def __init__(self, root: str | Path) -> None:
        super().__init__()
        self.root = Path(root)
        if not self.root.is_dir():
            raise RecordedHostError(f"{self.root}: not a directory; --replay takes the directory "
                                    "written by 'llm-doctor capture DIR'")
        self.store = Store(self.root)
        self.manifest = load_manifest(self.store)
        self.sections = {name: self.manifest.get(name, {}) for name in ("paths", "files", "links")}
        self.errors: dict[str, str] = self.manifest.get("errors", {})
        self.commands = {tuple(c["argv"]): c for c in self.manifest.get("commands", [])}
        self.measurements = load_json(self.store, "measurements.json", {})
        if not isinstance(self.measurements, dict):
            raise RecordedHostError(f"{self.root / 'measurements.json'}: expected a JSON object "
                                    "of measurements by name")
        self.http: dict[str, list[dict]] = {}
        for entry in check_entries(load_json(self.store, "http.json", []),
                                   str(self.root / "http.json"), ("url",)):
            self.http.setdefault(str(entry["url"]), []).append(entry)
        self.http_seen: dict[str, int] = {}
        self.lock = threading.Lock()
        calls = load_json(self.store, "nvml.json", None)
        self.nvml_calls: dict[tuple, dict] | None = None  # (call, args) → value or error
        if calls is not None:
            self.nvml_calls = check_nvml(calls, str(self.root / "nvml.json"))
        amd_calls = load_json(self.store, "amdsmi.json", None)
        self.amdsmi_calls: dict[tuple, dict] | None = None  # as nvml_calls, for AMD SMI
        if amd_calls is not None:
            self.amdsmi_calls = check_amdsmi(amd_calls, str(self.root / "amdsmi.json"))

    def new_scan(self) -> None:
        super().new_scan()
        with self.lock:
            self.http_seen = {}

    def _read(self, kind: kinds.ReadKind, *args: Any) -> Any:
        key = kind.key(*args)
        planted = self.errors.get(key)
        if planted:
            raise HostReadError(key, planted, "recorded")
        return kind.replay(self, args)

    def measure(self, name: str, fn: Callable[[], Any]) -> Any:
        if name not in self.measurements:
            where = self.root / "measurements.json"
            raise MeasurementError(
                f"{name}: not in {where} (the capture ran "
                "at a lower level, or the measurement was not taken)",
                t("{name}: not in {where} (the capture ran at a lower level, or the "
                  "measurement was not taken)", name=name, where=where))
        value = self.measurements[name]
        if isinstance(value, dict) and set(value) == {"error"}:
            raise MeasurementError(str(value["error"]))
        return value

    def describe(self) -> dict[str, str]:
        meta = self.manifest.get("host", {})
        return {
            "kind": "recorded",
            "path": str(self.root),
            "hostname": str(meta.get("hostname", "?")),
            "captured_at": str(meta.get("captured_at", "?")),
            # absent from a capture made before they were read: identity falls back
            **identity.identity(self.read_text),
        }


class RecordWriter:
    """Writes a recorded host directory: the format's one writer (capture and fixtures).

    ``fs/`` files are written as they come (the first write of a path wins: a recording
    is one snapshot); the rest is kept in memory until ``save``. What it writes has
    secrets masked: engines' command lines whole, other processes' cut to the program.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.fs = self.root / "fs"
        self._lock = threading.RLock()
        self.errors: dict[str, str] = {}
        self.paths: dict[str, dict] = {}
        self.files_: dict[str, dict] = {}
        self.links_: dict[str, dict] = {}
        self.commands: list[dict] = []
        self.measurements: dict[str, Any] = {}
        self.http_entries: list[dict] = []
        self.nvml_entries: list[dict] = []
        self.amdsmi_entries: list[dict] = []
        self.ranges: dict[str, list[tuple[int, int]]] = {}  # the byte ranges read of each file

    def _local(self, path: str) -> Path:
        return self.fs / path.lstrip("/")

    def _target(self, link: Path) -> Path:
        """Where the recorded link ``link`` (a path inside ``fs/``) points inside ``fs/``,
        resolved as the recorded host resolves it (an absolute target is its path; ``..``
        stops at its root), without following anything on this machine."""
        at = "/" + link.relative_to(self.fs).as_posix()
        host_path = posixpath.normpath(posixpath.join(posixpath.dirname(at), os.readlink(link)))
        return self.fs / host_path.lstrip("/")

    def _folder(self, local: Path, depth: int = 0) -> Path:
        """Make ``local`` a folder of the recording and return where it is, through the
        recorded links on its way, resolved by ``_target`` (never by this machine, where an
        absolute target is this machine's path): in sysfs a path is read through a link
        (``/sys/bus/pci/devices/X/vendor``) as often as it is listed."""
        if depth > 40:  # a loop of links in what was recorded
            raise OSError(f"{local}: too many levels of recorded links")
        self.fs.mkdir(parents=True, exist_ok=True)
        path = self.fs
        for part in local.relative_to(self.fs).parts:
            path = path / part
            if path.is_symlink():
                path = self._folder(self._target(path), depth + 1)
            elif not path.is_dir():
                path.mkdir()
        return path

    def _entry(self, path: str) -> Path:
        """Where the file ``path`` of the recorded host is written: in its folder as
        ``_folder`` resolves it, through a recorded link if the file itself is one."""
        local = self._local(path)
        entry = self._folder(local.parent) / local.name
        for _ in range(40):
            if not entry.is_symlink():
                return entry
            target = self._target(entry)
            entry = self._folder(target.parent) / target.name
        raise OSError(f"{local}: too many levels of recorded links")

    def file(self, path: str, text: str) -> None:
        with self._lock:
            entry = self._entry(path)
            if not os.path.lexists(entry):
                entry.write_text(_redacted(path, text))

    def byte_range(self, path: str, offset: int, data: bytes) -> None:
        """Bytes read from ``offset`` of a binary, written at that offset: the file is sparse,
        holding only the ranges a probe read (a library's headers, not its GB of code)."""
        with self._lock:
            entry = self._entry(path)
            with open(entry, "r+b" if entry.is_file() else "wb") as f:
                f.seek(offset)
                f.write(data)
            self.ranges.setdefault(path, []).append((offset, len(data)))

    def _redact_ranges(self) -> None:
        """The text in the ranges read of each file through doctor.redact, in place, once
        every range is written, so that a line read in two pieces is masked whole."""
        for path, ranges in self.ranges.items():
            with open(self._entry(path), "r+b") as f:
                recorded_redact.redact_file(f, path, ranges)

    def dir(self, path: str, names: Sequence[str] = ()) -> None:
        with self._lock:
            folder = self._folder(self._local(path))
            for name in names:  # an entry already recorded as a link stays one
                if not os.path.lexists(folder / name):
                    (folder / name).mkdir()

    def link(self, path: str, target: str) -> None:
        local = self._local(path)
        with self._lock:
            entry = self._folder(local.parent) / local.name
            if entry.is_symlink():
                return
            if entry.is_dir():  # listed before it was known as a link: its files move over
                self._merge_into_link(entry, target)
                return
            if not os.path.lexists(entry):
                os.symlink(target, entry)

    def _merge_into_link(self, folder: Path, target: str) -> None:
        """Replace ``folder`` (made by a listing) with a link to ``target``; what was
        recorded in it moves to the target (what the target holds already wins)."""
        import shutil

        moved = folder.with_name(folder.name + ".listed")
        folder.rename(moved)
        os.symlink(target, folder)
        into = self._folder(self._target(folder))
        for child in list(moved.iterdir()):
            if not os.path.lexists(into / child.name):
                child.rename(into / child.name)
        shutil.rmtree(moved)

    def stat(self, path: str, info: PathInfo) -> None:
        with self._lock:
            self.paths[path] = {"device": info.device, "is_dir": info.is_dir,
                                "fs_total_bytes": info.fs_total_bytes,
                                "fs_free_bytes": info.fs_free_bytes}

    def files(self, path: str, listing: dict[str, int]) -> None:
        with self._lock:
            self.files_[path] = dict(listing)

    def links(self, path: str, listing: dict[str, str]) -> None:
        with self._lock:
            self.links_[path] = dict(listing)

    def command(self, argv: Sequence[str], out: CommandOutput) -> None:
        with self._lock:
            stdout_file = f"commands/{len(self.commands):02d}-{kinds.slug('_'.join(argv))}.out"
            (self.root / "commands").mkdir(parents=True, exist_ok=True)
            (self.root / stdout_file).write_text(_redacted_output(argv, out.stdout))
            self.commands.append({"argv": list(argv), "rc": out.rc, "stdout_file": stdout_file,
                                  "stderr": _redacted_output(argv, out.stderr[-2000:])})

    def measurement(self, name: str, value: Any) -> None:
        with self._lock:
            self.measurements[name] = value

    def http(self, url: str, answer: HttpResponse | Reason, detail: str = "") -> None:
        """A GET's answer (status, content type, body; never the request's headers)."""
        from doctor.seam.http import display_url

        with self._lock:
            entry: dict[str, Any] = {"url": display_url(url)}
            if isinstance(answer, HttpResponse):
                body_file = f"http/{len(self.http_entries):02d}-{kinds.slug(entry['url'].split('//', 1)[-1])}.body"
                (self.root / "http").mkdir(parents=True, exist_ok=True)
                (self.root / body_file).write_text(answer.body)
                entry.update(status=answer.status, content_type=answer.content_type,
                             body_file=body_file, elapsed_s=answer.elapsed_s)
            else:
                entry.update(error=Reason(answer).value, detail=detail)
            self.http_entries.append(entry)

    def nvml(self, call: str, args: Sequence[Any], value: Any) -> None:
        self._library_call(self.nvml_entries, call, args, value)

    def amdsmi(self, call: str, args: Sequence[Any], value: Any) -> None:
        self._library_call(self.amdsmi_entries, call, args, value)

    def _library_call(self, entries: list[dict[str, Any]], call: str, args: Sequence[Any],
                      value: Any) -> None:
        """One NVML or AMD SMI call and its answer (or its failure's reason), once."""
        with self._lock:
            entry: dict[str, Any] = {"call": call, "args": list(args)}
            if isinstance(value, Reason):
                entry["error"] = value.value
            else:
                entry["value"] = value
            if entry not in entries:
                entries.append(entry)

    def error(self, key: str, reason: Reason | str) -> None:
        with self._lock:
            self.errors[key] = Reason(reason).value

    def save(self, meta: dict[str, Any], hostname: str | None = None,
             captured_at: str | None = None) -> None:
        """Write host.toml and the JSON files; the fs/ tree was written as reads happened."""
        import tomli_w  # only capture and fixture builders write TOML

        self._redact_ranges()
        manifest: dict[str, Any] = {
            "host": {
                "format": FORMAT_VERSION,
                "hostname": hostname or socket.gethostname(),
                "captured_at": captured_at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **meta,
            },
            "errors": dict(sorted(self.errors.items())),
            "paths": self.paths,
            "files": self.files_,
        }
        if self.links_:
            manifest["links"] = self.links_
        manifest["commands"] = self.commands
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "host.toml").write_text(tomli_w.dumps(manifest))
        # git keeps no empty directory, and an empty one still lists (a CPU without cpufreq)
        for folder, subdirs, files in os.walk(self.fs):
            if not subdirs and not files:
                (Path(folder) / ".keep").touch()
        _write_json(self.root / "measurements.json", self.measurements)
        if self.http_entries:
            _write_json(self.root / "http.json", self.http_entries)
        if self.nvml_entries:
            _write_json(self.root / "nvml.json", self.nvml_entries)
        if self.amdsmi_entries:
            _write_json(self.root / "amdsmi.json", self.amdsmi_entries)


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n")


class RecordingHost(_KindReads):
    """A live host that writes everything read through it into a recorded directory."""

    kind = "live"

    def __init__(self, live: LiveHost, root: str | Path) -> None:
        super().__init__()
        self.live = live
        self.root = Path(root)
        self.writer = RecordWriter(root)

    def _read(self, kind: kinds.ReadKind, *args: Any) -> Any:
        try:
            value = kind.live(self.live, *args)
        except HostReadError as exc:
            kind.write_error(self.writer, args, exc)
            raise
        kind.write(self.writer, args, value)
        return value

    def measure(self, name: str, fn: Callable[[], Any]) -> Any:
        try:
            value = fn()
        except MeasurementError as exc:
            self.writer.measurement(name, {"error": str(exc)})
            raise
        self.writer.measurement(name, value)
        return value

    def describe(self) -> dict[str, str]:
        # the live host's, its identity read through this host so that it is recorded
        return {**self.live.describe(), **identity.identity(self.read_text)}

    def save(self, meta: dict[str, Any]) -> None:
        self.writer.save(meta)


def _redacted(path: str, text: str) -> str:
    """What a recording keeps of a read: command lines through doctor.redact (engines'
    whole with secrets masked, any other process's as its program alone; the kernel's own
    /proc/cmdline is no process's), environments never, everything else as read."""
    if path.startswith("/proc/") and path.endswith("/cmdline") and path != "/proc/cmdline":
        from doctor.engines import engine_of
        from doctor.redact import program_only, redact_cmdline

        if engine_of(text.replace("\0", " ")) is None:
            return program_only(text)
        return redact_cmdline(text)
    if path.startswith("/proc/") and path.endswith("/environ"):
        from doctor.redact import redact_environ

        return redact_environ(text)
    return text


def _redacted_output(argv: Sequence[str], text: str) -> str:
    """What a recording keeps of a command's output: a journal's messages (an engine's log,
    its arguments and tracebacks in it) through doctor.redact; other commands' as they said."""
    if argv and posixpath.basename(argv[0]) == "journalctl":
        return redact_text(text)
    return text
