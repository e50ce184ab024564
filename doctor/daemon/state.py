"""The daemon's state file: its last evaluation, written atomically for every adapter to read.

Schedulers give a health check seconds (node-problem-detector kills its plugins at 5 s,
slurmd its HealthCheckProgram at 60 s), and a scan can take longer. So the daemon writes what
it last evaluated to one file after every beat, and the adapters (``llm-doctor npd``,
``llm-doctor slurm-healthcheck``) read that file instead of probing again:

    {"kind": "llm-doctor-state", "state_version": 1,
     "taken_at": 1764612345.2,          # Unix seconds: when the rules were evaluated
     "interval_s": 15.0,                # the daemon's beat
     "daemon_pid": 4242, "evaluations": 17,
     "families": {"gpu-lost": "gpu", ...},   # each rule's family (its first probe's)
     "report": { ... }}                 # the evaluation as a saved scan (docs/report-schema.json)

The report part is a saved JSON scan, so anything that reads one (``llm-doctor report``,
``diff``) reads the state too. It passes through the JSON report's redaction like any scan.

A reader gets a ``State`` whose ``unknown`` says why its verdict cannot be trusted, or is
empty: a file that is absent, unreadable, not a state, from the future, or older than
``STALE_INTERVALS`` of the daemon's own interval is unknown, never OK.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from doctor.jsonfile import read_json
from doctor.model import ScanReport
from doctor.output import write_atomic
from reports.json_report import MAX_SAVED_BYTES, SAVED_DEPTH, check, to_dict

KIND = "llm-doctor-state"
STATE_VERSION = 1
DEFAULT_PATH = "/var/lib/llm-doctor/state.json"
STALE_INTERVALS = 3  # older than three beats: the daemon is stopped, hung or far behind
FUTURE_SLACK_S = 60.0  # clocks of a host and its container agree within this
FAMILIES = ("gpu", "engine", "host")

if TYPE_CHECKING:  # the adapters read states under a scheduler's clock: no rules loaded
    from doctor.rules.loader import Rule


class StateError(Exception):
    """A state file that cannot be read or is not a state (the message names it); ``read``
    turns it into the State's ``unknown``."""


def family_of(rule: "Rule") -> str:
    """A rule's family: that of the first probe it reads (``gpu.nvml`` → gpu)."""
    for probe in rule.probes:
        head = probe.partition(".")[0]
        if head in FAMILIES:
            return head
    return "host"


def to_state(report: ScanReport, rules: "list[Rule]", interval_s: float, taken_at: float,
             evaluations: int) -> dict[str, Any]:
    return {"kind": KIND, "state_version": STATE_VERSION, "taken_at": round(taken_at, 3),
            "interval_s": interval_s, "daemon_pid": os.getpid(), "evaluations": evaluations,
            "families": {r.id: family_of(r) for r in rules}, "report": to_dict(report)}


def write(path: str | Path, state: dict[str, Any]) -> None:
    """Write the state atomically (a temporary file beside it, then a rename), creating its
    folder; OSError when it cannot."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(state, indent=1, allow_nan=False) + "\n")


@dataclass(frozen=True, slots=True)
class State:
    """What a reader found at ``path``: ``unknown`` is "" for a fresh state, else why not."""

    path: str
    unknown: str = ""
    taken_at: float = 0.0
    interval_s: float = 0.0
    age_s: float = 0.0
    families: dict[str, str] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def findings(self) -> list[dict[str, Any]]:
        return list(self.report.get("findings", []))

    @property
    def probes(self) -> list[dict[str, Any]]:
        return list(self.report.get("probes", []))

    def family(self, finding: dict[str, Any]) -> str:
        return self.families.get(finding.get("rule", ""), "host")


def read(path: str | Path, now: float | None = None) -> State:
    """The state at ``path``, judged at ``now`` (Unix seconds; default the clock). Never
    raises for the file's sake: whatever is wrong with it is the State's ``unknown``."""
    name = str(path)
    now = time.time() if now is None else now
    if not os.path.lexists(name):
        return State(name, f"no state file at {name}: is 'llm-doctor daemon' running "
                           f"(its --state-file)?")
    try:
        data = read_json(Path(name), "state file", StateError, MAX_SAVED_BYTES, SAVED_DEPTH + 1)
        return _judged(name, data, now)
    except StateError as exc:
        return State(name, str(exc))


def _judged(name: str, data: Any, now: float) -> State:
    def bad(why: str) -> StateError:
        return StateError(f"{name}: {why}; it is written by 'llm-doctor daemon --state-file'")

    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise bad("not an llm-doctor state file")
    if data.get("state_version") != STATE_VERSION:
        raise bad(f"state_version {data.get('state_version')!r}, this llm-doctor reads "
                  f"{STATE_VERSION}")
    numbers: dict[str, float] = {}
    for key in ("taken_at", "interval_s"):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise bad(f"{key} must be a positive number, not {value!r}")
        numbers[key] = float(value)
    taken, interval = numbers["taken_at"], numbers["interval_s"]
    families = data.get("families")
    if not isinstance(families, dict) or not all(
            isinstance(k, str) and v in FAMILIES for k, v in families.items()):
        raise bad(f"families must map rule ids to one of {', '.join(FAMILIES)}")
    report = check(data.get("report"), f"{name} (its report)", StateError)
    age = now - taken
    unknown = ""
    if age < -FUTURE_SLACK_S:
        unknown = (f"the state in {name} is dated {-age:.0f}s in the future: "
                   "check this host's clock")
    elif age > STALE_INTERVALS * interval:
        unknown = (f"the state in {name} is {age:.0f}s old, more than {STALE_INTERVALS} "
                   f"intervals of {interval:g}s: is the daemon running?")
    return State(name, unknown, taken, interval, age, dict(families), report)
