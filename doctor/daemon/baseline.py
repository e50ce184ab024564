"""The daemon's baseline: the evaluation to compare later ones with (``llm-doctor diff
baseline live``: what changed since it was last fine).

The daemon writes it beside its state file as ``baseline.json``, in the state file's format
(doctor/daemon/state.py: a saved scan plus when, the interval and each rule's family),
atomically, at two moments:

* its first healthy evaluation after start: no finding at warning or above, and every probe
  the daemon runs at its level has reported, ok or skipped (one that failed or timed out
  leaves the evaluation unproven: its figures would be missing from the comparison);
* ``kill -USR2``, whatever the state: the operator says "this is how it should be".

Later healthy evaluations do not overwrite it. No state file configured (``--state-file ""``)
means no baseline. A baseline is old by design, so reading one (``read``) does not make its
age a reason for unknown, as the state file's reader does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from doctor.daemon import state
from doctor.i18n import lazy, t, translated
from doctor.model import ProbeResult, Severity

NAME = "baseline.json"
DONE = ("ok", "skipped")  # a probe's statuses that count as reported for a baseline
FIRST_HEALTHY = lazy("the first healthy evaluation since the daemon started")
ON_REQUEST = "SIGUSR2"


def baseline_path(state_file: str | Path) -> Path:
    """``baseline.json`` beside the state file; a state file itself named baseline.json gets
    ``baseline.baseline.json``, so that one never replaces the other."""
    where = Path(state_file)
    return where.with_name(f"baseline.{NAME}" if where.name == NAME else NAME)


def unhealthy(results: Iterable[ProbeResult], findings: Iterable, probes: Iterable[str]) -> str:
    """Why this evaluation cannot be the first healthy one, naming the first reason; "" when
    it can. ``probes``: the names the daemon runs at its level."""
    raised = [f for f in findings if f.severity >= Severity.WARNING]
    if raised:
        return t("{n} finding(s) at warning or above, first {rule}", n=len(raised), rule=raised[0].rule)
    status = {r.name: r.status for r in results}
    unreported = [name for name in probes if status.get(name) not in DONE]
    if unreported:
        first = unreported[0]
        how = status[first] if first in status else t("not reported yet")
        return t("{n} probe(s) not done, first {probe} ({status})", n=len(unreported), probe=first,
                 status=how)
    return ""


@dataclasses.dataclass(slots=True)
class Keeper:
    """When the daemon writes its baseline. ``request`` is all a signal handler calls; the
    loop asks ``due`` after each evaluation and reports back with ``written``."""

    requested: bool = False
    written_to: str = ""  # the path written since start ("" none): a reload may move it

    def request(self) -> None:
        self.requested = True

    def due(self, path: Path, why_not_healthy: str) -> str:
        """Why a baseline is to be written at ``path`` now ("" when not)."""
        if self.requested:
            return ON_REQUEST
        if self.written_to != str(path) and not why_not_healthy:
            return translated(FIRST_HEALTHY)
        return ""

    def written(self, path: Path) -> None:
        self.requested, self.written_to = False, str(path)

    def failed(self) -> None:
        """A write that failed: a request is spent (the log says why); the first healthy
        evaluation is tried again at the next healthy one."""
        self.requested = False


def write(path: str | Path, data: dict) -> None:
    """As the state file is written (atomically, its folder created); OSError when it cannot."""
    state.write(path, data)


def read(path: str | Path, now: float | None = None) -> state.State:
    """The baseline at ``path`` through the state file's reader, its age no reason for
    unknown (absent, broken or dated in the future still are)."""
    found = state.read(path, now)
    if found.report and found.age_s > 0:
        return dataclasses.replace(found, unknown="")
    return found
