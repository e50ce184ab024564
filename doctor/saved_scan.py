"""A saved scan, typed: what reports/json_report.py ``read`` gives its consumers.

The reader (``check``) holds a saved scan to docs/report-schema.json, its bounds and its
ids; ``typed`` then turns the checked data into these frozen records, so that a consumer
(``diff``, the HTML report) reads ``scan.findings[0].severity`` rather than guarding
``data.get("findings", [])`` again. A probe's record (``SavedProbe.data``) stays the JSON
object the probe wrote: its shape is the probe's, not the report's.

Text is said in the reader's language (``title()``, ``summary()``, ``reason()``): from
the value the scan carries (``<field>_msg``, doctor/i18n/text.py), else as it was saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from doctor.families import probe_family
from doctor.i18n.text import saved_text
from doctor.model import Severity, key_from_evidence

_SEVERITY = {s.label: s for s in Severity}


@dataclass(frozen=True, slots=True)
class SavedProbe:
    name: str
    status: str  # ok | skipped | error | timeout
    duration_s: float
    data: Mapping[str, Any] | None  # the probe's record as JSON, when ok
    saved_in: str  # the language its text was saved in
    texts: Mapping[str, Any]  # reason, summary and their values as saved

    @property
    def family(self) -> str:
        """gpu, engine, host or net (doctor/families.py: amd.gpu is the GPU family's); a
        name of no family, its head."""
        return probe_family(self.name) or self.name.partition(".")[0]

    def reason(self, lang: str | None = None) -> str:
        return saved_text(self.texts, "reason", self.saved_in, lang)

    def summary(self, lang: str | None = None) -> str:
        return saved_text(self.texts, "summary", self.saved_in, lang)

    def said(self, lang: str | None = None) -> str:
        """Its one line for people: the summary when it ran, else why not."""
        return self.summary(lang) if self.status == "ok" else self.reason(lang)


@dataclass(frozen=True, slots=True)
class SavedFinding:
    rule: str
    cause: str
    symptoms: tuple[str, ...]
    severity: Severity
    evidence: Mapping[str, Any]
    playbook: str
    key: str
    missing: Mapping[str, str]
    saved_in: str
    texts: Mapping[str, Any]  # title, remediation and their values as saved

    @property
    def identity(self) -> str:
        return self.key or key_from_evidence(dict(self.evidence))

    def title(self, lang: str | None = None) -> str:
        return saved_text(self.texts, "title", self.saved_in, lang)

    def remediation(self, lang: str | None = None) -> str:
        return saved_text(self.texts, "remediation", self.saved_in, lang)


@dataclass(frozen=True, slots=True)
class SavedScan:
    host: Mapping[str, str]
    level: str
    lang: str  # the language its text fields were saved in
    started_at: str
    duration_s: float
    verdict: str
    exit_code: int
    probes: tuple[SavedProbe, ...]
    findings: tuple[SavedFinding, ...]
    rule_errors: tuple[str, ...]
    translatable: bool  # its text carries values: it reads in any language
    data: Mapping[str, Any]  # the checked data, for a renderer that shows every field

    @property
    def hostname(self) -> str:
        return self.host.get("hostname", "?")

    @property
    def taken_at(self) -> str:
        """When the state was taken: a recorded host's capture time (its replay, or a saved
        scan of one, started later: the state is the capture's), else the scan's start."""
        captured = self.host.get("captured_at", "")
        if self.host.get("kind") == "recorded" and captured not in ("", "?"):
            return captured
        return self.started_at

    @property
    def symptoms(self) -> tuple[str, ...]:
        return tuple(sorted({s for f in self.findings for s in f.symptoms}))

    def probe(self, name: str) -> SavedProbe | None:
        return next((p for p in self.probes if p.name == name), None)

    def records(self) -> dict[str, Mapping[str, Any]]:
        """Each probe that ran: its record."""
        return {p.name: p.data for p in self.probes if p.status == "ok" and p.data is not None}


_PROBE_TEXTS = ("reason", "reason_msg", "summary", "summary_msg")
_FINDING_TEXTS = ("title", "title_msg", "remediation", "remediation_msg")


MSG_VERSION = 1  # the shape of the ``<field>_msg`` values (doctor/i18n/text.py to_json)


def typed(data: Mapping[str, Any]) -> SavedScan:
    """The scan in ``data``: a report reports/json_report.py wrote (``to_dict``) or checked
    (``check``); nothing here guards a shape the check has not held."""
    lang = str(data.get("lang") or "en")
    probes = tuple(SavedProbe(
        p["name"], p["status"], float(p["duration_s"]),
        p["data"] if p["status"] == "ok" and isinstance(p["data"], dict) else None, lang,
        {k: p[k] for k in _PROBE_TEXTS if p.get(k) is not None}) for p in data["probes"])
    findings = tuple(SavedFinding(
        f["rule"], f["cause"], tuple(f["symptoms"]), _SEVERITY[f["severity"]], f["evidence"],
        f["playbook"], f.get("key", ""), f.get("missing", {}), lang,
        {k: f[k] for k in _FINDING_TEXTS if f.get(k) is not None}) for f in data["findings"])
    host = {k: v for k, v in data["host"].items() if isinstance(v, str)}
    return SavedScan(host, data["level"], lang, data["started_at"],
                     float(data["duration_s"]), data["verdict"], data["exit_code"], probes,
                     findings, tuple(data["rule_errors"]), translatable(data), data)


def translatable(data: Mapping[str, Any]) -> bool:
    """Whether a scan's data carries its text as values (any language can say it)."""
    version = data.get("msg_version")
    return type(version) is int and version == MSG_VERSION
