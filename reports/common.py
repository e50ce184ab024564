"""What every renderer shares: each probe's one-line summary, host text made safe to show,
evidence values as people read them, and the probe table's rows.

A report shows text that came from the host (hostname, command lines, comm, paths, evidence,
error messages). None of it may steer the reader's terminal, and a record of an unexpected
shape (a hand-written recording) must not stop the report: the line says it could not be
read instead.
"""

from __future__ import annotations

import math
from typing import Any

from doctor import display
from doctor.i18n import current, t, translated
from doctor.i18n.text import render
from doctor.model import SEVERITY_WORDS, ProbeResult
from doctor.redact import redact_text, safe_display
from doctor.vocabulary import SYMPTOM_WORDS, symptom_words


# A field shown to people is cut at 4,096 characters (escapes counted): 16 times DNS's
# longest name (253), more than any title or command line the committed hosts hold (191
# bytes), and short enough that laying it out stays in milliseconds: rich's wrapping is worse
# than linear (a 5,000,000-character host name took 25 s in the terminal report and 62 s in
# diff). A text up to _ROOM longer is shown whole, so that a text cut once is not cut again
# (show(show(x)) == show(x)). The JSON report and diff keep every field whole.
MAX_SHOWN = 4096
_ROOM = 256  # more than the cut mark in any language


def cut(text: str) -> str:
    """``text`` at most about MAX_SHOWN characters: past them, its first MAX_SHOWN and a mark
    that says how many more there are and where they are."""
    if len(text) <= MAX_SHOWN + _ROOM:
        return text
    return text[:MAX_SHOWN] + t("… ({more:,} more characters: the JSON output holds them all)",
                                more=len(text) - MAX_SHOWN)


def show(value: Any) -> str:
    """``value`` as text a terminal or Markdown viewer prints rather than obeys, with any
    secret that slipped into a record masked (the probes mask first; this is the backstop),
    and cut at MAX_SHOWN characters. Masked whole before the cut, so that a cut never
    splits a secret from the name that masks it."""
    try:
        text = value if isinstance(value, str) else str(value)
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits
        text = t("(unprintable {type}: {error})", type=type(value).__name__, error=exc)
    return cut(safe_display(redact_text(text)))


def severity_word(label: object) -> str:
    """A severity (``critical``) as the report's language says it (严重); anything else as
    it is, made safe to show."""
    if isinstance(label, str) and label in SEVERITY_WORDS:
        return translated(SEVERITY_WORDS[label])
    return show(label)


def status_word(status: object) -> str:
    """A probe's status (``ok``, ``skipped``, ``error``, ``timeout``) in the report's language."""
    words = {"ok": t("ok"), "skipped": t("skipped"), "error": t("error"), "timeout": t("timeout")}
    return words.get(status, show(status)) if isinstance(status, str) else show(status)


def symptom_text(symptom: object) -> str:
    """A symptom row id, followed in a translated report by the row's own words
    (``slow-first-token 首个token延迟过高``); the English report keeps the id alone."""
    shown = show(symptom)
    if current() == "en" or not isinstance(symptom, str) or symptom not in SYMPTOM_WORDS:
        return shown
    return f"{shown} {symptom_words(symptom)}"


def probe_summary(result: ProbeResult) -> str:
    """The probe's one line for people (made by the runner from the probe's own summary),
    or why there is none, in the current language, made safe to show."""
    return show(render(result.summary if result.status == "ok" else result.reason))


def evidence_text(value: Any, reason: object = None) -> str:
    """An evidence value for people, made safe to show: None says why (the finding's
    ``missing`` reason, else ``—``), numbers never print ``-0.00`` (doctor/display.py)."""
    return show(display.text(value, reason))


def probe_rows(rows: list[dict[str, Any]], verbose: bool = False) -> list[dict[str, Any]]:
    """The probe table's rows (``name``, ``status``, ``duration_s``, ``summary``): probes of
    one family skipped for one reason collapse into one row, ``gpu.* (8 probes)``, where the
    first of them stood, so that a host without the driver or an engine reads as one line
    each; ``verbose`` keeps every row. A row's ``count`` says how many probes it stands for."""
    if verbose:
        return [{**row, "count": 1} for row in rows]
    families: dict[str, int] = {}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        family = str(row["name"]).partition(".")[0]
        families[family] = families.get(family, 0) + 1
        if row["status"] == "skipped":
            groups.setdefault((family, str(row["summary"])), []).append(row)
    out: list[dict[str, Any]] = []
    for row in rows:
        group = groups.get((str(row["name"]).partition(".")[0], str(row["summary"])), [row])
        if row["status"] != "skipped" or len(group) == 1:
            out.append({**row, "count": 1})
        elif row is group[0]:
            out.append({**row, "name": _group_name(group, families), "count": len(group),
                        "duration_s": sum(float(r["duration_s"]) for r in group)})
    return out


def _group_name(group: list[dict[str, Any]], families: dict[str, int]) -> str:
    family = str(group[0]["name"]).partition(".")[0]
    if len(group) == families[family]:
        return t("{family}.* ({count} probes)", family=family, count=len(group))
    members = ",".join(str(r["name"]).partition(".")[2] for r in group)
    return t("{family}.{{{members}}} ({count} probes)", family=family, members=members,
             count=len(group))


def json_clean(value: Any) -> Any:
    """``value`` made fit for a JSON report of a command (diff, why): every string, key
    included, masked for secrets (``redact_text``: the second lock), every float JSON cannot
    hold (NaN, infinities) null; lists and tuples become lists."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {redact_text(str(k)): json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_clean(v) for v in value]
    return value
