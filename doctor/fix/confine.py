"""Where ``fix --apply`` and ``fix --revert`` may write, and how they get there.

A plan's files are data a saved scan helped build, so a path is trusted only once it is
one of the few shapes the catalogue writes (``ALLOWED``) with no ``..``, no empty or
hidden part and only the characters of a file or unit name. The folders from the root
down are then walked one at a time with directory descriptors opened ``O_NOFOLLOW``: a
folder under the root that is a symbolic link (to /etc, say) stops the walk by name
rather than being written through, a missing folder is made (0755) and opened the same
way, and the file itself is written to a temporary name inside the checked folder's
descriptor and renamed over the target there, so nothing between the check and the
write can move it elsewhere. Without ``--root`` the root is ``/`` and the same walk runs.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from doctor.i18n import t

# The folders the catalogue writes into, each with the shape of what may follow it
ALLOWED: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("/etc/sysctl.d/", re.compile(r"[^/]+")),
    ("/etc/security/limits.d/", re.compile(r"[^/]+")),
    ("/etc/udev/rules.d/", re.compile(r"[^/]+")),
    ("/etc/systemd/system/", re.compile(r"[^/]+\.d/[^/]+")),
)
_PART = re.compile(r"[A-Za-z0-9@_+:\\-][A-Za-z0-9@_+:.\\-]{0,199}")
MAX_FILE_BYTES = 1 << 20  # a file llm-doctor replaces: a config of a few lines
MODE_BITS = 0o755  # never setuid, setgid, sticky, or writable by group or others
_WALK = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A path fix will not write: the message names it and why."""


def checked(path: object) -> str:
    """``path`` if it is one of the catalogue's shapes, else ``Refused`` naming it."""
    if not isinstance(path, str) or len(path) > 1024:
        raise Refused(t("{path}: not a path llm-doctor writes", path=repr(path)[:200]))
    parts = path.split("/")
    if path.startswith("/") and any(p in ("", ".", "..") for p in parts[1:]):
        raise Refused(t("{path}: refused: a path with '..', '.' or an empty part is never "
                        "written", path=repr(path)[:200]))
    for prefix, rest in ALLOWED:
        if path.startswith(prefix) and rest.fullmatch(path[len(prefix):]):
            if all(_PART.fullmatch(p) for p in path[len(prefix):].split("/")):
                return path
            break
    raise Refused(t("{path}: refused: llm-doctor writes only its own files in /etc/sysctl.d, "
                    "/etc/security/limits.d, /etc/udev/rules.d and /etc/systemd/system/UNIT.d",
                    path=repr(path)[:200]))


def chmod_folder(path: str, mode: int) -> None:
    """``chmod`` a folder never through a link (lchmod is not on every Linux)."""
    fd = os.open(path, _WALK)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def shown(root: str, path: str) -> str:
    return path if root == "/" else root.rstrip("/") + path


def _open_dir(parent: int, name: str, shown_as: str) -> int:
    try:
        return os.open(name, _WALK, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
            except OSError:
                link = False
            raise Refused(t("{path}: refused: a symbolic link where a folder belongs; llm-doctor "
                            "writes through none (remove the link, or choose another --root)",
                            path=shown_as) if link else
                          t("{path}: refused: not a folder", path=shown_as)) from None
        raise


@contextmanager
def folder(root: str, path: str, create: bool) -> Iterator[tuple[int | None, list[str]]]:
    """The descriptor of ``path``'s folder under ``root`` (None if a folder is missing and
    ``create`` is false) and the folders made on the way, root-relative, deepest last."""
    parts = path.strip("/").split("/")[:-1]
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    made: list[str] = []
    try:
        for n, name in enumerate(parts):
            where = "/" + "/".join(parts[:n + 1])
            try:
                fds.append(_open_dir(fds[-1], name, shown(root, where)))
            except FileNotFoundError:
                if not create:
                    yield None, made
                    return
                os.mkdir(name, 0o755, dir_fd=fds[-1])
                made.append(where)
                fds.append(_open_dir(fds[-1], name, shown(root, where)))
                os.fchmod(fds[-1], 0o755)  # whatever the umask
        yield fds[-1], made
    finally:
        for fd in fds:
            os.close(fd)


def read_file(dir_fd: int, name: str, shown_as: str) -> tuple[bytes, int] | None:
    """The bytes and mode of a regular file in ``dir_fd``, None if there is none; a link,
    a FIFO or a folder there is refused."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise Refused(t("{path}: not a regular file; llm-doctor writes only its own files",
                            path=shown_as)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(t("{path}: not a regular file; llm-doctor writes only its own files",
                            path=shown_as))
        if info.st_size > MAX_FILE_BYTES:
            raise Refused(t("{path}: {size:,} bytes, not a file llm-doctor writes; move it away "
                            "first", path=shown_as, size=info.st_size))
        chunks, left = [], MAX_FILE_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), stat.S_IMODE(info.st_mode)
    finally:
        os.close(fd)


def write_file(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """``data`` as ``name`` in ``dir_fd``, whole or not at all: a temporary file made there
    (never through a link), synced, then renamed over the target."""
    tmp = f".{name}.llm-doctor-tmp"
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode & MODE_BITS)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    os.fsync(dir_fd)


def remove_file(dir_fd: int, name: str) -> None:
    """Unlink ``name`` in ``dir_fd`` if it is there and not a folder (a link is removed as a
    link: unlink never follows one)."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def remove_folders(root: str, made: list[str]) -> None:
    """Remove the folders a plan made, deepest first, each only if still empty and reached
    without a link; the first that is not stops it (something was put there since)."""
    for where in sorted(made, key=lambda w: w.count("/"), reverse=True):
        try:
            with folder(root, where, create=False) as (parent, _):
                if parent is not None:  # rmdir never follows a link: a link there stays
                    os.rmdir(where.rsplit("/", 1)[1], dir_fd=parent)
        except (OSError, Refused):
            break


_LIVE_PART = re.compile(r"[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,99}")


def live_checked(path: object) -> str:
    """``path`` if it is a live setting's file (under /proc/sys or /sys, plain parts only),
    else ``Refused`` naming it."""
    if isinstance(path, str) and len(path) <= 512 and path.startswith(("/proc/sys/", "/sys/")):
        if all(_LIVE_PART.fullmatch(p) for p in path[1:].split("/")):
            return path
    raise Refused(t("{path}: not a live setting llm-doctor writes (a file under /proc/sys or "
                    "/sys)", path=repr(path)[:200]))
