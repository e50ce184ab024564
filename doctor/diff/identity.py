"""Is it one host, and are its two states comparable?

Identity comes from what names the machine rather than what it is called: the machine id
(/etc/machine-id) and the DMI product UUID, which the scan's host holds when they were read
(doctor/seam/identity.py; a capture made before they were read lacks them, and the DMI UUID
is root only), and the GPUs' UUIDs (gpu.inventory, from nvmlDeviceGetUUID). A hostname alone
proves nothing (a reinstalled host keeps it, a fleet's images share it), but hostnames that
differ with no stronger identifier agreeing mean two hosts. Where no identifier is recorded
on both sides, one hostname makes the two sides "unproven" and they are compared, saying so.

Comparability: the same level (a quick scan measures nothing a standard one does), the same
model served, and the engines idle in both or under load in both (a latency percentile of an
idle engine says nothing against one under load).
"""

from __future__ import annotations


from doctor.saved_scan import SavedScan
from doctor.diff.facts import Records
from doctor.i18n import lazy, t, translated
from doctor.redact import redact_text

SAME_HOST, DIFFERENT, UNPROVEN = "same", "different", "unproven"
STRONG = (("machine_id", lazy("machine id")), ("product_uuid", lazy("DMI product UUID")))


def gpu_uuids(records: Records) -> set[str]:
    return set(records.gpu_names.values())


def identity(before: SavedScan, after: SavedScan, rb: Records, ra: Records
             ) -> tuple[str, tuple[str, ...]]:
    """(same | different | unproven, the evidence, one line each)."""
    hb, ha = before.host, after.host
    evidence: list[str] = []
    agree = differ = False
    for key, english in STRONG:
        name = translated(english)
        b, a = hb.get(key, ""), ha.get(key, "")
        if b and a:
            if b == a:
                agree = True
                evidence.append(t("the {name} is the same", name=name))
            else:
                differ = True
                evidence.append(t("the {name} differs", name=name))
        elif b or a:
            unread_before = not b
            why = (hb if unread_before else ha).get(f"{key}_reason")
            said = (t("the {name} is not read before", name=name) if unread_before
                    else t("the {name} is not read after", name=name))
            evidence.append(said + (t(" ({why})", why=redact_text(str(why))[:120]) if why else ""))
    ub, ua = gpu_uuids(rb), gpu_uuids(ra)
    gpus_shared = bool(ub & ua)
    if ub and ua:
        if gpus_shared:
            evidence.append(t("{shared} of {all} GPU UUIDs are on both sides", shared=len(ub & ua), all=len(ub | ua)))
        else:
            differ = True
            evidence.append(t("no GPU UUID is on both sides"))
    names = (before.hostname, after.hostname)
    same_name = names[0] == names[1]
    evidence.append(t("hostname {name}", name=names[0]) if same_name
                    else t("hostnames {before} and {after}", before=names[0], after=names[1]))
    if differ:
        return DIFFERENT, tuple(evidence)
    if agree:
        return SAME_HOST, tuple(evidence)
    if not same_name:
        if gpus_shared:
            evidence.append(t("the GPUs agree but the hostnames do not: GPUs moved, or a renamed host"))
        return DIFFERENT, tuple(evidence)
    if gpus_shared:
        return SAME_HOST, tuple(evidence)
    evidence.append(t("no machine id, DMI UUID or GPU UUID is recorded on both sides"))
    return UNPROVEN, tuple(evidence)


def engine_state(records: Records) -> str:
    """idle | under load | no engine | unknown, from engine.load and engine.metrics."""
    if records.status.get("engine.discovery") != "ok":
        return "unknown"
    if not records.rows("engine.discovery", "engines"):
        return "no engine"
    running: list[float] = []
    for row in records.rows("engine.load", "engines"):
        if isinstance(row.get("running"), (int, float)):
            running.append(row["running"])
    for row in records.rows("engine.metrics", "engines"):
        if isinstance(row.get("requests_running"), (int, float)):
            running.append(row["requests_running"])
    if not running:
        return "unknown"
    return "under load" if any(n > 0 for n in running) else "idle"


ENGINE_STATES = {"idle": lazy("idle"), "under load": lazy("under load"),
                 "no engine": lazy("no engine"), "unknown": lazy("unknown")}


def engine_state_text(state: str) -> str:
    """An engine state (data: the JSON's ``engine_state``) as a person reads it."""
    return translated(ENGINE_STATES.get(state, state))


def models(records: Records) -> set[str]:
    return {str(e.get("model")) for e in records.rows("engine.discovery", "engines") if e.get("model")}


def comparability(before: SavedScan, after: SavedScan, rb: Records, ra: Records
                  ) -> tuple[str, ...]:
    """Why the two states cannot be judged against each other; empty when they can."""
    why = []
    if before.level != after.level:
        why.append(t("the levels differ ({before} and {after}): scan both sides at one level (--level)",
                     before=before.level, after=after.level))
    mb, ma = models(rb), models(ra)
    if mb and ma and mb != ma:
        why.append(redact_text(t("the models differ ({before} and {after})",
                                 before=", ".join(sorted(mb)), after=", ".join(sorted(ma)))))
    sb, sa = engine_state(rb), engine_state(ra)
    if {sb, sa} == {"idle", "under load"}:
        why.append(t("the engine is {before} before and {after} after: compare idle with idle, "
                     "or load with load", before=engine_state_text(sb), after=engine_state_text(sa)))
    return tuple(why)
