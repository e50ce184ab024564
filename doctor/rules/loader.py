"""Rules are data: ``checks/*.toml`` (and users' rule files), loaded and validated here.

A rule file holds ``[[rule]]`` tables, and may say which rule format it is written in
(``format = 1``; absent means 1)::

    format = 1

    [[rule]]
    id = "fd-limit-low"                 # unique rule id
    cause = "fd-limit-low"              # a cause id from domain.md
    symptoms = ["crash-under-concurrency", "queueing-under-load"]
    severity = "warning"                # info | warning | critical
    probes = ["host.limits"]            # evaluated only when these probes ran ok
    each = "host.limits.processes"      # optional: one finding per matching item (`item`)
    each_also = ["amd.gpu.gpus"]        # optional, with each: other probes' items, the same facts
    key = "str(item.pid)"               # optional, with each: the item's identity
    when = "item.nofile_soft < params.min_nofile"      # the condition
    critical_when = "item.nofile_soft < params.critical_nofile"   # optional escalation
    for = "5m"                          # how long it must hold in the daemon
    title = "{process}: open files {nofile_soft} < {min_nofile}"   # {evidence or params}
    remediation = "the first step to take"
    playbook = "fd-limit-low"           # playbooks/<name>.md
    [rule.params]                       # thresholds, overridable in the config file
    min_nofile = 65535
    [rule.evidence]                     # label = expression, shown with the finding
    nofile_soft = "item.nofile_soft"

Expressions are checked in doctor/rules/expressions.py and evaluated, within bounds of size and
time, by doctor/rules/sandbox.py. Titles are filled by doctor/rules/titles.py. Every error names the
file, the line and the rule: ``FILE:LINE: rule 'ID': what is wrong; what to do``.
"""

from __future__ import annotations

import ast
import datetime
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor import __version__
from doctor.durations import DurationError
from doctor.durations import parse as parse_duration
from doctor.i18n import t
from doctor.rules.expressions import (
    ExpressionError,
    Schema,
    chain_of,
    compile_expression,
    element_type,
    optional_inner,
)
from doctor.model import ProbeSpec, Severity
from doctor.rules.sandbox import FUNCTIONS
from doctor.rules import texts as rule_texts
from doctor.rules.ids import RULE_ID, is_rule_id
from doctor.rules.texts import Texts as RuleTexts
from doctor.rules.titles import Template, TemplateError
from doctor.rules.titles import parse as parse_title
from doctor.tomlfile import MAX_RULE_FILE_BYTES, LineIndex, read_toml
from doctor.vocabulary import CAUSES, SYMPTOMS, suggest

RULE_FORMAT = 1  # the rule-file format this llm-doctor reads (docs/rules.md, "Formats")
MAX_RULES_PER_FILE = 1000
REQUIRED = ("id", "cause", "symptoms", "severity", "probes", "when", "title", "remediation",
            "playbook")
OPTIONAL = ("each", "each_also", "key", "critical_when", "for", "params", "evidence",
            "description")
IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,79}$")  # playbook names
# a rule id goes into saved scans, states, plans and labels: doctor/rules/ids.py's grammar
RULE_ID_LINE = re.compile(f"^{RULE_ID.pattern}$")
# An item's identity when a rule with `each` gives no `key`: the first of these fields.
DEFAULT_KEY_FIELDS = ("pid", "uuid", "name", "path")

__all__ = [
    "DEFAULT_KEY_FIELDS",
    "FUNCTIONS",
    "MAX_RULES_PER_FILE",
    "RULE_FORMAT",
    "Rule",
    "RuleError",
    "builtin_files",
    "element_type",
    "load_file",
    "load_rules",
    "optional_inner",
    "suggest",
]


