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

A saved report is someone else's input when it comes back (``llm-doctor report FILE``):
``load`` reads it through ``doctor.jsonfile`` (guarded read, strict numbers, bounded
nesting) and ``check`` holds it to docs/report-schema.json, field by field, with a message
that names the file and the JSON path. The check is written here rather than run by a
JSON Schema library: that library is a test dependency only (tests/test_report_input.py
checks the two agree), and the messages say what to do.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

from doctor import __version__
from doctor.i18n import LANGS, current, t
from doctor.i18n import text as msgs
from doctor.jsonfile import json_path, read_json
from doctor.model import Finding, ProbeResult, ScanReport
from doctor.saved_scan import MSG_VERSION, SavedScan, translatable, typed
from doctor.redact import MASK, masked_list, redact_text, secret_name
from doctor.rules.ids import builtin_ids, is_rule_id
from doctor.vocabulary import CAUSES

SCHEMA_VERSION = 1
TEXT_FIELDS = {"probes": ("reason", "summary"), "findings": ("title", "remediation")}
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
            return redact_text(whole_characters(value))
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            return self._integer(value, path)
        if isinstance(value, float):
            if math.isfinite(value):
                return value
            self.note(path, t("{value} is not a JSON number; shown as null", value=value))
            return None
        if len(path) >= MAX_DEPTH:
            self.note(path, t("nested deeper than {depth} levels; cut", depth=MAX_DEPTH))
            return f"(nested deeper than {MAX_DEPTH} levels)"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if isinstance(value, dict):
            return self.mapping(value, path)
        if isinstance(value, (list, tuple)):  # an argv list masked as its text would be
            return masked_list([self.value(v, (*path, str(i))) for i, v in enumerate(value)], value)
        if isinstance(value, (set, frozenset)):
            self.note(path, t("a set; shown as a list"))
            return [self.value(v, (*path, str(i))) for i, v in enumerate(value)]
        if isinstance(value, (bytes, bytearray)):
            self.note(path, t("bytes; shown as text (UTF-8, invalid bytes replaced)"))
            return bytes(value).decode("utf-8", "replace")
        self.note(path, t("a {type}; shown as text", type=type(value).__name__))
        return self.text(value)

    def _integer(self, value: int, path: tuple[str, ...]) -> Any:
        if -MAX_SAFE_INTEGER < value < MAX_SAFE_INTEGER:
            return int(value)  # an IntEnum as its number
        self.note(path, t("an integer of {bits} bits; shown as text", bits=value.bit_length()))
        return self.text(value)

    def mapping(self, value: dict, path: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        by_key = _by_key(path)
        for key, item in value.items():
            name = redact_text(whole_characters(key if isinstance(key, str) else self.text(key)))
            if name in out:  # {1: ..., "1": ...}: JSON objects hold one of each name
                self.note((*path, name), t("a second key of this name; dropped"))
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


_SURROGATE = re.compile("[\ud800-\udfff]")


def whole_characters(text: str) -> str:
    """``text`` with each lone surrogate (JSON's ``"\\ud800"`` reads as one; no UTF-8 holds
    it, so every writer after would fail) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def _by_key(path: tuple[str, ...]) -> bool:
    """Whether the mapping at ``path`` is the host, a record or an evidence dict: there a
    string under a secret's name is masked whole (the report's own fields, such as a
    finding's ``key``, are not)."""
    if path[:1] == ("host",):
        return True
    return len(path) >= 3 and (path[0], path[2]) in (("probes", "data"), ("findings", "evidence"))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else _Sanitizer.text(value)


def _said(out: dict[str, Any], key: str, value: Any) -> None:
    """``key``: the value in the report's language; ``key_msg``: the value itself (a
    message id and its parameters), for a reader to say it in another (doctor/i18n/text.py)."""
    out[key] = msgs.render(value) if isinstance(value, (str, msgs.Msg, msgs.Join, msgs.Localized)) \
        else _str(value)
    saved = msgs.to_json(value)
    if saved is not None:
        out[f"{key}_msg"] = saved


def _probe(p: ProbeResult) -> dict[str, Any]:
    record = p.record
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        record = dataclasses.asdict(record)
    elif record is not None and not isinstance(record, dict):
        record = {"value": record}  # the schema holds an object or null
    out: dict[str, Any] = {"name": _str(p.name), "status": p.status, "reason": None}
    if p.reason is not None:
        _said(out, "reason", p.reason)
    if p.status == "ok":
        _said(out, "summary", p.summary)
    out.update({"duration_s": round(p.duration_s, 3), "data": record})
    return out


def finding_dict(f: Finding) -> dict[str, Any]:
    """One finding as the saved scan holds it (``findings[i]``): its text fields with their
    values (``<field>_msg``) so a reader re-says them in either language; every value one
    JSON holds (the caller's sanitizer replaces the rest)."""
    symptoms = f.symptoms if isinstance(f.symptoms, (list, tuple)) else [f.symptoms]
    out: dict[str, Any] = {
        "rule": _str(f.rule),
        "cause": _str(f.cause),
        "symptoms": [_str(s) for s in symptoms],
        "severity": f.severity.label,
    }
    _said(out, "title", f.title)
    out["evidence"] = f.evidence if isinstance(f.evidence, dict) else {"value": f.evidence}
    _said(out, "remediation", f.remediation)
    out.update({"playbook": _str(f.playbook), "key": _str(f.key),
                "missing": {_str(k): _str(v) for k, v in (f.missing or {}).items()}})
    return out


def to_dict(report: ScanReport) -> dict[str, Any]:
    """The report as JSON-ready data: every value one that JSON holds exactly."""
    worst = report.worst
    host = {_str(k): _str(v) for k, v in report.host.items()}
    host.setdefault("hostname", "?")
    raw = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "llm-doctor", "version": __version__},
        "lang": current(),  # the language of the text fields; every other field is the same
        # the text fields carry their values (``<field>_msg``): a reader says them in any
        # language; a scan without it was saved before, and reads as it was saved
        "msg_version": MSG_VERSION,
        "host": host,
        "level": report.level.name.lower(),
        "started_at": report.started_at,
        "duration_s": report.duration_s,
        "verdict": worst.label if worst is not None else "ok",
        "exit_code": report.exit_code(),
        "probes": [_probe(p) for p in report.probes],
        "findings": [finding_dict(f) for f in report.findings],
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


