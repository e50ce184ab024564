"""The one seam through which every probe reads the host.

A probe never opens a file, runs a command or stats a path itself: it asks a ``Host``.
Two implementations stand behind the interface:

* ``LiveHost`` (here) reads this machine.
* ``RecordedHost`` (doctor/recorded.py) reads a directory written by ``llm-doctor capture``
  or by hand (docs/recorded-host.md).

``RecordingHost`` (doctor/recorded.py) wraps a live host and writes everything read
through it into a recorded directory, so that ``capture`` then ``scan --replay`` sees
exactly what the live scan saw. Measurements (micro-kernels, CPU sampling) cannot be
replayed from raw reads; they go through ``Host.measure`` and their results are recorded
as values.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence


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
