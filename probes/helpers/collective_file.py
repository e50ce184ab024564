"""The last result of ``llm-doctor collective`` on this host, kept for the daemon and scans.

An all-reduce across hosts needs every host of the group started at once; a scan or a daemon
beat on one host cannot start its peers. So the command, run on every host, keeps its last
result in ``collective.json`` beside the daemon's state file (``--state-file``, the config's
``[daemon] state_file``, else /var/lib/llm-doctor/state.json: the folder the daemon writes
its state and baseline to), written atomically:

    {"kind": "llm-doctor-collective", "version": 1,
     "taken_at": 1764612345.2,              # Unix seconds: when the run ended
     "host": {"hostname": "gpu07", "machine_id": "…"},   # who ran it
     "result": { ... }}                     # the kernel's JSON, as probes/net/xnode.py reads it

and the probe ``net.collective`` reads it back through the host's ``read_text`` (a capture
records it, a replay answers the same), so that its rules (checks/net_collective.toml) fire in
a scan and in the daemon, whose state carries them to ``npd --family net`` and
``slurm-healthcheck``. The clock it is aged against is read through ``host.measure``, so a
replay judges the age the capture saw.

The file is hostile input (it sits in a folder an operator may open to a group): a symbolic
link is not followed, a FIFO or device is never opened (the host's ``read_text``), more than
``MAX_BYTES`` is refused, the JSON is read by doctor/jsonfile.py's guarded parser (no NaN, no
huge integers, bounded nesting), and every field the record takes is typed by xnode.record.
Each fault is one line naming the file and what to do, as the probe's skip reason.

A result older than ``MAX_AGE_S`` (24 h) is not judged: it measured the path as it was then
(a port may have flapped, a cable or driver changed since), and a Slurm drain resting on it
would outlive the fault. A daily run (a cron job or a nightly ``srun`` preflight) keeps it
fresh; a drain that rests on a result lifts within a day at worst if nobody runs it again.
A result written on another machine (the file copied, a shared folder) is not judged either.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from doctor.i18n import t
from doctor.jsonfile import parse
from doctor.seam.host import Host, HostReadError, MeasurementError, Reason
from doctor.seam.identity import identity
from doctor.values import finite_float

NAME = "collective.json"
KIND = "llm-doctor-collective"
VERSION = 1
# beside the daemon's default state file (doctor/daemon/state.py DEFAULT_PATH; a probe may not
# import the daemon: tests/test_collective_file.py holds the two together)
DEFAULT_FILE = "/var/lib/llm-doctor/" + NAME
MAX_AGE_S = 24 * 3600.0
FUTURE_SLACK_S = 60.0  # as the daemon's state: clocks of a host and its container agree within this
EARLIEST = 1577836800.0  # 2020-01-01: before any llm-doctor (doctor/daemon/state.py EARLIEST)
MAX_BYTES = 256 * 1024  # a run with 512 pairs writes ~40 KB
MAX_DEPTH = 8  # result.path.interface is the deepest: 4 levels
CLOCK = "net.collective clock"  # the measurement a capture records


class SavedError(Exception):
    """The saved result cannot be judged; its message is the probe's skip reason."""


def beside(state_file: str | Path) -> str:
    """``collective.json`` beside the daemon's state file ("" when it keeps none); a state
    file itself named collective.json gets ``collective.collective.json``."""
    if not str(state_file):
        return ""
    where = Path(state_file)
    return str(where.with_name(f"collective.{NAME}" if where.name == NAME else NAME))


def document(result: dict[str, Any], taken_at: float, host: dict[str, str]) -> dict[str, Any]:
    """The file's content: the kernel's JSON, when, and who (hostname and machine id)."""
    who = {k: host[k] for k in ("hostname", "machine_id") if isinstance(host.get(k), str)}
    return {"kind": KIND, "version": VERSION, "taken_at": round(taken_at, 3), "host": who,
            "result": result}


def text_of(result: dict[str, Any], taken_at: float, host: dict[str, str]) -> str:
    return json.dumps(document(result, taken_at, host), indent=1, allow_nan=False) + "\n"


def _again() -> str:
    return t("run `llm-doctor collective --master HOST:PORT --rank N --world W` on every "
             "host of the group (docs/collective.md)")


