"""A process and its ancestors, from ``/proc/<pid>/stat``: whose child a worker is.

vLLM's and SGLang's tensor-parallel workers, a container's processes and a front end's
engine are children of the process the user started; the GPUs, the container and the
front end are matched to an engine through this lineage. No privilege needed.
Manual equivalent: ``ps -o ppid= -p PID`` repeated, or ``pstree -s PID``.
"""

from __future__ import annotations

from doctor.seam.host import Host, HostReadError


def _parent(host: Host, pid: int) -> int | None:
    """The parent pid from /proc/<pid>/stat (after the command name, which may hold ')')."""
    try:
        fields = host.read_text(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()
    except HostReadError:
        return None
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def lineage(host: Host, pid: int, depth: int = 8) -> set[int]:
    """pid and its ancestors, nearest first, up to ``depth`` generations."""
    seen = {pid}
    for _ in range(depth):
        parent = _parent(host, pid)
        if parent is None or parent <= 1 or parent in seen:
            break
        seen.add(parent)
        pid = parent
    return seen
