"""Rules are data: ``checks/*.toml`` (and users' rule files), loaded and validated here.

A rule file holds ``[[rule]]`` tables::

    [[rule]]
    id = "fd-limit-low"                 # unique rule id
    cause = "fd-limit-low"              # a cause id from domain.md
    symptoms = ["crash-under-concurrency", "queueing-under-load"]
    severity = "warning"                # info | warning | critical
    probes = ["host.limits"]            # evaluated only when these probes ran ok
    each = "host.limits.processes"      # optional: one finding per matching item (`item`)
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

Expressions are Python-like and evaluated by simpleeval (no ``eval``): comparisons,
``and/or/not``, ``x if c else y``, ``in``, attribute access, generator expressions and
the functions in ``FUNCTIONS``. Every name in an expression is checked against the probe
records' fields when the rule is loaded, so a typo is an error with its position, not a
rule that silently never fires.
"""

from __future__ import annotations

import ast
import difflib
import re
import string
import types
import typing
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from doctor._toml import tomllib
from doctor.model import ProbeSpec, Severity
from doctor.vocabulary import CAUSES, SYMPTOMS

FUNCTIONS: dict[str, Any] = {
    "int": int, "float": float, "str": str, "len": len, "min": min, "max": max,
    "sum": sum, "any": any, "all": all, "round": round, "abs": abs, "sorted": sorted,
    "count": lambda mapping, keys: sum(mapping.get(k, 0) for k in keys),
    "join": lambda items, sep=", ": sep.join(str(i) for i in items),
}
REQUIRED = ("id", "cause", "symptoms", "severity", "probes", "when", "title", "remediation",
            "playbook")
OPTIONAL = ("each", "critical_when", "for", "params", "evidence", "description")
DURATION = re.compile(r"^\d+[smh]$")


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
    compiled: dict[str, ast.expr]  # "when", "each", "critical_when", "evidence.<label>"


def _line_of(text: str, index: int, key: str | None = None) -> int:
    """1-based line of the ``index``-th ``[[rule]]`` header, or of ``key`` inside that rule."""
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if line.strip().startswith("[[rule]]")]
    if index >= len(headers):
        return 1
    start = headers[index]
    end = headers[index + 1] if index + 1 < len(headers) else len(lines)
    if key:
        pattern = re.compile(rf"^\s*(\"?){re.escape(key)}\1\s*=")
        for i in range(start, end):
            if pattern.match(lines[i]):
                return i + 1
    return start + 1


def suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def optional_inner(tp: Any) -> Any:
    """Optional[X] → X."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return args[0] if len(args) == 1 else Any
    return tp


def element_type(tp: Any) -> Any:
    """tuple[X, ...] / list[X] → X; anything else → Any."""
    tp = optional_inner(tp)
    if typing.get_origin(tp) in (tuple, list) and typing.get_args(tp):
        return typing.get_args(tp)[0]
    return Any


class _Schema:
    """What names an expression may use: probe records' fields, params, item."""

    def __init__(self, probes: dict[str, ProbeSpec]) -> None:
        self.records: dict[str, Any] = {}
        for name, spec in probes.items():
            hints = typing.get_type_hints(spec.run)
            self.records[name] = hints.get("return", Any)

    def roots(self) -> set[str]:
        return {name.split(".", 1)[0] for name in self.records}

    def resolve(self, chain: list[str]) -> tuple[Any, str | None]:
        """The type at ``host.limits.processes``…, or an error for the first bad link."""
        root = chain[0]
        if len(chain) == 1:
            return dict, None
        probe = f"{root}.{chain[1]}"
        if probe not in self.records:
            names = [n.split(".", 1)[1] for n in self.records if n.startswith(root + ".")]
            return None, f"no probe '{probe}'{suggest(chain[1], names)}"
        return self.walk(self.records[probe], chain[2:], probe)

    def walk(self, tp: Any, attrs: list[str], where: str) -> tuple[Any, str | None]:
        for attr in attrs:
            tp = optional_inner(tp)
            if typing.get_origin(tp) in (tuple, list):
                return None, (f"'{where}' is a list: take its items with each = \"{where}\" "
                              f"(then item.{attr}) or any(x.{attr} ... for x in {where})")
            if not is_dataclass(tp):
                return Any, None  # dicts and free-form values: keys are data, not schema
            names = {f.name for f in fields(tp)}
            if attr not in names:
                return None, f"'{where}' has no field '{attr}'{suggest(attr, names)}"
            tp = typing.get_type_hints(tp)[attr]
            where = f"{where}.{attr}"
        return tp, None


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` → ["a", "b", "c"]; None when the chain does not start at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _check_names(tree: ast.expr, schema: _Schema, params: dict, item_type: Any) -> str | None:
    """The first name or field in ``tree`` that cannot exist, as a message; else None."""
    local = {n.id for n in ast.walk(tree)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    for node in ast.walk(tree):
        parent = getattr(node, "_parent", None)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            continue  # the outermost attribute of a chain checks the whole chain
        chain = _chain(node) if isinstance(node, (ast.Attribute, ast.Name)) else None
        if not chain:
            continue
        root = chain[0]
        if root in local or root in FUNCTIONS or root in ("True", "False", "None"):
            continue
        if root == "params":
            if len(chain) > 1 and chain[1] not in params:
                return f"no parameter '{chain[1]}'{suggest(chain[1], params)} in [rule.params]"
        elif root == "item":
            if item_type is None:
                return "'item' is only defined in a rule with 'each'"
            _, err = schema.walk(item_type, chain[1:], "item")
            if err:
                return err
        elif root in schema.roots():
            _, err = schema.resolve(chain)
            if err:
                return err
        else:
            known = sorted(schema.roots() | {"params", "item", *FUNCTIONS})
            return f"unknown name '{root}'{suggest(root, known)}"
    return None


def _mark_parents(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child._parent = node  # type: ignore[attr-defined]


def _compile(expr: Any, what: str, schema: _Schema, params: dict, item_type: Any,
             where: str) -> ast.expr:
    if not isinstance(expr, str) or not expr.strip():
        raise RuleError(f"{where}: '{what}' must be a non-empty expression string")
    flat = " ".join(line.strip() for line in expr.strip().splitlines())  # TOML """…""" spans lines
    try:
        tree = ast.parse(flat, mode="eval").body
    except SyntaxError as exc:
        raise RuleError(
            f"{where}: '{what}' is not a valid expression at column {exc.offset}: {exc.msg}\n"
            f"    {flat}\n    {' ' * ((exc.offset or 1) - 1)}^"
        ) from None
    _mark_parents(tree)
    err = _check_names(tree, schema, params, item_type)
    if err:
        raise RuleError(f"{where}: '{what}': {err}\n    {flat}")
    return tree


def _rule(raw: dict, index: int, text: str, path: Path, schema: _Schema,
          probes: dict[str, ProbeSpec]) -> Rule:
    rid = raw.get("id", f"#{index + 1}")

    def at(key: str | None = None) -> str:
        return f"{path}:{_line_of(text, index, key)}: rule '{rid}'"

    for key in raw:
        if key not in REQUIRED + OPTIONAL:
            raise RuleError(f"{at(key)}: unknown field '{key}'{suggest(key, REQUIRED + OPTIONAL)}")
    for key in REQUIRED:
        if key not in raw:
            raise RuleError(f"{at()}: missing field '{key}'")
    if raw["cause"] not in CAUSES:
        raise RuleError(f"{at('cause')}: unknown cause id '{raw['cause']}'"
                        f"{suggest(raw['cause'], CAUSES)}; the cause ids are the playbooks' names "
                        "(playbooks/README.md)")
    for symptom in raw["symptoms"]:
        if symptom not in SYMPTOMS:
            raise RuleError(f"{at('symptoms')}: unknown symptom row '{symptom}'"
                            f"{suggest(symptom, SYMPTOMS)}; rows: {', '.join(SYMPTOMS)}")
    try:
        severity = Severity[str(raw["severity"]).upper()]
    except KeyError:
        raise RuleError(f"{at('severity')}: severity '{raw['severity']}' is not one of "
                        "info, warning, critical") from None
    probe_names = raw["probes"] if isinstance(raw["probes"], list) else [raw["probes"]]
    for name in probe_names:
        if name not in probes:
            raise RuleError(f"{at('probes')}: no probe '{name}'{suggest(name, probes)}; "
                            "'llm-doctor probes' lists them")
    if raw.get("for") is not None and not DURATION.match(str(raw["for"])):
        raise RuleError(f"{at('for')}: 'for' must be a duration like 30s, 5m or 1h")
    params = dict(raw.get("params", {}))
    evidence = dict(raw.get("evidence", {}))
    compiled: dict[str, ast.expr] = {}
    item_type = None
    if raw.get("each"):
        compiled["each"] = _compile(raw["each"], "each", schema, params, None, at("each"))
        chain = _chain(compiled["each"])
        item_type = element_type(schema.resolve(chain)[0]) if chain and chain[0] in schema.roots() else Any
    compiled["when"] = _compile(raw["when"], "when", schema, params, item_type, at("when"))
    if raw.get("critical_when"):
        compiled["critical_when"] = _compile(raw["critical_when"], "critical_when", schema,
                                             params, item_type, at("critical_when"))
    for label, expr in evidence.items():
        compiled[f"evidence.{label}"] = _compile(expr, f"evidence.{label}", schema, params,
                                                 item_type, at(label))
    for _, field_name, _, _ in string.Formatter().parse(raw["title"]):
        if field_name and field_name not in evidence and field_name not in params:
            raise RuleError(f"{at('title')}: title uses {{{field_name}}}, which is neither "
                            f"an evidence label nor a parameter{suggest(field_name, [*evidence, *params])}")
    return Rule(
        id=rid, cause=raw["cause"], symptoms=tuple(raw["symptoms"]), severity=severity,
        probes=tuple(probe_names), when=raw["when"], title=raw["title"],
        remediation=raw["remediation"], playbook=raw["playbook"], each=raw.get("each"),
        critical_when=raw.get("critical_when"), for_=raw.get("for"), params=params,
        evidence=evidence, source=f"{path}:{_line_of(text, index)}", compiled=compiled,
    )


def load_file(path: Path, probes: dict[str, ProbeSpec]) -> list[Rule]:
    """Load and validate one rule file; raises RuleError naming file, rule and line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise RuleError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{path}: not valid TOML: {exc}") from None
    extra = set(data) - {"rule"}
    if extra:
        raise RuleError(f"{path}: unknown top-level table(s) {sorted(extra)}; a rule file "
                        "holds [[rule]] tables only")
    schema = _Schema(probes)
    return [_rule(raw, i, text, path, schema, probes) for i, raw in enumerate(data.get("rule", []))]


def builtin_files() -> list[Path]:
    import checks

    return sorted(Path(checks.__file__).parent.glob("*.toml"))


def load_rules(files: list[Path], probes: dict[str, ProbeSpec]) -> list[Rule]:
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in files:
        for rule in load_file(path, probes):
            if rule.id in seen:
                raise RuleError(f"{rule.source}: rule id '{rule.id}' is already defined at "
                                f"{seen[rule.id]}")
            seen[rule.id] = rule.source
            rules.append(rule)
    return rules
