"""The systemd service an engine runs under, and what that service's journal holds since the
engine started: where an engine started as a unit (``systemctl start vllm``) writes its
output, NCCL's ``NCCL_DEBUG=INFO`` lines included, when its stdout is not a file.

The unit: the engine's cgroup, ``/proc/<pid>/cgroup`` (the v1 ``name=systemd`` hierarchy, else
the v2 one): the deepest ``*.service`` in the path, ``0::/system.slice/vllm.service`` →
``vllm.service``. A unit under ``user@<uid>.service`` is a user's unit (its journal is that
user's) and is not read; a container (``docker-<id>.scope``) or a login session
(``session-3.scope``) has no service. The name is the engine's cgroup, which whoever starts
the engine chooses: it is passed to ``journalctl`` only when it is a unit name by systemd's
grammar (systemd.unit(5), src/basic/unit-name.c: letters, digits, ``:_.-``, one ``@`` before
an instance, 255 characters at most), never beginning with ``-`` or ``.`` and never holding a
glob character (``journalctl -u`` matches globs), as one argv element ``--unit=NAME``, with no
shell.

The read: ``journalctl --unit=NAME --output=cat --no-pager --lines=N --since=@START`` through
``host.run`` (a capture keeps its output, a replay answers it): the messages alone, of this
engine's run only (``START``: the process's start, ``/proc/<pid>/stat`` field 22 in clock
ticks of 1/100 s, Linux's USER_HZ, after ``btime`` of ``/proc/stat``), the last
``JOURNAL_LINES`` of them, in ``JOURNAL_TIMEOUT_S``, and the last ``JOURNAL_BYTES`` of what it
printed kept. Absent ``journalctl``, no permission (not root nor in the ``systemd-journal`` or
``adm`` group: journalctl then shows the caller's own messages only), or no journal at all
are reasons, not errors: where nothing came back, journalctl is asked once more without
``--output=cat`` (which silences its notices) for the notice that says which. Privilege: root or those groups; reading
``/proc/<pid>/cgroup`` needs none. journald names each message's unit from the cgroup of the
process that sent it, read when it handles the message: the lines of a short-lived child that
had exited by then carry no unit and are not read here (an engine's workers, which print
NCCL's lines, live as long as the engine). Manual equivalent: ``journalctl -u vllm.service -o cat
--since @<start> | grep NCCL``.
"""

from __future__ import annotations

import re

from doctor.i18n import t
from doctor.seam.host import Host, HostReadError, detail_text, reason_text
from probes.helpers.cgroups import parse_proc_cgroup

JOURNAL_LINES = 20_000  # NCCL's init lines of 8 ranks are a few thousand; an engine's requests log the rest
JOURNAL_BYTES = 3 << 20  # as much as the head and tail of a log file (probes/net/nccl_log.py)
JOURNAL_TIMEOUT_S = 10.0
# /proc/stat's btime is whole seconds of a boot time the kernel recomputes from the clock, so it
# can read a second late; asked from the start itself, journalctl dropped the engine's first
# second of lines (a live test saw none at all). Ask from a little before: the lines in between
# are the unit's own, of a run that ended before this one started, at most this many seconds.
SINCE_SLACK_S = 2
USER_HZ = 100  # the unit of /proc/<pid>/stat's times on every Linux architecture (sysconf(_SC_CLK_TCK))
# systemd's unit names (src/basic/unit-name.c): a prefix, an optional "@instance", a suffix;
# here without "\\" (an escape to journalctl's glob match) and not starting with "-" or ".".
UNIT = re.compile(r"(?=.{1,255}\Z)[A-Za-z0-9_:][A-Za-z0-9_.:-]*(?:@[A-Za-z0-9_.:-]*)?\.service\Z")
USER_MANAGER = re.compile(r"user@[0-9]{1,10}\.service")
# journalctl's words on stderr (systemd 252, src/shared/journal-util.c and journalctl.c)
NO_JOURNAL = "No journal files were found"  # journald keeps none here
NOT_ALL = ("You are currently not seeing messages from",  # its hint to an unprivileged caller
           "No journal files were opened due to insufficient permissions")


