"""One variable of a process's environment, and the home directory of its user.

Source: ``/proc/<pid>/environ`` (NUL-separated ``NAME=value``; only the process's own user
or root may read it), ``/proc/<pid>/status`` (``Uid:`` real, effective, saved, fs) and
``/etc/passwd`` (the sixth field is the home directory). Manual equivalent:
``sudo tr '\\0' '\\n' < /proc/<pid>/environ | grep ^NCCL_``, ``getent passwd <uid>``.

A probe asks for the variables it judges by name and keeps only their values: the rest of
the environment (tokens, keys) never reaches a record. A recording keeps the names of every
variable and the values of ``doctor.redact.KEPT_ENV`` only, so a replay answers the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import t
from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_common import reason_of

MAX_VALUE_CHARS = 256  # what a record keeps of one value


@dataclass(frozen=True, slots=True)
class EnvValue:
    value: str | None  # None: not set, or not readable (then ``reason``)
    reason: str | None  # "no-permission", "not-found" (the process ended), ...


def env_value(host: Host, pid: int, name: str) -> EnvValue:
    """``name``'s value in process ``pid``'s environment; the rest is dropped at once."""
    try:
        text = host.memo(f"environ {pid}", lambda: host.read_text(f"/proc/{pid}/environ"))
    except HostReadError as exc:
        return EnvValue(None, reason_of(exc))
    prefix = name + "="
    for item in text.split("\0"):
        if item.startswith(prefix):
            return EnvValue(item[len(prefix):][:MAX_VALUE_CHARS], None)
    return EnvValue(None, None)


def real_uid(host: Host, pid: int) -> int | None:
    try:
        text = host.read_text(f"/proc/{pid}/status")
    except HostReadError:
        return None
    for line in text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


def home_of(host: Host, pid: int) -> tuple[str | None, str | None]:
    """The home directory of the user running ``pid``, or None and why."""
    uid = real_uid(host, pid)
    if uid is None:
        return None, t("no Uid in /proc/{pid}/status", pid=pid)
    try:
        passwd = host.read_text("/etc/passwd")
    except HostReadError as exc:
        return None, f"/etc/passwd: {reason_of(exc)}"
    for line in passwd.splitlines():
        fields = line.split(":")
        if len(fields) >= 7 and fields[2] == str(uid):
            home = fields[5]
            return (home, None) if home.startswith("/") else (None, t("uid {uid}'s home {home} is not a path", uid=uid, home=repr(home)))
    return None, t("uid {uid} not in /etc/passwd", uid=uid)
