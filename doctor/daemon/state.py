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

Every number that says whether the state is fresh is held to what a daemon can write, so
that a damaged or hand-made state cannot read fresh: ``interval_s`` within the range the
daemon itself accepts (doctor/daemon/settings.py, 1 s to 24 h: an interval of 1e308 would
keep a state from 1970 fresh for ever), ``taken_at`` a finite time after ``EARLIEST`` (a
daemon on a host booted without a real-time clock dates its states 1970), whole
numbers for ``daemon_pid`` and ``evaluations``. The rule ids the adapters print first on
their lines are held to the vocabulary's grammar and may not be, or begin with, a word the
adapters print for themselves (``ok``, ``unknown``). Anything else is unknown.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from doctor.daemon.settings import BOUNDS
from doctor.families import FAMILIES, probe_family
from doctor.i18n import Speaking, t
from doctor.jsonfile import json_path, read_json
from doctor.redact import redact_text
from doctor.rules.ids import RESERVED, builtin_ids, is_rule_id
from doctor.values import is_finite
from doctor.model import ScanReport
from doctor.output import write_atomic
from reports.json_report import MAX_SAVED_BYTES, SAVED_DEPTH, check, to_dict

KIND = "llm-doctor-state"
STATE_VERSION = 1
DEFAULT_PATH = "/var/lib/llm-doctor/state.json"
STALE_INTERVALS = 3  # older than three beats: the daemon is stopped, hung or far behind
FUTURE_SLACK_S = 60.0  # clocks of a host and its container agree within this
INTERVAL_MIN_S, INTERVAL_MAX_S = BOUNDS["interval_s"][:2]  # the daemon's own --interval range
# 2020-01-01T00:00:00Z, before any llm-doctor: a time earlier than this, in the state or on the
# reader's clock, is a clock that was never set, and no age can be judged from it.
EARLIEST = 1577836800.0
PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT on 64-bit: no process id is larger
# A rule id as the vocabulary spells ids; the adapters' lines start with it, or with one of
# RESERVED, so an id that is (or begins with) a reserved word would make a problem read "ok".

if TYPE_CHECKING:  # the adapters read states under a scheduler's clock: no rules loaded
    from doctor.rules.loader import Rule


class StateError(Exception):
    """A state file that cannot be read or is not a state (the message names it); ``read``
    turns it into the State's ``unknown``."""


def family_of(rule: "Rule") -> str:
    """A rule's family: that of the first probe it reads that has one (``gpu.nvml`` → gpu,
    ``amd.gpu`` → gpu: doctor/families.py), else host."""
    for probe in rule.probes:
        family = probe_family(probe)
        if family:
            return family
    return "host"


def to_state(report: ScanReport, rules: "list[Rule]", interval_s: float, taken_at: float,
             evaluations: int) -> dict[str, Any]:
    """The state, its text in English whatever the daemon speaks, each text with its value
    (``<field>_msg``): each adapter says it in its own language (``npd --lang``)."""
    with Speaking("en"):
        saved = to_dict(report)
    return {"kind": KIND, "state_version": STATE_VERSION, "taken_at": round(taken_at, 3),
            "interval_s": interval_s, "daemon_pid": os.getpid(), "evaluations": evaluations,
            "families": {r.id: family_of(r) for r in rules}, "report": saved}


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


def rule_id_ok(rule: object) -> bool:
    """Whether ``rule`` may start an adapter's line: the vocabulary's grammar, and neither a
    reserved word nor one followed by more (``ok-gpu critical`` would read as ``ok``)."""
    return is_rule_id(rule)


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _judged(name: str, data: Any, now: float) -> State:
    def bad(why: str) -> StateError:  # masked: it quotes values of the file
        return StateError(redact_text(t("{file}: {why}; it is written by 'llm-doctor daemon --state-file'",
                            file=name, why=why)))

    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise bad(t("not an llm-doctor state file"))
    version = data.get("state_version")
    if not _whole(version, STATE_VERSION, STATE_VERSION):
        raise bad(t("state_version {version}, this llm-doctor reads {ours}",
                    version=repr(version)[:40], ours=STATE_VERSION))
    taken, interval = data.get("taken_at"), data.get("interval_s")
    if not is_finite(interval) or not INTERVAL_MIN_S <= interval <= INTERVAL_MAX_S:
        raise bad(t("interval_s {value}: not the daemon's interval, {low:g} to {high:g} "
                    "seconds", value=repr(interval)[:40], low=INTERVAL_MIN_S,
                    high=INTERVAL_MAX_S))
    if not is_finite(taken) or taken < EARLIEST:
        raise bad(t("taken_at {value}: not a time in Unix seconds after {earliest}",
                    value=repr(taken)[:40], earliest=_date(EARLIEST)))
    families = data.get("families")
    if not isinstance(families, dict) or not all(
            rule_id_ok(k) and v in FAMILIES for k, v in families.items()):
        raise bad(t("families must map rule ids to one of {families}",
                    families=", ".join(FAMILIES)))
    # its findings may name the rules its daemon loaded: the built-in ones and its own files'
    report = check(data.get("report"), f"{name} (its report)", StateError,
                   builtin_ids() | frozenset(families))
    for key, high in (("daemon_pid", PID_MAX), ("evaluations", 2**53)):
        if not _whole(data.get(key), 1, high):
            raise bad(t("{key} {value}: not a whole number from 1 to {high}", key=key,
                        value=repr(data.get(key))[:40], high=high))
    for i, finding in enumerate(report["findings"]):
        rule = finding["rule"]
        if not rule_id_ok(rule):
            raise bad(t("{path} {rule} is not a rule id (lower-case letters, digits and '-', "
                        "not starting with {reserved})",
                        path=json_path(["report", "findings", i, "rule"]),
                        rule=repr(rule)[:60], reserved=" or ".join(RESERVED)))
    return _aged(name, float(taken), float(interval), now, dict(families), report)


def _date(seconds: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(seconds))


def _aged(name: str, taken: float, interval: float, now: float, families: dict[str, str],
          report: dict[str, Any]) -> State:
    """The state judged by its age on the reader's clock (one that reads before EARLIEST
    finds every state in the future)."""
    age = now - taken
    unknown = ""
    if not math.isfinite(age) or age < -FUTURE_SLACK_S:
        unknown = (f"the state in {name} is dated {-age:.0f}s in the future: "
                   "check this host's clock")
    elif age > STALE_INTERVALS * interval:
        unknown = (f"the state in {name} is {age:.0f}s old, more than {STALE_INTERVALS} "
                   f"intervals of {interval:g}s: is the daemon running?")
    return State(name, unknown, taken, interval, age, families, report)