class RuleError(Exception):
    """A rule or rule file is wrong; the message names the file, rule and position."""


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    cause: str
    symptoms: tuple[str, ...]
    severity: Severity
    probes: tuple[str, ...]
    when: str
    title: str
    remediation: str
    playbook: str
    each: str | None
    critical_when: str | None
    for_: str | None
    params: dict[str, Any]
    evidence: dict[str, str]
    source: str  # file:line of the rule, for error messages
    compiled: dict[str, ast.expr]  # "when", "each", "key", "critical_when", "evidence.<label>"
    for_s: float | None = None  # `for` in seconds: how long the daemon waits before firing
    key: str | None = None  # the `key` expression (with each); None: DEFAULT_KEY_FIELDS
    template: Template = field(default_factory=lambda: Template(()))  # the parsed title
    # lang → the title and remediation in that language (doctor/rules/texts.py)
    texts: dict[str, RuleTexts] = field(default_factory=dict)
    # further item lists (another vendor's records of the same facts): paths "<probe>.<field>"
    each_also: tuple[str, ...] = ()

    @property
    def also_probes(self) -> tuple[str, ...]:
        """The probes of ``each_also``'s paths, in order."""
        return tuple(".".join(path.split(".")[:2]) for path in self.each_also)

    def evaluated_with(self, ok: set[str] | frozenset[str]) -> bool:
        """Whether the rule runs when the probes ``ok`` ran ok: all of its ``probes``, or
        one probe of ``each_also`` (a host with another vendor's GPUs)."""
        return set(self.probes) <= ok or any(p in ok for p in self.also_probes)

    def title_in(self, lang: str) -> Template:
        """The title's template in ``lang``, else the English one."""
        texts = self.texts.get(lang)
        return texts.template if texts else self.template

    def remediation_in(self, lang: str) -> str:
        texts = self.texts.get(lang)
        return texts.remediation if texts else self.remediation


def _kind(value: Any) -> str:
    """A TOML value's type as a person writes it, for messages."""
    if isinstance(value, bool):
        return t("boolean {value}", value=str(value).lower())
    if isinstance(value, (datetime.date, datetime.time)):
        return t("date/time {value}", value=value)
    names = {int: t("number"), float: t("number"), str: t("string"), list: t("array"),
             dict: t("table")}
    shown = repr(value) if not isinstance(value, (list, dict)) else ""
    return f"{names.get(type(value), type(value).__name__)} {shown}".strip()[:80]


class _Fields:
    """One raw [[rule]] table, read with type checks; errors say ``FILE:LINE: rule 'ID'``."""

    def __init__(self, raw: dict, at: Callable[[str | None], str]) -> None:
        self.raw = raw
        self.at = at

    def error(self, key: str | None, message: str) -> RuleError:
        return RuleError(f"{self.at(key)}: {message}")

    def text(self, key: str, pattern: re.Pattern | None = None) -> str:
        value = self.raw[key]
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, t("'{key}' must be a non-empty string, not {kind}", key=key,
                                    kind=_kind(value)))
        if pattern is RULE_ID_LINE and not is_rule_id(value):
            raise self.error(key, t("'{key}' = {value}: use lowercase letters, digits and "
                                    "hyphens (at most 80, starting and ending with a letter or "
                                    "digit), as the built-in rule ids are written; not ok or "
                                    "unknown, nor beginning with ok- or unknown-", key=key,
                                    value=repr(value[:80])))
        if pattern and not pattern.match(value):
            raise self.error(key, t("'{key}' = {value}: use letters, digits and . _ : - (at most "
                                    "80, starting with a letter or digit)", key=key,
                                    value=repr(value[:80])))
        return value

    def strings(self, key: str, single_ok: bool = False, empty_ok: bool = False) -> tuple[str, ...]:
        value = self.raw[key]
        if single_ok and isinstance(value, str):
            value = [value]
        if (not isinstance(value, list) or (not value and not empty_ok)
                or not all(isinstance(v, str) for v in value)):
            raise self.error(key, t("'{key}' must be an array of strings (e.g. {key} = "
                                    "[\"...\"]), not {kind}", key=key, kind=_kind(value))
                             if empty_ok else
                             t("'{key}' must be a non-empty array of strings (e.g. {key} = "
                               "[\"...\"]), not {kind}", key=key, kind=_kind(value)))
        return tuple(value)

    def table(self, key: str) -> dict[str, Any]:
        value = self.raw.get(key, {})
        if not isinstance(value, dict):
            raise self.error(key, t("'{key}' must be a table ([rule.{key}]), not {kind}", key=key,
                                    kind=_kind(value)))
        for name in value:
            if not name.isidentifier():
                raise self.error(name, t("'{key}.{name}': a {key} name must be a word of "
                                         "letters, digits and _ (it is used as params.NAME or "
                                         "{{NAME}})", key=key, name=name))
        return dict(value)