def read(host: Host, path: str) -> tuple[dict[str, Any], float]:
    """(the kernel's JSON, its age in seconds) from ``path`` on ``host``; SavedError with
    the line to show when it is absent, hostile, stale, from the future or another host."""
    if not path:
        raise SavedError(t("the daemon keeps no state file (--state-file \"\"), so no result "
                           "of `llm-doctor collective` is kept beside it"))
    folder, _, name = path.rpartition("/")
    try:  # the folder's links (not read_link: on a regular file that fails, and a capture
        # would record the failure under the path, where the file's own read looks too)
        target = host.list_links(folder or "/").get(name)
    except HostReadError:
        target = None  # no folder, or none readable: the file's read says which
    if target is not None:
        raise SavedError(t("{path} is a symbolic link (to {target}): not followed; "
                           "`llm-doctor collective` writes a regular file there, so remove "
                           "the link and {again}", path=path, target=target[:120],
                           again=_again()))
    try:
        text = host.read_text(path)
    except HostReadError as exc:
        if exc.reason is Reason.NOT_FOUND:
            raise SavedError(t("no result of the all-reduce across hosts at {path}: {again}",
                               path=path, again=_again())) from None
        raise SavedError(t("{path}: cannot read the saved all-reduce result: {why}",
                           path=path, why=exc.text()[:200])) from None
    if len(text) > MAX_BYTES:
        raise SavedError(t("{path}: {size:,} bytes, more than the {limit:,} a result of "
                           "`llm-doctor collective` takes: not read; {again}", path=path,
                           size=len(text), limit=MAX_BYTES, again=_again()))
    doc = parse(text, path, SavedError, MAX_DEPTH)
    result, taken = _checked(doc, path)
    _same_machine(host, doc, path)
    return result, _age(host, taken, path)


def _checked(doc: Any, path: str) -> tuple[dict[str, Any], float]:
    def bad(why: str) -> SavedError:
        return SavedError(t("{path}: {why}; it is written by `llm-doctor collective`",
                            path=path, why=why))

    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise bad(t("not a saved result of `llm-doctor collective`"))
    version = doc.get("version")
    if version != VERSION or isinstance(version, bool):
        raise bad(t("version {version}, this llm-doctor reads {ours}",
                    version=repr(version)[:40], ours=VERSION))
    taken = finite_float(doc.get("taken_at"))
    if taken is None or taken < EARLIEST:
        raise bad(t("taken_at {value}: not a time in Unix seconds after 2020",
                    value=repr(doc.get("taken_at"))[:40]))
    result = doc.get("result")
    if not isinstance(result, dict):
        raise bad(t("result must be an object (the all-reduce's JSON)"))
    return result, taken


def _same_machine(host: Host, doc: dict[str, Any], path: str) -> None:
    """A result written on another machine (a copied file, a shared folder) says nothing of
    this one's path. Compared on the machine id where both have one."""
    who = doc.get("host")
    theirs = who.get("machine_id") if isinstance(who, dict) else None
    ours = identity(host.read_text).get("machine_id")
    if isinstance(theirs, str) and ours and theirs.lower() != ours:
        name = who.get("hostname") if isinstance(who, dict) else None
        raise SavedError(t("{path} was written on another machine ({name}, machine id "
                           "{theirs}), not this one ({ours}): not judged here; {again}",
                           path=path, name=str(name or "?")[:64], theirs=theirs[:40],
                           ours=ours, again=_again()))


def _clock(host: Host) -> float | None:
    try:
        value = host.measure(CLOCK, lambda: {"unix_s": round(time.time(), 3)})
    except MeasurementError:
        return None
    now = finite_float(value.get("unix_s")) if isinstance(value, dict) else None
    return now if now is not None and now >= EARLIEST else None


def _age(host: Host, taken: float, path: str) -> float:
    now = _clock(host)
    if now is None:
        raise SavedError(t("{path}: no clock to age the saved result against (a recording "
                           "made without the measurement '{name}')", path=path, name=CLOCK))
    age = now - taken
    if age < -FUTURE_SLACK_S:
        raise SavedError(t("{path} is dated {seconds:.0f} s in the future: check this host's "
                           "clock, then {again}", path=path, seconds=-age, again=_again()))
    if age > MAX_AGE_S:
        raise SavedError(t("the saved result in {path} is {hours:.1f} h old, more than "
                           "{bound:g} h: it says how the path was then, not now; {again}",
                           path=path, hours=age / 3600, bound=MAX_AGE_S / 3600,
                           again=_again()))
    return max(0.0, age)

