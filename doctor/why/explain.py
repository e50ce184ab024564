"""Why a rule's condition is false for one item, said from the expression and its values.

No text is written per rule: the parsed ``when`` (doctor/rules/expressions.py) is walked, and
each sub-expression is evaluated by the rule's own bounded evaluator
(doctor/rules/sandbox.py). For ``a and b`` the first operand that is false is explained; for
``a or b`` every operand; a comparison says its measured side, the operator and its limit
("temp_c = 62, needs ≥ 82 (slowdown_c - min_margin_c)"); ``x is not None`` that fails, or a
comparison with an absent value, says the value was not measured, with the record's reason.
An item whose condition needed an absent value is *not judged*, which is not ruled out.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from doctor.i18n.values import Text, m
from doctor.rules.evaluate import missing_reason, none_set  # the record's own reason for an absent value
from doctor.rules.expressions import chain_of
from doctor.rules.sandbox import Evaluator

MAX_SOURCE_CHARS = 80  # an expression shown as itself (an any(...) over pairs)
MAX_VALUE_CHARS = 60

OPERATORS = {ast.Gt: ">", ast.GtE: "≥", ast.Lt: "<", ast.LtE: "≤", ast.Eq: "=", ast.NotEq: "≠",
             ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


@dataclass(frozen=True, slots=True)
class Explanation:
    """The parts of why a condition is false; ``absent``: a value it needs was not measured,
    so it was not judged."""

    absent: bool
    parts: tuple[Text, ...]
    # the records' reasons for the absent values it names ("" for one with none), from which
    # the differential picks the command that would measure them
    reasons: tuple[str, ...] = ()


def name_of(node: ast.expr) -> str:
    """``item.temp_c`` → temp_c, ``params.min_ratio`` → min_ratio, ``host.cpu.x`` as it is;
    anything else as its source, cut."""
    chain = chain_of(node)
    if chain and chain[0] in ("item", "params") and len(chain) > 1:
        return ".".join(chain[1:])
    text = ".".join(chain) if chain else ast.unparse(node)
    return text if len(text) <= MAX_SOURCE_CHARS else text[:MAX_SOURCE_CHARS - 1] + "…"


def shown(value: Any) -> str:
    """A value as the explanation shows it: booleans in lower case, floats to 4 figures."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 1] + "…"


def value_of(node: ast.expr, ev: Evaluator) -> Any:
    """The node's value; None when a value it needs is absent (as the rules engine judges)."""
    try:
        return ev.run(node, ast.unparse(node))
    except TypeError as exc:
        if "NoneType" in str(exc):
            return None
        raise


def _is_constant(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) or (isinstance(node, ast.UnaryOp)
                                              and isinstance(node.operand, ast.Constant))


def _absent(node: ast.expr, ev: Evaluator) -> Explanation:
    """A None the condition needed: not judged, as the rules engine treats it, with the
    record's own reason where it gives one (its ``missing``); but where the record lists the
    field as ``unset`` (read, and no quota or limit is set), the cause is ruled out on it."""
    reason = missing_reason(node, ev.names)
    if reason and none_set(node, ev.names):  # read, and nothing is set: judged, and false
        return Explanation(False, (m("{name}: none set ({reason})", name=name_of(node),
                                     reason=reason),))
    if reason:
        return Explanation(True, (m("{name}: not measured ({reason})", name=name_of(node),
                                    reason=reason),), (reason,))
    return Explanation(True, (m("{name} has no value", name=name_of(node)),), ("",))


def _compare(node: ast.Compare, ev: Evaluator) -> Explanation:
    if len(node.ops) != 1:
        return _generic(node, ev)
    op, left, right = node.ops[0], node.left, node.comparators[0]
    if isinstance(op, ast.IsNot) and isinstance(right, ast.Constant) and right.value is None:
        return _absent(left, ev)  # "x is not None" failed: x was not measured
    lv, rv = value_of(left, ev), value_of(right, ev)
    if lv is None and not isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)):
        return _absent(left, ev)
    if rv is None and not isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)):
        return _absent(right, ev)
    sign = OPERATORS.get(type(op), type(op).__name__)
    if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant):
        sign = "=" if isinstance(op, ast.Is) else "≠"  # "engine = 'vllm', needs = none"
    if _is_constant(right):
        return Explanation(False, (m("{name} = {value}, needs {op} {limit}", name=name_of(left),
                                     value=shown(lv), op=sign, limit=shown(rv)),))
    return Explanation(False, (m("{name} = {value}, needs {op} {limit} ({source})",
                                 name=name_of(left), value=shown(lv), op=sign, limit=shown(rv),
                                 source=name_of(right)),))


def _generic(node: ast.expr, ev: Evaluator) -> Explanation:
    value = value_of(node, ev)
    if value is None:
        return _absent(node, ev)
    if isinstance(node, ast.Constant):
        return Explanation(False, (m("the condition is {value}", value=shown(value)),))
    return Explanation(False, (m("{name} = {value}, needs true", name=name_of(node),
                                 value=shown(value)),))


def why_false(node: ast.expr, ev: Evaluator) -> Explanation:
    """Why ``node`` (a rule's ``when``, or a part of it) is false for the item in ``ev``."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        for operand in node.values:
            if not value_of(operand, ev):
                return why_false(operand, ev)
        return Explanation(False, ())
    if isinstance(node, ast.BoolOp):  # or: every operand is false
        # Not judged only when no operand was: one measured and false rules out what it
        # covers, and the parts not measured are still named.
        found = [why_false(operand, ev) for operand in node.values]
        return Explanation(all(e.absent for e in found), tuple(p for e in found for p in e.parts),
                           tuple(r for e in found for r in e.reasons))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        value = value_of(node.operand, ev)
        if value is None:
            return _absent(node.operand, ev)
        return Explanation(False, (m("{name} = {value}, needs false", name=name_of(node.operand),
                                     value=shown(value)),))
    if isinstance(node, ast.Compare):
        return _compare(node, ev)
    return _generic(node, ev)