def _param_ok(value: Any) -> bool:
    if isinstance(value, list):
        return all(_param_ok(v) and not isinstance(v, list) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (bool, int, str))


def _checked(f: _Fields, probes: dict[str, ProbeSpec]) -> dict[str, Any]:
    """Every field but the expressions, type-checked and checked against the vocabulary."""
    raw = f.raw
    for key in raw:
        if key not in REQUIRED + OPTIONAL:
            raise f.error(key, t("unknown field '{key}'{hint}", key=key,
                                 hint=suggest(key, REQUIRED + OPTIONAL)))
    for key in REQUIRED:
        if key not in raw:
            raise f.error(None, t("missing field '{key}'", key=key))
    out: dict[str, Any] = {"id": f.text("id", RULE_ID_LINE), "cause": f.text("cause")}
    if out["cause"] not in CAUSES:
        raise f.error("cause", t("unknown cause id '{cause}'{hint}; the cause ids are the "
                                 "playbooks' names (playbooks/README.md)", cause=out["cause"],
                                 hint=suggest(out["cause"], CAUSES)))
    # A security finding explains no troubleshooting row: endpoint-unauthenticated (domain.md).
    out["symptoms"] = f.strings("symptoms", empty_ok=True)
    for symptom in out["symptoms"]:
        if symptom not in SYMPTOMS:
            raise f.error("symptoms", t("unknown symptom row '{symptom}'{hint}; rows: {rows}",
                                        symptom=symptom, hint=suggest(symptom, SYMPTOMS),
                                        rows=", ".join(SYMPTOMS)))
    severity = f.text("severity")
    if severity.upper() not in Severity.__members__:
        raise f.error("severity", t("severity '{severity}' is not one of info, warning, critical",
                                    severity=severity))
    out["severity"] = Severity[severity.upper()]
    out["probes"] = f.strings("probes", single_ok=True)
    for name in out["probes"]:
        if name not in probes:
            raise f.error("probes", t("no probe '{name}'{hint}; 'llm-doctor probes' lists them",
                                      name=name, hint=suggest(name, probes)))
    out["for_s"] = None
    if raw.get("for") is not None:
        if not isinstance(raw["for"], str):
            raise f.error("for", t("'for' must be a duration like \"30s\", \"5m\" or \"1h\", not "
                                   "{kind}", kind=_kind(raw["for"])))
        try:
            out["for_s"] = parse_duration(raw["for"])
        except DurationError as exc:
            raise f.error("for", t("'for' must be a duration: {error}", error=exc)) from None
    for key in ("title", "remediation"):
        out[key] = f.text(key)
    out["playbook"] = f.text("playbook", IDENTIFIER)
    if "description" in raw:
        f.text("description")
    out["params"] = f.table("params")
    for name, value in out["params"].items():
        if not _param_ok(value):
            raise f.error(name, t("'params.{name}' must be a number, string, boolean or an "
                                  "array of them, not {kind}", name=name, kind=_kind(value)))
    out["evidence"] = f.table("evidence")
    out["each_also"] = f.strings("each_also") if "each_also" in raw else ()
    if out["each_also"] and raw.get("each") is None:
        raise f.error("each_also", t("'each_also' adds items to those of 'each': it needs 'each'"))
    for path in out["each_also"]:
        probe = ".".join(path.split(".")[:2])
        if probe not in probes or path.count(".") < 2:
            raise f.error("each_also", t("'each_also' takes paths '<probe>.<field>' of a probe's "
                                         "list; no probe '{name}'{hint}", name=probe,
                                         hint=suggest(probe, probes)))
    return out


