"""The JSON report: a documented, versioned schema (docs/report-schema.json).

``schema_version`` changes only when a field is removed or changes meaning; new fields
may appear in any release.

The report is always valid JSON that follows the schema, whatever the records hold: a
recording written by hand can put NaN, infinities, huge integers or odd types into a
probe's data or a rule's evidence. Such a value is replaced (NaN and infinities by null,
anything else JSON cannot hold by text), and ``replaced_values`` says where and why, as a
JSON Pointer (RFC 6901) into the report. ``json.dumps(allow_nan=False)`` then fails loudly
if a value ever slips past. Every string and every key also passes through
``doctor.redact.redact_text``, and in a record, an evidence dict or the host a string held
under a secret's name (``api_key``) is masked whole: probes keep secrets out of their
records, and this is the second lock on the door.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from doctor import __version__
from doctor.model import Finding, ProbeResult, ScanReport
from doctor.redact import MASK, masked_list, redact_text, secret_name

SCHEMA_VERSION = 1
MAX_DEPTH = 64  # deeper than any record; a hand-made recording may nest thousands deep
MAX_SAFE_INTEGER = 2**63  # beyond it most JSON readers (Go, Java, jq) lose digits


class _Sanitizer:
    """Turns a value into one JSON holds exactly, noting each replacement."""

    def __init__(self) -> None:
        self.replaced: list[dict[str, str]] = []

    def note(self, path: tuple[str, ...], reason: str) -> None:
        pointer = "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)
        self.replaced.append({"pointer": pointer, "reason": reason})

    def value(self, value: Any, path: tuple[str, ...]) -> Any:
        if isinstance(value, str):
            return redact_text(value)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            return self._integer(value, path)
        if isinstance(value, float):
            if math.isfinite(value):
                return value
            self.note(path, f"{value} is not a JSON number; shown as null")
            return None
        if len(path) >= MAX_DEPTH:
            self.note(path, f"nested deeper than {MAX_DEPTH} levels; cut")
            return f"(nested deeper than {MAX_DEPTH} levels)"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if isinstance(value, dict):
            return self.mapping(value, path)
        if isinstance(value, (list, tuple)):  # an argv list masked as its text would be
            return masked_list([self.value(v, (*path, str(i))) for i, v in enumerate(value)], value)
        if isinstance(value, (set, frozenset)):
            self.note(path, "a set; shown as a list")
            return [self.value(v, (*path, str(i))) for i, v in enumerate(value)]
        if isinstance(value, (bytes, bytearray)):
            self.note(path, "bytes; shown as text (UTF-8, invalid bytes replaced)")
            return bytes(value).decode("utf-8", "replace")
        self.note(path, f"a {type(value).__name__}; shown as text")
        return self.text(value)

    def _integer(self, value: int, path: tuple[str, ...]) -> Any:
        if -MAX_SAFE_INTEGER < value < MAX_SAFE_INTEGER:
            return int(value)  # an IntEnum as its number
        self.note(path, f"an integer of {value.bit_length()} bits; shown as text")
        return self.text(value)

    def mapping(self, value: dict, path: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        by_key = _by_key(path)
        for key, item in value.items():
            name = redact_text(key if isinstance(key, str) else self.text(key))
            if name in out:  # {1: ..., "1": ...}: JSON objects hold one of each name
                self.note((*path, name), "a second key of this name; dropped")
                continue
            if by_key and isinstance(item, str) and item and isinstance(key, str) and secret_name(key):
                out[name] = MASK
                continue
            out[name] = self.value(item, (*path, name))
        return out

    @staticmethod
    def text(value: Any) -> str:
        try:
            return str(value)
        except ValueError:  # an integer past Python's 4,300-digit limit for str()
            return hex(value) if isinstance(value, int) else f"(unprintable {type(value).__name__})"


def _by_key(path: tuple[str, ...]) -> bool:
    """Whether the mapping at ``path`` is the host, a record or an evidence dict: there a
    string under a secret's name is masked whole (the report's own fields, such as a
    finding's ``key``, are not)."""
    if path[:1] == ("host",):
        return True
    return len(path) >= 3 and (path[0], path[2]) in (("probes", "data"), ("findings", "evidence"))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else _Sanitizer.text(value)


def _probe(p: ProbeResult) -> dict[str, Any]:
    record = p.record
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        record = dataclasses.asdict(record)
    elif record is not None and not isinstance(record, dict):
        record = {"value": record}  # the schema holds an object or null
    return {
        "name": _str(p.name),
        "status": p.status,
        "reason": None if p.reason is None else _str(p.reason),
        "duration_s": round(p.duration_s, 3),
        "data": record,
    }


def _finding(f: Finding) -> dict[str, Any]:
    symptoms = f.symptoms if isinstance(f.symptoms, (list, tuple)) else [f.symptoms]
    return {
        "rule": _str(f.rule),
        "cause": _str(f.cause),
        "symptoms": [_str(s) for s in symptoms],
        "severity": f.severity.label,
        "title": _str(f.title),
        "evidence": f.evidence if isinstance(f.evidence, dict) else {"value": f.evidence},
        "remediation": _str(f.remediation),
        "playbook": _str(f.playbook),
        "key": _str(f.key),
    }


def to_dict(report: ScanReport) -> dict[str, Any]:
    """The report as JSON-ready data: every value one that JSON holds exactly."""
    worst = report.worst
    host = {_str(k): _str(v) for k, v in report.host.items()}
    host.setdefault("hostname", "?")
    raw = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "llm-doctor", "version": __version__},
        "host": host,
        "level": report.level.name.lower(),
        "started_at": report.started_at,
        "duration_s": report.duration_s,
        "verdict": worst.label if worst is not None else "ok",
        "exit_code": report.exit_code(),
        "probes": [_probe(p) for p in report.probes],
        "findings": [_finding(f) for f in report.findings],
        "rule_errors": [_str(e) for e in report.rule_errors],
    }
    sanitizer = _Sanitizer()
    data = sanitizer.mapping(raw, ())
    data["replaced_values"] = sanitizer.replaced
    return data


def render(report: ScanReport) -> str:
    return json.dumps(to_dict(report), indent=2, allow_nan=False) + "\n"


def sanitized(data: dict[str, Any]) -> dict[str, Any]:
    """A report's data (``to_dict``, or a checked saved report) as every renderer may show
    it: the same masking and replacements ``to_dict`` makes."""
    return _Sanitizer().mapping(data, ())
