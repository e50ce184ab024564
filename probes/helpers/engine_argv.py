"""An engine process's whole command line, kept for ``llm-doctor diff`` to compare every flag.

Source: ``/proc/<pid>/cmdline`` split at its NULs, secrets masked by doctor.redact. No
privilege needed for one's own processes. Manual equivalent: ``tr '\\0' ' ' < /proc/PID/cmdline``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.redact import redact_cmdline
from doctor.seam.host import Host, HostReadError

MAX_ARGS = 512  # of one engine's argv kept
MAX_ARG_CHARS = 1024  # of one argument kept


@dataclass(frozen=True, slots=True)
class EngineArgv:
    """An engine process's whole command line, for ``llm-doctor diff`` to compare every flag."""

    pid: int
    argv: tuple[str, ...]  # /proc/<pid>/cmdline split at its NULs, secrets as *** (doctor.redact)
    reason: str | None  # why it was not read; None when it was


def engine_argv(host: Host, pid: int) -> EngineArgv:
    """``/proc/<pid>/cmdline`` as its arguments, masked where they hold a secret (an
    engine's command line is kept whole, as a capture keeps it; the NULs between arguments
    are kept through the masking, so an argument with spaces stays one)."""
    try:
        raw = host.read_text(f"/proc/{pid}/cmdline")
    except HostReadError as exc:
        return EngineArgv(pid, (), str(getattr(exc.reason, "value", exc.reason)))
    args = redact_cmdline(raw).rstrip("\0").split("\0")
    return EngineArgv(pid, tuple(a[:MAX_ARG_CHARS] for a in args[:MAX_ARGS] if a), None)
