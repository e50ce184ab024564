"""Reading an engine's log as hostile text: which files hold its output, and their head and
tail. Shared by net.nccl_log (NCCL's lines) and npu.hccl_log (HCCL's), which read the same
files for different words.

Only a regular file is read: its size is listed first (listing its folder), so a FIFO, a
socket or a device is never opened; of a large file its first MiB (where a library's init
lines are) and its last 2 MiB (the newest: a failure at start ends the log); undecodable
bytes replaced. An engine's stdout and stderr are read where ``/proc/<pid>/fd/1`` and ``2``
link to a file (``vllm serve … > vllm.log 2>&1``), inside the engine's own root
(``/proc/<pid>/root``, a container's).
"""

from __future__ import annotations

import posixpath

from doctor.i18n import t
from doctor.seam.host import Host, HostReadError
from probes.helpers.engine_output import file_of
from probes.helpers.gpu_common import reason_of

HEAD_BYTES = 1 << 20  # a library's init lines come first
TAIL_BYTES = 2 << 20  # and a failure at start ends the log
CHUNK = 1 << 20  # one ranged read (the seam reads at most 1 MiB at a time)
MAX_LINES = 200_000


def size_of(host: Host, path: str) -> tuple[int | None, str | None]:
    """The size of ``path`` when it is a regular file, else why it is not read. Listing its
    folder tells a regular file (with its size) from a FIFO, socket or device without
    opening it."""
    folder, name = posixpath.split(path)
    try:
        files = host.list_files(folder or "/")
    except HostReadError as exc:
        return None, t("{path}: its folder cannot be read ({reason})", path=path, reason=reason_of(exc))
    if name in files:
        return files[name], None
    try:
        dirs = host.list_dirs(folder or "/")
    except HostReadError:
        dirs = []
    if name in dirs:
        return None, t("{path} is a directory: name the log file", path=path)
    return None, t("{path}: no such regular file (absent, or a FIFO, socket or device: not read)", path=path)


def read_lines(host: Host, path: str, size: int) -> tuple[list[str], int, int]:
    """(lines, bytes read, bytes skipped) of the head and tail of a file of ``size`` bytes."""
    if size <= HEAD_BYTES + TAIL_BYTES:  # the whole file, as one text
        spans = [(0, size)]
    else:  # the head and the tail, each cut at a line's end
        spans = [(0, HEAD_BYTES), (size - TAIL_BYTES, TAIL_BYTES)]
    chunks, got = [], 0
    for start, length in spans:
        data = b""
        for offset in range(start, start + length, CHUNK):
            piece = host.read_bytes(path, offset, min(CHUNK, start + length - offset))
            data += piece
            if len(piece) < min(CHUNK, start + length - offset):
                break  # the file shrank while read
        got += len(data)
        chunks.append(data.decode("utf-8", "replace").splitlines())
    skipped = max(0, size - got)
    lines = chunks[0]
    if len(chunks) > 1:  # a line cut at either edge of the gap is no line
        lines = lines[:-1] + chunks[1][1:]
    return lines[:MAX_LINES], got, skipped


def output_files(host: Host, pid: int, label: str) -> list[tuple[str, str, str]]:
    """(source, path as the engine names it, path to read) of the engine's stdout and
    stderr where each is a file (one entry when both go to the same file)."""
    out: list[tuple[str, str, str]] = []
    root = f"/proc/{pid}/root"
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        target = file_of(host, pid, fd)
        if target is not None and target not in (p for _, p, _ in out):
            out.append((f"{stream} of {label}", target, root + target))
    return out
