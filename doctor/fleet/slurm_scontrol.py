"""Running scontrol, each call bounded, every failure one SlurmError line.

slurmd kills its HealthCheckProgram at 60 s; scontrol itself waits MessageTimeout (10 s by
default) per try when slurmctld does not answer. Each call here gets at most ``CALL_S`` and
all of them together ``BUDGET_S``, so a health check that reads the node and updates it ends
well inside slurmd's limit even when slurmctld is gone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

from doctor.fleet.slurm import SlurmError
from doctor.i18n import t

CALL_S = 15.0
BUDGET_S = 40.0


class ScontrolMissing(SlurmError):
    """No scontrol to run: Slurm's client is not installed (a dry run says what it would do
    all the same)."""


class Scontrol:
    """scontrol at ``path`` (a name looked up on PATH, or a path), with one deadline."""

    def __init__(self, path: str = "scontrol", budget_s: float = BUDGET_S) -> None:
        found = shutil.which(path) if os.sep not in path else path
        if not found or not os.access(found, os.X_OK):
            raise ScontrolMissing(t("scontrol not found at {path}: install Slurm's client "
                                    "(slurm-client) or pass --scontrol PATH",
                                    path=repr(path)))
        self.path = found
        self.deadline = time.monotonic() + budget_s

    def run(self, *args: str) -> str:
        """scontrol's stdout for ``args``; SlurmError when it fails or runs out of time."""
        left = min(CALL_S, self.deadline - time.monotonic())
        line = " ".join(["scontrol", *args])
        if left <= 0:
            raise SlurmError(t("{command}: no time left within {budget:g}s", command=line,
                               budget=BUDGET_S))
        try:
            done = subprocess.run([self.path, *args], capture_output=True, text=True,
                                  errors="replace", timeout=left, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SlurmError(t("{command}: no answer in {seconds:.0f}s; is slurmctld up "
                               "('scontrol ping')?", command=line, seconds=left)) from None
        except OSError as exc:
            raise SlurmError(t("{command}: cannot run {path}: {reason}", command=line,
                               path=self.path, reason=exc.strerror)) from None
        if done.returncode != 0:
            said = " ".join((done.stderr or done.stdout).split())[:200] or t("no message")
            raise SlurmError(t("{command} failed (exit {code}): {said}", command=line,
                               code=done.returncode, said=said))
        return done.stdout

    def show_node(self, name: str) -> str:
        return self.run("show", "node", name, "--oneliner")