def _compile_all(f: _Fields, out: dict[str, Any], schema: Schema) -> dict[str, ast.expr]:
    raw, params = f.raw, out["params"]

    def compiled(key: str, what: str, item_type: Any, line_key: str | None = None) -> ast.expr:
        try:
            return compile_expression(raw_value(key), what, schema, params, item_type)
        except ExpressionError as exc:
            raise f.error(line_key or key, str(exc)) from None

    def raw_value(key: str) -> Any:
        if key.startswith("evidence."):
            return out["evidence"][key.split(".", 1)[1]]
        return raw[key]

    trees: dict[str, ast.expr] = {}
    item_type = None
    if raw.get("each") is not None:
        trees["each"] = compiled("each", "each", None)
        chain = chain_of(trees["each"])
        item_type = Any
        if chain and chain[0] in schema.roots():
            item_type = element_type(schema.resolve(chain)[0])
    if raw.get("key") is not None:
        if item_type is None:
            raise f.error("key", t("'key' names the item a finding is about: it needs 'each'"))
        trees["key"] = compiled("key", "key", item_type)
    trees["when"] = compiled("when", "when", item_type)
    if raw.get("critical_when") is not None:
        trees["critical_when"] = compiled("critical_when", "critical_when", item_type)
    for label in out["evidence"]:
        trees[f"evidence.{label}"] = compiled(f"evidence.{label}", f"evidence.{label}",
                                              item_type, label)
    for i, path in enumerate(out["each_also"]):
        trees[f"each_also.{i}"] = _also_checked(f, path, schema, params)
    return trees


def _also_checked(f: _Fields, path: str, schema: Schema, params: dict[str, Any]) -> ast.expr:
    """``path``'s tree, once every expression of the rule compiles against its items too: a
    field the other vendor's record lacks is an error when the file loads, not a rule that
    fails on that vendor's hosts."""
    raw = f.raw
    try:
        tree = compile_expression(path, "each_also", schema, params, None)
        chain = chain_of(tree)
        item_type = element_type(schema.resolve(chain)[0]) if chain else Any
        for key in ("key", "when", "critical_when"):
            if raw.get(key) is not None:
                compile_expression(raw[key], f"{key} (each_also {path})", schema, params, item_type)
        for label, expr in f.table("evidence").items():
            compile_expression(expr, f"evidence.{label} (each_also {path})", schema, params, item_type)
    except ExpressionError as exc:
        raise f.error("each_also", str(exc)) from None
    return tree


def _rule(raw: Any, index: int, path: Path, lines: LineIndex, schema: Schema,
          probes: dict[str, ProbeSpec]) -> Rule:
    rid = raw.get("id") if isinstance(raw, dict) else None
    rid = rid if isinstance(rid, str) and IDENTIFIER.match(rid) else f"#{index + 1}"

    def at(key: str | None = None) -> str:
        return f"{path}:{lines.entry('rule', index, key)}: rule '{rid}'"

    f = _Fields(raw, at)
    out = _checked(f, probes)
    trees = _compile_all(f, out, schema)
    try:
        template = parse_title(out["title"], [*out["evidence"], *out["params"]])
    except TemplateError as exc:
        raise f.error("title", f"{exc}") from None
    return Rule(
        id=out["id"], cause=out["cause"], symptoms=out["symptoms"], severity=out["severity"],
        probes=out["probes"], when=raw["when"], title=out["title"],
        remediation=out["remediation"], playbook=out["playbook"], each=raw.get("each"),
        critical_when=raw.get("critical_when"), for_=raw.get("for"), params=out["params"],
        evidence=out["evidence"], source=f"{path}:{lines.entry('rule', index)}",
        compiled=trees, for_s=out["for_s"], key=raw.get("key"), template=template,
        each_also=out["each_also"],
    )


