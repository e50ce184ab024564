"""The one seam through which every probe reads the host.

A probe never opens a file, runs a command or stats a path itself: it asks a ``Host``.
Two implementations stand behind the interface:

* ``LiveHost`` reads this machine.
* ``RecordedHost`` reads a directory written by ``llm-doctor capture`` (or by hand; the
  format is in docs/recorded-host.md).

``RecordingHost`` wraps a live host and writes everything read through it into a recorded
directory, so that ``capture`` then ``scan --replay`` sees exactly what the live scan saw.
Measurements (micro-kernels, CPU sampling) cannot be replayed from raw reads; they go
through ``Host.measure`` and their results are recorded as values.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import threading
import time
from doctor._toml import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

FORMAT_VERSION = 1


class HostReadError(Exception):
    """A read of the host failed; ``reason`` is one of the REASONS below."""

    REASONS = ("not-found", "no-permission", "timeout", "failed")

    def __init__(self, path: str, reason: str, detail: str = "") -> None:
        self.path = path
        self.reason = reason
        self.detail = detail
        super().__init__(f"{path}: {reason}" + (f" ({detail})" if detail else ""))


class MeasurementError(Exception):
    """A measurement (micro-kernel, sampling) failed; the message says why."""


@dataclass(frozen=True, slots=True)
class CommandOutput:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class PathInfo:
    """What ``stat``/``statvfs`` say of a path."""

    device: str  # "major:minor" of st_dev, as in /sys/dev/block/
    is_dir: bool
    fs_total_bytes: int
    fs_free_bytes: int  # available to unprivileged users (f_bavail)


class Host(Protocol):
    kind: str  # "live" or "recorded"

    def read_text(self, path: str) -> str: ...
    def list_dirs(self, path: str) -> list[str]: ...
    def list_files(self, path: str) -> dict[str, int]: ...
    def read_link(self, path: str) -> str: ...
    def stat(self, path: str) -> PathInfo: ...
    def run(self, argv: Sequence[str], timeout_s: float = 5.0) -> CommandOutput: ...
    def measure(self, name: str, fn: Callable[[], dict]) -> dict: ...
    def describe(self) -> dict[str, str]: ...


def _os_error(path: str, exc: OSError) -> HostReadError:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ESRCH):
        return HostReadError(path, "not-found")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return HostReadError(path, "no-permission")
    return HostReadError(path, "failed", exc.strerror or str(exc))


class LiveHost:
    """This machine."""

    kind = "live"

    def read_text(self, path: str) -> str:
        try:
            with open(path, "rb", buffering=0) as f:
                return _read_bounded(f).decode("utf-8", "replace")
        except OSError as exc:
            raise _os_error(path, exc) from None

    def list_dirs(self, path: str) -> list[str]:
        try:
            with os.scandir(path) as it:
                return sorted(e.name for e in it if _is_dir(e))
        except OSError as exc:
            raise _os_error(path, exc) from None

    def list_files(self, path: str) -> dict[str, int]:
        try:
            with os.scandir(path) as it:
                return {e.name: e.stat().st_size for e in it if e.is_file()}
        except OSError as exc:
            raise _os_error(path, exc) from None

    def read_link(self, path: str) -> str:
        try:
            return os.readlink(path)
        except OSError as exc:
            raise _os_error(path, exc) from None

    def stat(self, path: str) -> PathInfo:
        try:
            st = os.stat(path)
            vfs = os.statvfs(path)
        except OSError as exc:
            raise _os_error(path, exc) from None
        return PathInfo(
            device=f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}",
            is_dir=os.path.isdir(path),
            fs_total_bytes=vfs.f_blocks * vfs.f_frsize,
            fs_free_bytes=vfs.f_bavail * vfs.f_frsize,
        )

    def run(self, argv: Sequence[str], timeout_s: float = 5.0) -> CommandOutput:
        name = " ".join(argv)
        try:
            proc = subprocess.run(
                list(argv), capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL
            )
        except FileNotFoundError:
            raise HostReadError(name, "not-found", "command not installed") from None
        except PermissionError:
            raise HostReadError(name, "no-permission") from None
        except subprocess.TimeoutExpired:
            raise HostReadError(name, "timeout", f"no answer in {timeout_s:g} s") from None
        return CommandOutput(
            tuple(argv),
            proc.returncode,
            proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"),
        )

    def measure(self, name: str, fn: Callable[[], dict]) -> dict:
        return fn()

    def describe(self) -> dict[str, str]:
        return {"kind": "live", "hostname": socket.gethostname()}


def _read_bounded(f, limit: int = 4 * 1024 * 1024) -> bytes:
    # Small reads: /proc/sys handlers refuse one huge read with ENOMEM.
    chunks, total = [], 0
    while total < limit:
        chunk = f.read(65536)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:  # a /proc entry that vanished between listing and stat
        return False


class RecordedHost:
    """A host captured into a directory (see docs/recorded-host.md)."""

    kind = "recorded"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.fs = self.root / "fs"
        manifest = self.root / "host.toml"
        if not manifest.is_file():
            raise RecordedHostError(
                f"{manifest}: not found. A recorded host is a directory written by "
                "'llm-doctor capture DIR' with a host.toml inside (docs/recorded-host.md)."
            )
        try:
            self.manifest = tomllib.loads(manifest.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise RecordedHostError(f"{manifest}: not valid TOML: {exc}") from None
        version = self.manifest.get("host", {}).get("format")
        if version != FORMAT_VERSION:
            raise RecordedHostError(
                f"{manifest}: [host] format = {version!r}; this llm-doctor reads format "
                f"{FORMAT_VERSION}. Re-capture the host with this version."
            )
        self.errors: dict[str, str] = self.manifest.get("errors", {})
        self.paths: dict[str, dict] = self.manifest.get("paths", {})
        self.files: dict[str, dict] = self.manifest.get("files", {})
        self.commands = {tuple(c["argv"]): c for c in self.manifest.get("commands", [])}
        self.measurements = _load_measurements(self.root / "measurements.json")

    def _local(self, path: str) -> Path:
        return self.fs / path.lstrip("/")

    def _planted_error(self, path: str) -> None:
        reason = self.errors.get(path)
        if reason:
            raise HostReadError(path, reason, "recorded")

    def read_text(self, path: str) -> str:
        self._planted_error(path)
        local = self._local(path)
        if not local.is_file():
            raise HostReadError(path, "not-found")
        return local.read_bytes().decode("utf-8", "replace")

    def list_dirs(self, path: str) -> list[str]:
        self._planted_error(path)
        local = self._local(path)
        if not local.is_dir():
            raise HostReadError(path, "not-found")
        return sorted(p.name for p in local.iterdir() if p.is_dir() and not p.is_symlink())

    def list_files(self, path: str) -> dict[str, int]:
        self._planted_error(path)
        if path not in self.files:
            raise HostReadError(path, "not-found")
        return {name: int(size) for name, size in self.files[path].items()}

    def read_link(self, path: str) -> str:
        self._planted_error(path)
        local = self._local(path)
        if not local.is_symlink():
            raise HostReadError(path, "not-found")
        return os.readlink(local)

    def stat(self, path: str) -> PathInfo:
        self._planted_error(path)
        info = self.paths.get(path)
        if info is None:
            raise HostReadError(path, "not-found")
        return PathInfo(
            device=info["device"],
            is_dir=info.get("is_dir", True),
            fs_total_bytes=int(info["fs_total_bytes"]),
            fs_free_bytes=int(info["fs_free_bytes"]),
        )

    def run(self, argv: Sequence[str], timeout_s: float = 5.0) -> CommandOutput:
        name = " ".join(argv)
        self._planted_error(name)
        cmd = self.commands.get(tuple(argv))
        if cmd is None:
            raise HostReadError(name, "not-found", "not recorded")
        stdout = ""
        if cmd.get("stdout_file"):
            stdout = (self.root / cmd["stdout_file"]).read_text()
        return CommandOutput(tuple(argv), int(cmd.get("rc", 0)), stdout, cmd.get("stderr", ""))

    def measure(self, name: str, fn: Callable[[], dict]) -> dict:
        if name not in self.measurements:
            raise MeasurementError(
                f"{name}: not in {self.root / 'measurements.json'} (the capture ran "
                "at a lower level, or the measurement was not taken)"
            )
        value = self.measurements[name]
        if isinstance(value, dict) and set(value) == {"error"}:
            raise MeasurementError(value["error"])
        return value

    def describe(self) -> dict[str, str]:
        meta = self.manifest.get("host", {})
        return {
            "kind": "recorded",
            "path": str(self.root),
            "hostname": str(meta.get("hostname", "?")),
            "captured_at": str(meta.get("captured_at", "?")),
        }


class RecordedHostError(Exception):
    """A recorded host directory cannot be read; the message says which file and why."""


def _load_measurements(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordedHostError(f"{path}: not valid JSON: {exc}") from None


class RecordingHost:
    """A live host that writes everything read through it into a recorded directory."""

    kind = "live"

    def __init__(self, live: LiveHost, root: str | Path) -> None:
        self.live = live
        self.root = Path(root)
        self.fs = self.root / "fs"
        self._lock = threading.Lock()
        self.errors: dict[str, str] = {}
        self.paths: dict[str, dict] = {}
        self.files: dict[str, dict] = {}
        self.commands: list[dict] = []
        self.measurements: dict[str, Any] = {}

    def _local(self, path: str) -> Path:
        return self.fs / path.lstrip("/")

    def _record_error(self, exc: HostReadError) -> None:
        # not-found needs no entry: an absent file replays as not found.
        if exc.reason != "not-found":
            with self._lock:
                self.errors[exc.path] = exc.reason

    def read_text(self, path: str) -> str:
        try:
            text = self.live.read_text(path)
        except HostReadError as exc:
            self._record_error(exc)
            raise
        local = self._local(path)
        with self._lock:
            # The first read wins: the recording is one snapshot of the host, taken as the
            # scan started; a later re-read (meminfo, say) must not replace it.
            if not local.is_file():
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text(_redacted(path, text))
        return text

    def list_dirs(self, path: str) -> list[str]:
        try:
            names = self.live.list_dirs(path)
        except HostReadError as exc:
            self._record_error(exc)
            raise
        local = self._local(path)
        with self._lock:
            for name in names:
                (local / name).mkdir(parents=True, exist_ok=True)
            local.mkdir(parents=True, exist_ok=True)
        return names

    def list_files(self, path: str) -> dict[str, int]:
        try:
            files = self.live.list_files(path)
        except HostReadError as exc:
            self._record_error(exc)
            raise
        with self._lock:
            self.files[path] = dict(files)
        return files

    def read_link(self, path: str) -> str:
        try:
            target = self.live.read_link(path)
        except HostReadError as exc:
            self._record_error(exc)
            raise
        local = self._local(path)
        with self._lock:
            local.parent.mkdir(parents=True, exist_ok=True)
            if not local.is_symlink():
                os.symlink(target, local)
        return target

    def stat(self, path: str) -> PathInfo:
        try:
            info = self.live.stat(path)
        except HostReadError as exc:
            self._record_error(exc)
            raise
        with self._lock:
            self.paths[path] = {
                "device": info.device,
                "is_dir": info.is_dir,
                "fs_total_bytes": info.fs_total_bytes,
                "fs_free_bytes": info.fs_free_bytes,
            }
        return info

    def run(self, argv: Sequence[str], timeout_s: float = 5.0) -> CommandOutput:
        try:
            out = self.live.run(argv, timeout_s)
        except HostReadError as exc:
            self._record_error(exc)
            raise
        with self._lock:
            n = len(self.commands)
            stdout_file = f"commands/{n:02d}-{_slug(argv)}.out"
            (self.root / "commands").mkdir(parents=True, exist_ok=True)
            (self.root / stdout_file).write_text(out.stdout)
            self.commands.append(
                {"argv": list(argv), "rc": out.rc, "stdout_file": stdout_file,
                 "stderr": out.stderr[-2000:]}
            )
        return out

    def measure(self, name: str, fn: Callable[[], dict]) -> dict:
        try:
            value = fn()
        except MeasurementError as exc:
            with self._lock:
                self.measurements[name] = {"error": str(exc)}
            raise
        with self._lock:
            self.measurements[name] = value
        return value

    def describe(self) -> dict[str, str]:
        return self.live.describe()

    def save(self, meta: dict[str, Any]) -> None:
        """Write host.toml and measurements.json; the fs/ tree is written as reads happen."""
        import tomli_w  # only capture writes TOML

        manifest = {
            "host": {
                "format": FORMAT_VERSION,
                "hostname": socket.gethostname(),
                "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **meta,
            },
            "errors": dict(sorted(self.errors.items())),
            "paths": self.paths,
            "files": self.files,
            "commands": self.commands,
        }
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "host.toml").write_text(tomli_w.dumps(manifest))
        (self.root / "measurements.json").write_text(
            json.dumps(self.measurements, indent=2, sort_keys=True) + "\n"
        )


def _redacted(path: str, text: str) -> str:
    """What a recording keeps of a read: command lines lose their secrets (API keys)."""
    if path.startswith("/proc/") and path.endswith("/cmdline"):
        from probes.processes import redact

        return redact(text)
    return text


def _slug(argv: Sequence[str]) -> str:
    text = "_".join(argv)
    return "".join(c if c.isalnum() or c in "-." else "_" for c in text)[:60]
