"""Recorded hosts: reading one (``RecordedHost``) and writing one (``RecordingHost``).

The format is documented for people in docs/recorded-host.md: ``host.toml`` (metadata,
failed reads, stat results, directory file lists, commands), ``measurements.json``, and
``fs/`` with every file read at its absolute path.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from doctor._toml import tomllib
from doctor.host import CommandOutput, HostReadError, LiveHost, MeasurementError, PathInfo

FORMAT_VERSION = 1


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

    def _inside(self, path: str, local: Path) -> Path:
        """``local``, if it lies inside the recorded host: a recording from someone else must
        not make us read (and report) this machine's files through a symlink or ``..``."""
        if not local.resolve().is_relative_to(self.root.resolve()):
            raise HostReadError(path, "failed", f"{local} points outside the recorded host")
        return local

    def read_text(self, path: str) -> str:
        self._planted_error(path)
        local = self._inside(path, self._local(path))
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
            local = self._inside(name, self.root / cmd["stdout_file"])
            try:
                stdout = local.read_text()
            except OSError as exc:
                raise HostReadError(name, "failed", f"{local}, named in host.toml, cannot be "
                                    f"read: {exc.strerror}") from None
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

    def _live(self, read: Callable[..., Any], *args: Any) -> Any:
        """Read the live host; a failure other than not-found is recorded, then raised."""
        try:
            return read(*args)
        except HostReadError as exc:
            if exc.reason != "not-found":  # an absent file replays as not found by itself
                with self._lock:
                    self.errors[exc.path] = exc.reason
            raise

    def read_text(self, path: str) -> str:
        text = self._live(self.live.read_text, path)
        local = self._local(path)
        with self._lock:
            # The first read wins: the recording is one snapshot of the host, taken as the
            # scan started; a later re-read (meminfo, say) must not replace it.
            if not local.is_file():
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text(_redacted(path, text))
        return text

    def list_dirs(self, path: str) -> list[str]:
        names = self._live(self.live.list_dirs, path)
        local = self._local(path)
        with self._lock:
            for name in names:
                (local / name).mkdir(parents=True, exist_ok=True)
            local.mkdir(parents=True, exist_ok=True)
        return names

    def list_files(self, path: str) -> dict[str, int]:
        files = self._live(self.live.list_files, path)
        with self._lock:
            self.files[path] = dict(files)
        return files

    def read_link(self, path: str) -> str:
        target = self._live(self.live.read_link, path)
        local = self._local(path)
        with self._lock:
            local.parent.mkdir(parents=True, exist_ok=True)
            if not local.is_symlink():
                os.symlink(target, local)
        return target

    def stat(self, path: str) -> PathInfo:
        info = self._live(self.live.stat, path)
        with self._lock:
            self.paths[path] = {
                "device": info.device,
                "is_dir": info.is_dir,
                "fs_total_bytes": info.fs_total_bytes,
                "fs_free_bytes": info.fs_free_bytes,
            }
        return info

    def run(self, argv: Sequence[str], timeout_s: float = 5.0) -> CommandOutput:
        out = self._live(self.live.run, argv, timeout_s)
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
        # git keeps no empty directory, and an empty one still lists (a CPU without cpufreq)
        for folder, subdirs, files in os.walk(self.fs):
            if not subdirs and not files:
                (Path(folder) / ".keep").touch()
        (self.root / "measurements.json").write_text(
            json.dumps(self.measurements, indent=2, sort_keys=True) + "\n"
        )


def _redacted(path: str, text: str) -> str:
    """What a recording keeps of a read.

    Command lines: an engine's in full with secrets masked (API keys, tokens); any other
    process's as its program alone, since its arguments are none of our business and may
    carry credentials we cannot recognise.
    """
    if path.startswith("/proc/") and path.endswith("/cmdline"):
        from probes.processes import engine_of, redact

        if engine_of(text.replace("\0", " ")) is None:
            return text.split("\0", 1)[0] + ("\0" if text else "")
        return redact(text)
    return text


def _slug(argv: Sequence[str]) -> str:
    text = "_".join(argv)
    return "".join(c if c.isalnum() or c in "-." else "_" for c in text)[:60]