def _check_format(data: dict, path: Path, lines: LineIndex) -> None:
    version = data.get("format", RULE_FORMAT)
    where = f"{path}:{lines.table('', 'format')}"
    if not isinstance(version, int) or isinstance(version, bool):
        raise RuleError(t("{where}: 'format' must be a whole number (format = {format}), not "
                          "{kind}", where=where, format=RULE_FORMAT, kind=_kind(version)))
    reads = t("llm-doctor {version} reads rule format {format}", version=__version__,
              format=RULE_FORMAT)
    if version > RULE_FORMAT:
        raise RuleError(t("{where}: this file is written in rule format {written}, newer than "
                          "{reads}; upgrade llm-doctor, or rewrite the file in format {format} "
                          "(docs/rules.md)", where=where, written=version, reads=reads,
                          format=RULE_FORMAT))
    if version < RULE_FORMAT:
        raise RuleError(t("{where}: this file says rule format {written}, which does not exist "
                          "or is no longer read; {reads} (docs/rules.md)", where=where,
                          written=version, reads=reads))


def _raw_rules(data: dict, path: Path, lines: LineIndex) -> list[dict]:
    extra = sorted(set(data) - {"rule", "format"})
    if extra:
        raise RuleError(f"{path}:{lines.table(extra[0])}: " + t(
            "unknown top-level key or table '{key}'{hint}; a rule file holds format = 1 and "
            "[[rule]] tables", key=extra[0], hint=suggest(extra[0], ["rule", "format"])))
    raws = data.get("rule", [])
    if not isinstance(raws, list):
        raise RuleError(f"{path}:{lines.table('rule')}: " + t(
            "'rule' must be [[rule]] tables (an array of tables), not {kind}", kind=_kind(raws)))
    for index, raw in enumerate(raws):
        if not isinstance(raw, dict):
            raise RuleError(f"{path}:{lines.entry('rule', index)}: " + t(
                "rule #{number} must be a [[rule]] table, not {kind}", number=index + 1,
                kind=_kind(raw)))
    if len(raws) > MAX_RULES_PER_FILE:
        raise RuleError(f"{path}:{lines.entry('rule', MAX_RULES_PER_FILE)}: " + t(
            "{count} rules in one file; the limit is {limit}: split it into several files "
            "(--rules is repeatable)", count=len(raws), limit=MAX_RULES_PER_FILE))
    return raws


def load_file(path: Path, probes: dict[str, ProbeSpec]) -> list[Rule]:
    """Load and validate one rule file; raises RuleError naming file, rule and line."""
    text, data = read_toml(path, "rule file", RuleError, MAX_RULE_FILE_BYTES)
    lines = LineIndex(text)
    _check_format(data, path, lines)
    raws = _raw_rules(data, path, lines)
    schema = Schema(probes)
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for index, raw in enumerate(raws):
        rule = _rule(raw, index, path, lines, schema, probes)
        if rule.id in seen:
            raise RuleError(f"{rule.source}: " + t("rule id '{rule}' is already defined at "
                                                   "{where}", rule=rule.id, where=seen[rule.id]))
        seen[rule.id] = rule.source
        rules.append(rule)
    return _translated(path, rules)


def _translated(path: Path, rules: list[Rule]) -> list[Rule]:
    """``rules`` with the texts of each translation file beside ``path``."""
    import dataclasses

    names_of = {rule.id: [*rule.evidence, *rule.params] for rule in rules}
    by_lang = {lang: rule_texts.load(file, names_of, RuleError)
               for lang, file in rule_texts.translations_of(path).items()}
    if not by_lang:
        return rules
    return [dataclasses.replace(rule, texts={lang: texts[rule.id] for lang, texts
                                             in by_lang.items() if rule.id in texts})
            for rule in rules]


def builtin_files() -> list[Path]:
    import checks

    return sorted(Path(checks.__file__).parent.glob("*.toml"))


def load_rules(files: list[Path], probes: dict[str, ProbeSpec]) -> list[Rule]:
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in files:
        for rule in load_file(path, probes):
            if rule.id in seen:
                raise RuleError(f"{rule.source}: " + t("rule id '{rule}' is already defined "
                                                       "at {where}", rule=rule.id,
                                                       where=seen[rule.id]))
            seen[rule.id] = rule.source
            rules.append(rule)
    return rules
