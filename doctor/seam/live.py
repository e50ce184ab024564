"""The live host: this machine, read through files, commands, HTTP and NVML.

The other side of the seam is ``RecordedHost`` (doctor/seam/recorded.py); both implement
``Host`` (doctor/seam/host.py). HTTP GETs go through doctor/seam/http.py, NVML calls through
doctor/seam/nvml.py, the only module that imports pynvml; AMD SMI calls through
doctor/seam/amdsmi.py, the only module that imports amdsmi.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import subprocess
from typing import Any, Callable, Sequence

from doctor.seam import amdsmi, http, identity, nvml
from doctor.seam.host import CommandOutput, HostReadError, HttpResponse, Memo, PathInfo, Reason

MAX_READ_BYTES = 4 * 1024 * 1024  # a file read by a probe; the kernel log's tail beyond it
MAX_RANGE_BYTES = 1 << 20  # one ranged read of a binary (an ELF header, a fatbin entry)
MAX_OFFSET = 1 << 62


def os_error(path: str, exc: OSError) -> HostReadError:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ESRCH):
        return HostReadError(path, Reason.NOT_FOUND)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return HostReadError(path, Reason.NO_PERMISSION)
    return HostReadError(path, Reason.FAILED, exc.strerror or str(exc))


class LiveHost(Memo):
    """This machine."""

    kind = "live"

    def read_text(self, path: str) -> str:
        """A file's text, at most MAX_READ_BYTES: a regular file longer than that gives its
        last MAX_READ_BYTES from a line's start (a log's newest lines). A FIFO, socket or
        device is never read (a FIFO at an engine's config.json would block the probe)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise os_error(path, exc) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO, socket or device"
                raise HostReadError(path, Reason.FAILED, f"is {kind}, not a file: not read")
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
                if info.st_size > MAX_READ_BYTES:  # /proc and /sys files say 0
                    f.seek(info.st_size - MAX_READ_BYTES)
                    data = _read_bounded(f)
                    return data[data.find(b"\n") + 1:].decode("utf-8", "replace")
                return _read_bounded(f).decode("utf-8", "replace")
        except OSError as exc:
            raise os_error(path, exc) from None
        finally:
            os.close(fd)

    def list_dirs(self, path: str) -> list[str]:
        try:
            with os.scandir(path) as it:
                return sorted(e.name for e in it if _is_dir(e))
        except OSError as exc:
            raise os_error(path, exc) from None

    def list_files(self, path: str) -> dict[str, int]:
        try:
            with os.scandir(path) as it:
                return {e.name: e.stat().st_size for e in it if _is_file(e)}
        except OSError as exc:
            raise os_error(path, exc) from None

    def list_links(self, path: str) -> dict[str, str]:
        """Symbolic links in a directory with their targets (``/proc/<pid>/fd``)."""
        links = {}
        try:
            with os.scandir(path) as it:
                for entry in it:
                    try:
                        if entry.is_symlink():
                            links[entry.name] = os.readlink(entry.path)
                    except OSError:  # a descriptor closed between listing and reading
                        continue
        except OSError as exc:
            raise os_error(path, exc) from None
        return dict(sorted(links.items()))

    def read_link(self, path: str) -> str:
        try:
            return os.readlink(path)
        except OSError as exc:
            raise os_error(path, exc) from None

    def read_bytes(self, path: str, offset: int, size: int) -> bytes:
        """At most ``size`` bytes (capped at MAX_RANGE_BYTES) of a regular file from ``offset``:
        fewer past its end. For the headers of binaries too large to read (a GB library):
        a probe seeks to what it needs. A FIFO, socket or device is never read."""
        if offset < 0 or size < 0:
            raise HostReadError(path, Reason.FAILED, f"bad range: offset {offset}, size {size}")
        if offset >= MAX_OFFSET:  # past the end of any file (pread takes a signed 64-bit offset)
            offset, size = 0, 0
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise os_error(path, exc) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise HostReadError(path, Reason.FAILED, "not a regular file: not read")
            return os.pread(fd, min(size, MAX_RANGE_BYTES), offset)
        except OSError as exc:
            raise os_error(path, exc) from None
        finally:
            os.close(fd)

    def stat(self, path: str) -> PathInfo:
        try:
            st = os.stat(path)
            vfs = os.statvfs(path)
        except OSError as exc:
            raise os_error(path, exc) from None
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
            raise HostReadError(name, Reason.NOT_FOUND, "command not installed") from None
        except PermissionError:
            raise HostReadError(name, Reason.NO_PERMISSION) from None
        except subprocess.TimeoutExpired:
            raise HostReadError(name, Reason.TIMEOUT, f"no answer in {timeout_s:g} s") from None
        return CommandOutput(
            tuple(argv),
            proc.returncode,
            proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"),
        )

    def measure(self, name: str, fn: Callable[[], Any]) -> Any:
        return fn()

    def http_get(self, url: str, timeout_s: float = 5.0, max_bytes: int = 8 << 20,
                 headers: dict[str, str] | None = None) -> HttpResponse:
        return http.get(url, timeout_s, max_bytes, headers)

    def nvml(self, name: str, *args: int | str) -> Any:
        return nvml.query(name, *args)

    def amdsmi(self, name: str, *args: int | str) -> Any:
        return amdsmi.query(name, *args)

    def describe(self) -> dict[str, str]:
        # the machine id and DMI UUID through read_text: a recording host keeps them
        return {"kind": "live", "hostname": socket.gethostname(), **identity.identity(self.read_text)}


def _read_bounded(f, limit: int = MAX_READ_BYTES) -> bytes:
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


def _is_file(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False
