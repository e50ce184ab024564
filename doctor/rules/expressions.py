"""Rule expressions, checked when a rule loads: syntax, size, and every name they use.

Every name in an expression is checked against the probe records' fields (walked from
their dataclasses), the rule's parameters and ``item``, so a typo is an error with its
position, not a rule that silently never fires. An expression is also refused when it is
longer than MAX_CHARS or nested deeper than MAX_DEPTH: evaluation recurses once per level,
and no real rule comes near either bound.
"""

from __future__ import annotations

import ast
import functools
import types
import typing
from dataclasses import fields, is_dataclass
from typing import Any

from doctor.model import ProbeSpec
from doctor.i18n import t
from doctor.rules.sandbox import ALLOWED_NODES, FUNCTIONS
from doctor.vocabulary import suggest

MAX_CHARS = 4000  # the longest built-in expression is under 300
MAX_DEPTH = 40  # levels of nested operations, calls and brackets


class ExpressionError(ValueError):
    """An expression cannot be used; the message starts with the rule field it is in."""




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


@functools.cache
def _hints(tp: Any) -> dict[str, Any]:
    """A record type's field types; cached, as 3,000 rules ask for the same few types."""
    return typing.get_type_hints(tp)


class Schema:
    """What names an expression may use: probe records' fields, params, item."""

    def __init__(self, probes: dict[str, ProbeSpec]) -> None:
        self.records: dict[str, Any] = {}
        for name, spec in probes.items():
            self.records[name] = _hints(spec.run).get("return", Any)
        self._roots = {name.split(".", 1)[0] for name in self.records}

    def roots(self) -> set[str]:
        return self._roots

    def resolve(self, chain: list[str]) -> tuple[Any, str | None]:
        """The type at ``host.limits.processes``…, or an error for the first bad link."""
        root = chain[0]
        if len(chain) == 1:
            return dict, None
        probe = f"{root}.{chain[1]}"
        if probe not in self.records:
            names = [n.split(".", 1)[1] for n in self.records if n.startswith(root + ".")]
            return None, t("no probe '{probe}'{hint}", probe=probe, hint=suggest(chain[1], names))
        return self.walk(self.records[probe], chain[2:], probe)

    def walk(self, tp: Any, attrs: list[str], where: str) -> tuple[Any, str | None]:
        for attr in attrs:
            tp = optional_inner(tp)
            if typing.get_origin(tp) in (tuple, list):
                return None, t("'{where}' is a list: take its items with each = \"{where}\" (then "
                               "item.{attr}) or any(x.{attr} ... for x in {where})", where=where,
                               attr=attr)
            if not is_dataclass(tp):
                return Any, None  # dicts and free-form values: keys are data, not schema
            names = {f.name for f in fields(tp)}
            if attr not in names:
                return None, t("'{where}' has no field '{attr}'{hint}", where=where, attr=attr,
                               hint=suggest(attr, names))
            tp = _hints(typing.cast(Any, tp))[attr]
            where = f"{where}.{attr}"
        return tp, None


def chain_of(node: ast.expr) -> list[str] | None:
    """``a.b.c`` → ["a", "b", "c"]; None when the chain does not start at a name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _check_names(nodes: list[ast.AST], schema: Schema, params: dict,
                 item_type: Any) -> str | None:
    """The first name or field among ``nodes`` that cannot exist, as a message; else None."""
    local = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
    for node in nodes:
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            return t("'.{name}': names starting with _ are not available", name=node.attr)
    for node in nodes:
        if id(node) in inner:
            continue  # the outermost attribute of a chain checks the whole chain
        chain = chain_of(node) if isinstance(node, (ast.Attribute, ast.Name)) else None
        if not chain:
            continue
        root = chain[0]
        if root in local or root in FUNCTIONS or root in ("True", "False", "None"):
            continue
        if root == "params":
            if len(chain) > 1 and chain[1] not in params:
                return t("no parameter '{name}'{hint} in [rule.params]", name=chain[1],
                         hint=suggest(chain[1], params))
        elif root == "item":
            if item_type is None:
                return t("'item' is only defined in a rule with 'each'")
            _, err = schema.walk(item_type, chain[1:], "item")
            if err:
                return err
        elif root in schema.roots():
            _, err = schema.resolve(chain)
            if err:
                return err
        else:
            known = sorted(schema.roots() | {"params", "item", *FUNCTIONS})
            return t("unknown name '{name}'{hint}", name=root, hint=suggest(root, known))
    return None


def _nodes(tree: ast.AST) -> tuple[list[ast.AST], int]:
    """Every node of ``tree``, and how deeply it nests (up to MAX_DEPTH + 1); no recursion."""
    nodes: list[ast.AST] = []
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        nodes.append(node)
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return nodes, deepest


def _parse(flat: str, what: str) -> ast.expr:
    try:
        return ast.parse(flat, mode="eval").body
    except SyntaxError as exc:
        offset = exc.offset or 1
        raise ExpressionError(t("'{what}' is not a valid expression at column {column}: {error}",
                                what=what, column=offset, error=exc.msg)
                              + f"\n    {flat}\n    {' ' * (offset - 1)}^") from None
    except (RecursionError, MemoryError, ValueError) as exc:  # ValueError: a NUL byte
        reason = t("nested too deeply") if not isinstance(exc, ValueError) else str(exc)
        raise ExpressionError(t("'{what}' is not a valid expression: {reason}", what=what,
                                reason=reason)) from None


def compile_expression(expr: Any, what: str, schema: Schema, params: dict,
                       item_type: Any) -> ast.expr:
    """The parsed expression, every name in it checked; raises ExpressionError."""
    if not isinstance(expr, str) or not expr.strip():
        raise ExpressionError(t("'{what}' must be a non-empty expression string, not {kind}",
                                what=what, kind=f"{type(expr).__name__} {expr!r:.60}"))
    if len(expr) > MAX_CHARS:
        raise ExpressionError(t("'{what}' is {length} characters long; the limit is {limit}: "
                                "split it, or move constants to [rule.params]", what=what,
                                length=len(expr), limit=MAX_CHARS))
    flat = " ".join(line.strip() for line in expr.strip().splitlines())  # TOML """…""" spans lines
    tree = _parse(flat, what)
    nodes, depth = _nodes(tree)
    if depth > MAX_DEPTH:
        raise ExpressionError(t("'{what}' nests more than {depth} levels deep; write it flatter",
                                what=what, depth=MAX_DEPTH))
    for node in nodes:
        if not isinstance(node, ALLOWED_NODES):
            raise ExpressionError(t("'{what}': {node} is not available in a rule expression "
                                    "(docs/rules.md lists what is)", what=what,
                                    node=type(node).__name__) + f"\n    {flat}")
    err = _check_names(nodes, schema, params, item_type)
    if err:
        raise ExpressionError(f"'{what}': {err}\n    {flat}")
    return tree
