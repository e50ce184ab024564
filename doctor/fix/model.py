"""The records of a fix plan: a plan, its steps, and each step's actions as data.

Every action says what it changes in a way both the shell script and ``fix --apply`` can
carry out and undo: a whole file with its new content (always a file named for llm-doctor,
so the old state is "absent" or a file llm-doctor wrote), a live setting (a path under
/proc/sys or /sys with the value the scan saw and the one wanted), a command with the
command that undoes it, an engine flag diff (shown, never edited), or a manual checklist
item (never a command).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Kind(str, Enum):
    FILE = "file"              # a persistent setting in a file named for llm-doctor
    LIVE = "live"              # a live setting: sysctl, sysfs, nvidia-smi
    ENGINE_FLAG = "engine-flag"  # an argv diff for the engine, shown and not applied
    COMMAND = "command"        # a command with a known undo
    MANUAL = "manual"          # BIOS, kernel command line, hands on the machine


class Risk(str, Enum):
    NONE = "none"
    RESTARTS_ENGINE = "restarts-engine"  # takes effect when the engine restarts
    NEEDS_REBOOT = "needs-reboot"
    DISRUPTIVE = "disruptive"


@dataclass(frozen=True, slots=True)
class FileWrite:
    """Write ``content`` to ``path`` (created with its folders, mode 0644)."""

    path: str
    content: str


@dataclass(frozen=True, slots=True)
class LiveWrite:
    """Write ``new`` to a live setting's file; ``seen`` is what the scan read there."""

    path: str    # /proc/sys/net/core/somaxconn, /sys/devices/system/cpu/cpu0/cpufreq/...
    name: str    # how a person names it: net.core.somaxconn, cpu0 scaling_governor
    seen: str | None
    new: str


@dataclass(frozen=True, slots=True)
class Command:
    """Run ``argv``; ``undo`` runs on revert (empty: nothing to undo, e.g. daemon-reload)."""

    argv: tuple[str, ...]
    undo: tuple[str, ...] = ()
    why: str = ""


@dataclass(frozen=True, slots=True)
class FlagDiff:
    """The engine's argv change: ``remove`` and ``add`` are flags with their values."""

    engine: str                          # vllm at http://127.0.0.1:8000 pid 48213
    remove: tuple[str, ...]              # ("--enforce-eager",)
    add: tuple[str, ...]                 # ("--gpu-memory-utilization", "0.90")
    where: str                           # where the flag lives: the unit, the container, argv


@dataclass(frozen=True, slots=True)
class Step:
    id: str                    # "01-network-backlog-small": its place in the plan and its rule
    rule: str
    key: str
    cause: str
    kind: Kind
    risk: Risk
    title: str
    check: str                 # how to tell the fix is already in place
    verify: str                # how to tell it took
    revert: str                # what undoes it
    files: tuple[FileWrite, ...] = ()
    live: tuple[LiveWrite, ...] = ()
    commands: tuple[Command, ...] = ()
    flags: FlagDiff | None = None
    manual: tuple[str, ...] = ()
    restart_to_take: bool = False  # in place on disk, the running engine keeps the old value
    probes: tuple[str, ...] = ()   # the probes its rule reads: the verify scan runs them

    @property
    def finding(self) -> str:
        return f"{self.rule} {self.key}".strip()


@dataclass(frozen=True, slots=True)
class NoStep:
    """A finding of the scan that gets no step, and why."""

    rule: str
    key: str
    cause: str
    why: str


@dataclass(frozen=True, slots=True)
class Plan:
    id: str
    created_at: str            # UTC, ISO 8601
    host: str
    source: str                # "live scan", "replay DIR", "saved scan FILE"
    probes: tuple[str, ...]    # the probes the steps' findings came from: the verify scan's
    steps: tuple[Step, ...] = ()
    no_steps: tuple[NoStep, ...] = ()
    notes: tuple[str, ...] = field(default=())
