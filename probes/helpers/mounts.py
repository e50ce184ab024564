"""``/dev/shm`` as a process sees it, in its own mount namespace.

Sources: ``statvfs`` of ``/proc/<pid>/root/dev/shm`` (the kernel resolves a process's
``root`` link inside that process's mount namespace: a container's /dev/shm, not the
host's; needs root or the process's own user) and the ``/dev/shm`` line of
``/proc/<pid>/mountinfo`` (its filesystem type and tmpfs ``size=`` option), which stands
in when the stat is refused. Manual equivalent: ``nsenter -t <pid> -m df -h /dev/shm``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError

SHM = "/dev/shm"
_SIZE = re.compile(r"(?:^|,)size=([0-9]{1,20})([kKmMgG]?)(?:,|$)")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


@dataclass(frozen=True, slots=True)
class Shm:
    size_bytes: int | None  # None: neither the stat nor mountinfo told (see reason)
    source: str  # "statvfs /proc/<pid>/root/dev/shm" or "/proc/<pid>/mountinfo size="
    fstype: str | None  # tmpfs; None where mountinfo has no /dev/shm line (a plain directory)
    reason: str | None  # why the size is absent


def unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def shm_mount(text: str) -> tuple[str, int | None] | None:
    """The last /dev/shm line of a mountinfo (the one on top): (fstype, size= bytes)."""
    found = None
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or unescape(fields[4]) != SHM:
            continue
        match = _SIZE.search(tail[2])
        size = int(match.group(1)) * _UNITS[match.group(2).lower()] if match else None
        found = (tail[0], size if size is not None and size < 2**63 else None)
    return found


def shm_of(host: Host, pid: int) -> Shm:
    """The size of ``pid``'s /dev/shm; the stat first, mountinfo's size= when it is refused."""
    mountinfo = f"/proc/{pid}/mountinfo"
    try:
        mount = shm_mount(host.read_text(mountinfo))
    except HostReadError:
        mount = None
    fstype = mount[0] if mount else None
    path = f"/proc/{pid}/root{SHM}"
    try:
        return Shm(host.stat(path).fs_total_bytes, f"statvfs {path}", fstype, None)
    except HostReadError as exc:
        if mount and mount[1] is not None:
            return Shm(mount[1], f"{mountinfo} size=", fstype, None)
        return Shm(None, f"statvfs {path}", fstype,
                   f"{path}: {getattr(exc.reason, 'value', exc.reason)}"
                   + ("" if mount else f"; no {SHM} mount in {mountinfo}"))
