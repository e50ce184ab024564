"""Writing reports to files: atomically, so a reader never sees half a report.

``-o FILE`` means, by what FILE is:

* a new name, or an existing regular file: written to a temporary file beside it,
  fsync'd, then renamed over it (the old report stays whole until the new one is);
* ``-`` or ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N``: written
  to that open file descriptor, as a shell would (a file the shell opened with ``>>`` is
  appended to, not replaced);
* a terminal, ``/dev/null``, ``/dev/zero`` or ``/dev/full``: written through (the device
  node stays; ``/dev/full`` fails with "No space left on device");
* a FIFO with a reader: written through; with no reader, refused (no waiting forever);
* anything else (a directory, a symbolic link, a block device, a socket, another
  character device): refused with the reason, and left as it was. A symbolic link is not
  followed: run as root in a shared directory, following one would let another user
  point the report at any file (name the link's target instead).

Refusals and write failures raise ``OSError`` whose ``strerror`` says what to do.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
import tempfile
from pathlib import Path

from doctor.i18n import t

# The paths that name an already open descriptor of this process.
_FD_PATH = re.compile(r"/(?:dev/fd|proc/self/fd)/(\d+)")
_STD_PATHS = {"-": 1, "/dev/stdout": 1, "/dev/stderr": 2}
# Character devices that take any write harmlessly: (major, minor) of null, zero, full.
_SINK_DEVICES = {(1, 3), (1, 5), (1, 7)}


def _refuse(path: str, why: str, code: int = errno.EINVAL) -> OSError:
    return OSError(code, why, path)


def _descriptor(path: str) -> int | None:
    if path in _STD_PATHS:
        return _STD_PATHS[path]
    found = _FD_PATH.fullmatch(path)
    return int(found.group(1)) if found else None


def _write_fd(fd: int, text: str) -> None:
    data = text.encode()
    if fd == 1:  # what click or print left buffered goes first
        sys.stdout.flush()
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _write_device(path: str, text: str) -> None:
    """A character device or a FIFO: opened without creating or truncating anything."""
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if stat.S_ISCHR(info.st_mode):
            device = (os.major(info.st_rdev), os.minor(info.st_rdev))
            if device not in _SINK_DEVICES and not os.isatty(fd):
                raise _refuse(path, t("is a character device that is not a terminal or "
                                      "/dev/null; name a file instead"))
        os.set_blocking(fd, True)
        _write_fd(fd, text)
    finally:
        os.close(fd)


def _write_replacing(path: Path, text: str) -> None:
    """Write to a temporary file beside ``path``, fsync, then rename over it."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        mode = stat.S_IMODE(os.stat(path, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def check_target(path: str | Path) -> None:
    """Raise ``OSError`` now if ``write_atomic(path, ...)`` would refuse ``path``, so that a
    long scan does not run for a report it cannot write. Does not write anything."""
    name = str(path)
    if _descriptor(name) is not None:
        return
    try:
        info = os.lstat(name)
    except FileNotFoundError:
        folder = Path(name).parent if str(Path(name).parent) else Path(".")
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise _refuse(name, t("{folder} is not a writable directory", folder=folder),
                          errno.EACCES) from None
        return
    mode = info.st_mode
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return
    if stat.S_ISDIR(mode):
        raise _refuse(name, t("is a directory; name a file inside it"), errno.EISDIR)
    if stat.S_ISLNK(mode):
        raise _refuse(name, t("is a symbolic link (to {target}); llm-doctor does not write "
                              "through links: name the target itself",
                              target=os.readlink(name)))
    raise _refuse(name, t("is not a regular file, terminal, /dev/null or FIFO; name a file "
                          "instead"))


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` as the module docstring says, never replacing anything
    but a regular file."""
    name = str(path)
    fd = _descriptor(name)
    if fd is not None:
        _write_fd(fd, text)
        return
    check_target(name)
    try:
        mode = os.lstat(name).st_mode
    except FileNotFoundError:
        mode = 0
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        try:
            _write_device(name, text)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO that nobody reads
                raise _refuse(name, t("is a FIFO with no reader; start the reader first"),
                              errno.ENXIO) from None
            raise
        return
    _write_replacing(Path(name), text)