# --------------------------------------------------------------------------- a saved report

MAX_SAVED_BYTES = 32 << 20  # 300 times the largest committed host's report (105 KB)
# Bounds on counts, far above any scan (the registry has ~40 probes, the rules ~70, a rule
# with `each` gives a finding per GPU, CPU socket or engine: the largest committed host's
# scan has 16 findings) and far below what makes a plan, a diff or a page cost minutes
# (a 13 MB scan of 20,000 findings took 43 s and 3.4 GB to plan)
MAX_FINDINGS = 2000
MAX_PROBES = 500
MAX_EVIDENCE = 256  # fields of one finding's evidence, or of its `missing`
MAX_SYMPTOMS = 32
MAX_RULE_ERRORS = 1000
SAVED_DEPTH = MAX_DEPTH + 2  # to_dict cuts deeper values; the top level and a probe count
def _hint() -> str:
    return t("write the file with 'llm-doctor scan --format json -o FILE'")
# docs/report-schema.json, as the renderers read it
_TOP = ("schema_version", "tool", "host", "level", "started_at", "duration_s", "verdict",
        "exit_code", "probes", "findings", "rule_errors")
_PROBE = ("name", "status", "reason", "duration_s", "data")
_FINDING = ("rule", "cause", "symptoms", "severity", "title", "evidence", "remediation", "playbook")
_PROBE_NAME = re.compile(r"^[a-z]+\.[a-z_.]+$")
LEVELS = ("quick", "standard", "full")
VERDICTS = ("ok", "info", "warning", "critical")
SEVERITIES = ("info", "warning", "critical")
STATUSES = ("ok", "skipped", "error", "timeout")
HOST_KINDS = ("live", "recorded")


