"""Sequential read throughput of files (e.g. model weights), in decimal MB/s (1e6 bytes/s).

Reads the files in order, front to back, in ``block_bytes`` blocks, until ``max_bytes`` are read
or ``max_seconds`` have passed, whichever comes first (the last block may overrun the time by
one block's read). The point is the speed of the storage, not of the page cache, so:

- ``o_direct``: the files are opened with O_DIRECT into a page-aligned buffer, which bypasses
  the page cache. O_DIRECT needs offsets and lengths aligned to the device's logical block; the
  page size is a multiple of every common one, so reads stop at the last page boundary of a file
  (the unaligned tail, under one page, is not read) and at the last page boundary of max_bytes.
- ``fadvise_dontneed``: where O_DIRECT is refused with EINVAL (tmpfs on older kernels, some
  overlay and FUSE filesystems), the file's cached pages are dropped with
  posix_fadvise(POSIX_FADV_DONTNEED) and it is read buffered. Dirty pages (a file still being
  written) are not dropped, so this can still read from memory and overstate.
  If any file needed the fallback, "method" says so.

"seconds" counts the reads only, not opening files or dropping their cache.
Linux only. Needs read permission on the files (root for a raw block device such as
/dev/nvme0n1, which works too). Manual equivalent:
``dd if=PATH of=/dev/null bs=8M iflag=direct count=N`` (or ``fio --rw=read --direct=1``).
host.storage runs it in its own process (through ``host.measure``); the CLI is
``python -m probes.kernels.disk_read --max-bytes N --max-seconds S PATH [PATH...]``.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import time

PAGE_BYTES = mmap.PAGESIZE
O_DIRECT = "o_direct"
FADVISE_DONTNEED = "fadvise_dontneed"


def measure(
    *, paths: list[str], max_bytes: int, max_seconds: float, block_bytes: int = 8 * 1024 * 1024
) -> dict:
    """Read ``paths`` sequentially; return a JSON-serialisable dict.

    Keys: method ("o_direct" | "fadvise_dontneed"), bytes_read (<= max_bytes), seconds (time in
    reads), read_mbps (decimal MB/s; 0.0 when nothing was read), files_read (the paths opened,
    in order), stopped_by ("max_bytes" | "max_seconds" | "end_of_files").

    Raises ValueError for bad arguments; FileNotFoundError, PermissionError, IsADirectoryError
    (or another OSError) naming the path that cannot be read.
    """
    _validate(paths, max_bytes, max_seconds, block_bytes)
    # An anonymous mapping starts on a page boundary: the alignment O_DIRECT needs.
    buffer = mmap.mmap(-1, block_bytes)
    deadline = time.perf_counter() + max_seconds
    bytes_read, seconds, files_read, methods = 0, 0.0, [], set()
    stopped_by = "end_of_files"
    try:
        for path in paths:
            fd, method = _open(path)
            files_read.append(path)
            try:
                read, spent, stopped_by, method = _read_file(
                    fd, path, method, buffer, max_bytes - bytes_read, deadline
                )
            finally:
                os.close(fd)
            methods.add(method)
            bytes_read += read
            seconds += spent
            if stopped_by != "end_of_files":
                break
    finally:
        buffer.close()
    return {
        # The weakest method used: one buffered file makes the whole figure suspect.
        "method": FADVISE_DONTNEED if FADVISE_DONTNEED in methods else O_DIRECT,
        "bytes_read": bytes_read,
        "seconds": seconds,
        "read_mbps": bytes_read / seconds / 1e6 if seconds > 0 else 0.0,
        "files_read": files_read,
        "stopped_by": stopped_by,
    }


def _validate(paths: list[str], max_bytes: int, max_seconds: float, block_bytes: int) -> None:
    if not paths:
        raise ValueError("paths must name at least one file")
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be positive, not {max_bytes}")
    if not max_seconds > 0:
        raise ValueError(f"max_seconds must be positive, not {max_seconds}")
    if block_bytes < PAGE_BYTES or block_bytes % PAGE_BYTES:
        raise ValueError(f"block_bytes must be a multiple of the page size {PAGE_BYTES}")


def _open(path: str) -> tuple[int, str]:
    """Open for reading, with O_DIRECT where the filesystem accepts it."""
    if hasattr(os, "O_DIRECT"):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise  # not found, no permission: already names the path
        else:
            _require_readable_kind(fd, path)
            return fd, O_DIRECT
    fd = os.open(path, os.O_RDONLY)
    _require_readable_kind(fd, path)
    return fd, FADVISE_DONTNEED


def _require_readable_kind(fd: int, path: str) -> None:
    # Opening a directory read-only succeeds; reading it is what fails, less clearly.
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)


def _drop_cache(fd: int) -> None:
    # offset 0, length 0: the whole file.
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _read_file(
    fd: int, path: str, method: str, buffer: mmap.mmap, budget_bytes: int, deadline: float
) -> tuple[int, float, str, str]:
    """Read one file from the start.

    Returns (bytes read, seconds in reads, why it stopped, method in the end).
    """
    if method == FADVISE_DONTNEED:
        _drop_cache(fd)
    # lseek, not st_size: a block device reports st_size 0.
    size = os.lseek(fd, 0, os.SEEK_END)
    offset, spent = 0, 0.0
    with memoryview(buffer) as view:
        while True:
            alignment = PAGE_BYTES if method == O_DIRECT else 1
            length = min(len(buffer), size - offset, budget_bytes - offset)
            length -= length % alignment
            if length <= 0:
                budget_left = budget_bytes - offset < alignment
                return offset, spent, "max_bytes" if budget_left else "end_of_files", method
            start = time.perf_counter()
            try:
                count = os.preadv(fd, [view[:length]], offset)
            except OSError as error:
                if error.errno != errno.EINVAL or method != O_DIRECT:
                    raise OSError(error.errno, error.strerror, path) from error
                # The filesystem took O_DIRECT at open but refuses the read: Linux lets
                # F_SETFL clear O_DIRECT on the open file, so go on buffered from here.
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                _drop_cache(fd)
                method = FADVISE_DONTNEED
                continue
            now = time.perf_counter()
            spent += now - start
            offset += count
            if count < length:  # the file shrank under us: stop at what was there
                return offset, spent, "end_of_files", method
            if offset >= budget_bytes:
                return offset, spent, "max_bytes", method
            if now >= deadline:
                return offset, spent, "max_seconds", method