def unit_of(host: Host, pid: int) -> tuple[str | None, str]:
    """(the system service ``pid`` runs under, "") or (None, why there is none)."""
    path = f"/proc/{pid}/cgroup"
    try:
        cgroups = parse_proc_cgroup(path, host.read_text(path))
    except HostReadError as exc:
        return None, exc.text()
    tree = cgroups.get("systemd") or cgroups.get("", "")
    parts = [p for p in tree.split("/") if p]
    if any(USER_MANAGER.fullmatch(p) for p in parts):
        return None, t("it runs under a user's systemd manager ({cgroup}): a user unit's journal is not read",
                       cgroup=_shown(tree))
    services = [p for p in parts if p.endswith(".service")]
    if not services:
        return None, t("its cgroup {cgroup} is no systemd service (a container, a login session or none)",
                       cgroup=_shown(tree))
    if not UNIT.fullmatch(services[-1]):
        return None, t("its cgroup names {unit}, which is not a systemd unit name: not passed to journalctl",
                       unit=_shown(services[-1]))
    return services[-1], ""


def _shown(text: str) -> str:
    """A hostile cgroup path, fit to quote on one line."""
    return ascii(text[:120])[1:-1]


def started_at(host: Host, pid: int) -> int | None:
    """When ``pid`` started, in seconds since the epoch; None when /proc does not say."""
    try:
        stat = host.read_text(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()
        boot = next((line.split()[1] for line in host.read_text("/proc/stat").splitlines()
                     if line.startswith("btime ")), "")
    except HostReadError:
        return None
    ticks = stat[19] if len(stat) > 19 else ""  # field 22; the list starts at field 3
    if not (ticks.isascii() and ticks.isdigit() and boot.isascii() and boot.isdigit()) \
            or len(ticks) > 20 or len(boot) > 12:
        return None
    return int(boot) + int(ticks) // USER_HZ


def journal_argv(unit: str, since: int | None) -> tuple[str, ...]:
    """journalctl's arguments; ``unit`` must be a unit name by ``UNIT`` (ValueError else)."""
    if not UNIT.fullmatch(unit):
        raise ValueError(f"not a systemd service name: {unit!r}")
    window = f"--since=@{since - SINCE_SLACK_S}" if since is not None else "--since=-24h"
    return ("journalctl", f"--unit={unit}", "--output=cat", "--no-pager",
            f"--lines={JOURNAL_LINES}", window)


def journal(host: Host, unit: str, since: int | None) -> tuple[list[str], int, int, str | None]:
    """(lines, bytes kept, bytes cut, None) of ``unit``'s journal since ``since``, or
    ([], 0, 0, why it was not read)."""
    try:
        out = host.run(journal_argv(unit, since), timeout_s=JOURNAL_TIMEOUT_S)
    except HostReadError as exc:
        return [], 0, 0, _failed(unit, exc)
    if any(words in out.stderr for words in (NO_JOURNAL, *NOT_ALL)):  # said whatever its exit status
        return [], 0, 0, _why_empty(host, unit, out.stderr)
    if out.rc != 0:
        return [], 0, 0, t("{unit}'s journal not read: journalctl exited {rc} ({said})",
                           unit=unit, rc=out.rc, said=_shown(" ".join(out.stderr.split())))
    data = out.stdout.encode("utf-8", "replace")
    kept = data[-JOURNAL_BYTES:]
    lines = kept.decode("utf-8", "replace").splitlines()
    if len(kept) < len(data):
        lines = lines[1:]  # cut inside its first line
    if not lines:
        return [], 0, 0, _why_empty(host, unit, out.stderr)
    return lines, len(kept), len(data) - len(kept), None


def _why_empty(host: Host, unit: str, said: str) -> str:
    """Why journalctl printed nothing (``said``: its stderr). ``--output=cat`` makes it quiet (as json and export
    do), so its notices of no journal or no permission are asked for again without it,
    with ``--lines=0``: no message, only the notices."""
    if not any(words in said for words in (NO_JOURNAL, *NOT_ALL)):
        try:
            said = host.run(("journalctl", f"--unit={unit}", "--lines=0", "--no-pager"),
                            timeout_s=JOURNAL_TIMEOUT_S).stderr
        except HostReadError:
            said = ""
    if any(words in said for words in NOT_ALL):
        return t("{unit}'s journal not read: no permission (root, or the systemd-journal "
                 "or adm group, sees a service's messages)", unit=unit)
    if NO_JOURNAL in said:
        return t("{unit}'s journal not read: this host keeps no journal (journalctl: {said})",
                 unit=unit, said=_shown(" ".join(said.split())))
    return t("{unit}'s journal holds no message since the engine started "
             "(its output may go elsewhere: StandardOutput= of the unit)", unit=unit)


def _failed(unit: str, exc: HostReadError) -> str:
    why = reason_text(exc.reason) + (f" ({detail_text(exc.detail)})" if exc.detail else "")
    return t("{unit}'s journal not read: journalctl: {reason}", unit=unit, reason=why)