class _Check:
    def __init__(self, where: str, error: type[Exception]) -> None:
        self.where, self.error = where, error

    def fail(self, path: list[str | int], expected: str, value: Any) -> None:
        raise self.error(t("{where}: {path}: expected {expected}, got {value}; {hint}",
                           where=self.where, path=json_path(path), expected=expected,
                           value=_shown(value), hint=_hint()))

    def object(self, value: Any, path: list[str | int], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            self.fail(path, t("an object"), value)
        for key in required:
            if key not in value:
                raise self.error(t("{where}: {path}: the field '{key}' is missing; {hint}",
                                   where=self.where, path=json_path(path), key=key, hint=_hint()))
        return value

    def array(self, value: Any, path: list[str | int]) -> list:
        if not isinstance(value, list):
            self.fail(path, t("an array"), value)
        return value

    def string(self, value: Any, path: list[str | int], nullable: bool = False) -> None:
        if not (isinstance(value, str) or (nullable and value is None)):
            self.fail(path, t("a string or null") if nullable else t("a string"), value)

    def number(self, value: Any, path: list[str | int]) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            self.fail(path, t("a number of seconds, 0 or more"), value)

    def most(self, value: Any, path: list[str | int], limit: int) -> None:
        if isinstance(value, (list, dict)) and len(value) > limit:
            raise self.error(t("{where}: {path}: {count:,} entries; a scan holds at most {limit:,}: "
                               "this is not a scan llm-doctor wrote; {hint}", where=self.where,
                               path=json_path(path), count=len(value), limit=limit, hint=_hint()))

    def ids(self, finding: dict, at: list[str | int], rule_ids: frozenset[str]) -> None:
        """A finding's rule and cause: the grammar first (an id is quoted into plans, labels
        and node conditions), then known."""
        rule, cause = finding["rule"], finding["cause"]
        for key, value in (("rule", rule), ("cause", cause)):
            if not is_rule_id(value):
                raise self.error(t("{where}: {path}: {value} is not a {key} id (lowercase letters, "
                                   "digits and hyphens); {hint}", where=self.where,
                                   path=json_path([*at, key]), value=_shown(value), key=key,
                                   hint=_hint()))
        if cause not in CAUSES:
            raise self.error(t("{where}: {path}: unknown cause {value}; 'llm-doctor rules' lists "
                               "the causes this llm-doctor knows", where=self.where,
                               path=json_path([*at, "cause"]), value=_shown(cause)))
        if rule not in rule_ids:
            raise self.error(t("{where}: {path}: no rule {value} is built in or declared by a "
                               "rule file given (--rules FILE, or scan.rule_files in the config); "
                               "name the rule file the scan was made with", where=self.where,
                               path=json_path([*at, "rule"]), value=_shown(rule)))

    def msg(self, value: Any, path: list[str | int]) -> None:
        """A text's value (docs/report-schema.json $defs/msg), by its shape only: its ids and
        templates are held to the catalogue where it is said (``text_of``)."""
        keys = set(value) if isinstance(value, dict) else None
        if keys == {"id", "params"}:
            self.string(value["id"], [*path, "id"])
            params = self.object(value["params"], [*path, "params"])
            self.most(params, [*path, "params"], msgs.MAX_PARAMS)
            for name, param in params.items():
                if param is None or isinstance(param, (str, int, float)):
                    continue
                self.msg(param, [*path, "params", name])
        elif keys == {"join", "sep"}:
            parts = self.array(value["join"], [*path, "join"])
            self.most(parts, [*path, "join"], msgs.MAX_PARTS)
            for i, part in enumerate([*parts, value["sep"]]):
                if not isinstance(part, str):
                    self.msg(part, [*path, "join", i] if i < len(parts) else [*path, "sep"])
        elif keys == {"texts"}:
            texts = self.object(value["texts"], [*path, "texts"])
            if not texts:
                self.fail([*path, "texts"], t("a text in at least one language"), texts)
            for lang, text in texts.items():
                self.one_of(lang, [*path, "texts"], LANGS)
                self.string(text, [*path, "texts", lang])
        else:
            self.fail(path, t("a message value: an object of id and params, of join and sep, "
                              "or of texts"), value)

    def one_of(self, value: Any, path: list[str | int], allowed: tuple) -> None:
        # bool is an int in Python, not in JSON: true is not 1
        if isinstance(value, bool) or value not in allowed or isinstance(value, (dict, list)):
            self.fail(path, t("one of {choices}", choices=", ".join(map(json.dumps, allowed))), value)


def _shown(value: Any) -> str:
    if isinstance(value, dict):
        return t("an object of {count} field(s)", count=len(value))
    if isinstance(value, list):
        return t("an array of {count} item(s)", count=len(value))
    text = redact_text(json.dumps(value))
    return text if len(text) <= 40 else text[:37] + "..."


def check(data: Any, where: str, error: type[Exception],
          rule_ids: frozenset[str] | None = None) -> dict[str, Any]:
    """``data`` if it follows docs/report-schema.json (schema_version 1), field by field,
    as the renderers may show it (``sanitized``: secrets masked, lone surrogates replaced);
    ``error`` naming ``where`` and the JSON path of the first field that does not.

    Beyond the schema, what the treatment and the fleet act on: counts within the bounds
    above, and each finding's rule and cause ids in their grammar and known: a cause of the
    vocabulary, a rule of ``rule_ids`` (default: the built-in rules; the commands add the
    user's rule files, the state reader the rules its daemon loaded)."""
    known = builtin_ids() if rule_ids is None else rule_ids
    if not isinstance(data, dict) or data.get("schema_version") != 1 \
            or isinstance(data.get("schema_version"), bool):
        raise error(t("{where}: not an llm-doctor JSON report (schema_version 1); {hint}",
                      where=where, hint=_hint()))
    c = _Check(where, error)
    c.object(data, [], _TOP)
    tool = c.object(data["tool"], ["tool"], ("name", "version"))
    c.one_of(tool["name"], ["tool", "name"], ("llm-doctor",))
    c.string(tool["version"], ["tool", "version"])
    # to_dict always writes a hostname; a kind only when the scan gave one (a report built
    # from a ScanReport by hand, or by the daemon, may not), so a missing kind is ours too
    host = c.object(data["host"], ["host"], ("hostname",))
    if "kind" in host:
        c.one_of(host["kind"], ["host", "kind"], HOST_KINDS)
    for key in ("hostname", "path", "captured_at", "machine_id", "machine_id_reason",
                "product_uuid", "product_uuid_reason"):
        if key in host:
            c.string(host[key], ["host", key])
    if "lang" in data:  # written since languages came; an older report has none
        c.one_of(data["lang"], ["lang"], LANGS)
    c.one_of(data["level"], ["level"], LEVELS)
    c.string(data["started_at"], ["started_at"])
    c.number(data["duration_s"], ["duration_s"])
    c.one_of(data["verdict"], ["verdict"], VERDICTS)
    c.one_of(data["exit_code"], ["exit_code"], (0, 1, 2))
    c.most(data["probes"], ["probes"], MAX_PROBES)
    c.most(data["findings"], ["findings"], MAX_FINDINGS)
    c.most(data["rule_errors"], ["rule_errors"], MAX_RULE_ERRORS)
    for i, probe in enumerate(c.array(data["probes"], ["probes"])):
        at: list[str | int] = ["probes", i]
        c.object(probe, at, _PROBE)
        c.string(probe["name"], [*at, "name"])
        if not _PROBE_NAME.match(probe["name"]):
            c.fail([*at, "name"], t("a probe name like \"host.limits\""), probe["name"])
        c.one_of(probe["status"], [*at, "status"], STATUSES)
        c.string(probe["reason"], [*at, "reason"], nullable=True)
        c.number(probe["duration_s"], [*at, "duration_s"])
        if probe["data"] is not None:
            c.object(probe["data"], [*at, "data"])
    for i, finding in enumerate(c.array(data["findings"], ["findings"])):
        at = ["findings", i]
        c.object(finding, at, _FINDING)
        for key in ("rule", "cause", "title", "remediation", "playbook"):
            c.string(finding[key], [*at, key])
        c.ids(finding, at, known)
        c.most(finding["symptoms"], [*at, "symptoms"], MAX_SYMPTOMS)
        c.most(finding["evidence"], [*at, "evidence"], MAX_EVIDENCE)
        c.most(finding.get("missing", {}), [*at, "missing"], MAX_EVIDENCE)
        for j, symptom in enumerate(c.array(finding["symptoms"], [*at, "symptoms"])):
            c.string(symptom, [*at, "symptoms", j])
        c.one_of(finding["severity"], [*at, "severity"], SEVERITIES)
        c.object(finding["evidence"], [*at, "evidence"])
        if "key" in finding:
            c.string(finding["key"], [*at, "key"])
        if "missing" in finding:  # evidence label → why its value is null
            for label, why in c.object(finding["missing"], [*at, "missing"]).items():
                c.string(why, [*at, "missing", label])
    if "msg_version" in data:
        c.one_of(data["msg_version"], ["msg_version"], (MSG_VERSION,))
    for part, fields in TEXT_FIELDS.items():
        for i, entry in enumerate(data[part]):
            if part == "probes" and "summary" in entry:
                c.string(entry["summary"], [part, i, "summary"])
            for key in fields:
                if f"{key}_msg" in entry:
                    c.msg(entry[f"{key}_msg"], [part, i, f"{key}_msg"])
    for i, message in enumerate(c.array(data["rule_errors"], ["rule_errors"])):
        c.string(message, ["rule_errors", i])
    for i, replaced in enumerate(c.array(data.get("replaced_values", []), ["replaced_values"])):
        c.object(replaced, ["replaced_values", i], ("pointer", "reason"))
        for key in ("pointer", "reason"):
            c.string(replaced[key], ["replaced_values", i, key])
    return _values_checked(sanitized(data))


def _values_checked(data: dict[str, Any]) -> dict[str, Any]:
    """A scan saved before its text carried values keeps none (a hand-made ``*_msg`` there
    is dropped). Each value is held to ``doctor.i18n.text.from_json`` where it is said
    (``text_of``): only then is the catalogue read, and an adapter reading a state in the
    language it was written in never reads it."""
    if not translatable(data):
        for part, fields in TEXT_FIELDS.items():
            for entry in data[part]:
                for key in fields:
                    entry.pop(f"{key}_msg", None)
        data.pop("msg_version", None)
    return data




def read(path: Path, error: type[Exception], rule_ids: frozenset[str] | None = None) -> SavedScan:
    """The saved scan at ``path`` (``load``), typed (doctor/saved_scan.py): what ``report``
    and ``diff`` consume."""
    return typed(load(path, error, rule_ids))


text_of = msgs.saved_text  # one saying of a saved text, for the renderers and the core alike

def load(path: Path, error: type[Exception], rule_ids: frozenset[str] | None = None) -> dict[str, Any]:
    """The one reader of a saved report (``scan --format json -o FILE``), as someone else's
    input, for ``report``, ``diff``, ``fix`` and (through ``check``) the daemon's state: a
    regular UTF-8 file of at most 32 MiB, strict JSON, docs/report-schema.json's fields and
    types, counts bounded, ids known (``check``), text masked. Anything else raises
    ``error`` naming the file (and the JSON path)."""
    return check(read_json(path, "saved scan", error, MAX_SAVED_BYTES, SAVED_DEPTH), str(path), error,
                 rule_ids)
