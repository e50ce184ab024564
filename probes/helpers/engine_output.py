"""What an engine process printed: its standard output or error where that is a file, else
its systemd service's journal since it started.

The same reading as net.nccl_log's (probes/net/nccl_log.py, which a probe of another family
may not import): ``/proc/<pid>/fd/1`` and ``2`` followed to a regular file (a pipe, socket,
terminal, device or deleted file is not read), read inside the engine's own root
(``/proc/<pid>/root``, a container's); the file's size is listed first, so a FIFO or a
device is never opened; its first MiB (where an engine's start is logged) and its last MiB,
each line cut at 4,096 characters, undecodable bytes replaced. Where neither is a file, the
journal (probes/helpers/engine_journal.py: bounded in lines, bytes and time). Privilege: the
engine's user or root. Manual equivalent: ``ls -l /proc/PID/fd/1``; ``journalctl -u UNIT``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from doctor.i18n import t
from doctor.seam.host import Host, HostReadError
from probes.helpers.engine_journal import journal, started_at, unit_of
from probes.helpers.gpu_common import reason_of

HEAD_BYTES = 1 << 20  # an engine logs its start first
TAIL_BYTES = 1 << 20  # and a restart appended to the same file is at its end
CHUNK = 1 << 20  # the seam reads at most 1 MiB at a time
MAX_LINES = 100_000
MAX_LINE_CHARS = 4096


@dataclass(frozen=True, slots=True)
class Output:
    source: str | None  # "stdout /var/log/vllm.log", "journalctl --unit=vllm.service"; None: none read
    lines: tuple[str, ...]
    reason: str | None  # why nothing was read


def file_of(host: Host, pid: int, fd: int) -> str | None:
    """The file ``pid``'s descriptor ``fd`` writes to; None for a pipe, a socket (the
    journal's stream), a device, a deleted file or an unreadable link (engine.output and
    net.nccl_log read an engine's stdout and stderr through it)."""
    try:
        target = host.read_link(f"/proc/{pid}/fd/{fd}")
    except HostReadError:
        return None
    if target.startswith("/") and not target.startswith(("/dev/", "/proc/")) and not target.endswith(" (deleted)"):
        return target
    return None


def _size(host: Host, path: str) -> int | None:
    """The size of ``path`` when its folder lists it as a regular file."""
    folder, name = posixpath.split(path)
    try:
        return host.list_files(folder or "/").get(name)
    except HostReadError:
        return None


def head_and_tail(host: Host, path: str, size: int) -> list[str]:
    """The lines of the first and last MiB of a file of ``size`` bytes (all of a smaller one)."""
    spans = [(0, size)] if size <= HEAD_BYTES + TAIL_BYTES else [(0, HEAD_BYTES), (size - TAIL_BYTES, TAIL_BYTES)]
    parts = []
    for start, length in spans:
        data = b""
        for offset in range(start, start + length, CHUNK):
            want = min(CHUNK, start + length - offset)
            piece = host.read_bytes(path, offset, want)
            data += piece
            if len(piece) < want:
                break  # the file shrank while read
        parts.append(data.decode("utf-8", "replace").splitlines())
    lines = parts[0] if len(parts) == 1 else parts[0][:-1] + parts[1][1:]  # a cut line is no line
    return [line[:MAX_LINE_CHARS] for line in lines[:MAX_LINES]]


def output_of(host: Host, pid: int) -> Output:
    """What ``pid`` printed: its first stdout/stderr that is a regular file, else its journal."""
    why = []
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        path = file_of(host, pid, fd)
        if path is None:
            continue
        at = f"/proc/{pid}/root{path}"
        size = _size(host, at)
        if size is None:
            why.append(t("{stream} {path}: not a regular file that can be listed", stream=stream, path=path))
            continue
        try:
            return Output(f"{stream} {path}", tuple(head_and_tail(host, at, size)), None)
        except HostReadError as exc:
            why.append(t("{stream} {path}: {why}", stream=stream, path=path, why=reason_of(exc)))
    unit, no_unit = unit_of(host, pid)
    if unit is None:
        return Output(None, (), t("; ").join(why + [t("stdout and stderr are not files; {why}", why=no_unit)]))
    lines, _, _, failed = journal(host, unit, started_at(host, pid))
    if failed is not None:
        return Output(None, (), t("; ").join(why + [failed]))
    return Output(f"journalctl --unit={unit}", tuple(line[:MAX_LINE_CHARS] for line in lines[:MAX_LINES]), None)
