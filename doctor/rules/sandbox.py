"""The evaluator of rule expressions: simpleeval, bounded in what it can build and how long.

simpleeval gives the safe language (no ``eval``, no dunder attributes, no imports). It
does not bound work: ``'\\t'.expandtabs(10**9)`` builds a gigabyte, a comprehension can
build lists of lists for minutes, and it re-walks every container a node returns (which
made a rule over 5,000 processes quadratic: 112 s). This evaluator adds:

- a work budget per rule (``MAX_WORK``): one unit per node evaluated, plus the size of
  every value an expression builds (characters of a string, items of a list, counted
  through nested lists), plus the length of every value a call is given, charged before
  the call runs (``n log n`` for ``sorted``);
- a size limit on any one value (``MAX_VALUE_SIZE``), checked *before* the operations
  that multiply size (``*``, ``+``, ``str()``, ``join``, ``expandtabs``, ``ljust``…);
- a deadline (wall time), checked every few nodes, before every call, inside the loops
  of the functions below, and at every call of a function handed to another (the
  ``key=`` of ``max``, ``min`` and ``sorted``): a node is never the one long step that
  outlasts it (``max('x' * 3999999, key=join)`` ran 15 s past a 2 s limit);
- attribute access that reads a record's field first, and only a short list of
  methods that do not mutate (``item.comm.startswith('python')``, ``d.get(k)``).

Every bound raises ``LimitExceeded``; the rule that hit it becomes a rule error.
"""

from __future__ import annotations

import ast
import itertools
import operator as op
import threading
import time
import types
from collections.abc import Callable, Sized
from typing import Any

from simpleeval import (
    DISALLOW_FUNCTIONS,
    EvalWithCompoundTypes,
    FeatureNotAvailable,
    FunctionNotDefined,
    IterableTooLong,
)

from doctor.rules.titles import SPEC

MAX_VALUE_SIZE = 4_000_000  # characters or items (nested ones counted) in one value built
MAX_WORK = 50_000_000  # per rule, over all its items: nodes + sizes of values built
MAX_ITERATIONS = 100_000  # per expression, over all its comprehensions
MAX_INT_BITS = 4096  # integers an expression builds (10**1000 is 3,322 bits)
MAX_ROUND_DIGITS = 100
_CHECK_CLOCK_EVERY = 16  # nodes between two looks at the clock (~60 ns each)

# Node types whose result is a new value, charged by its size.
_BUILDS = (ast.BinOp, ast.Call, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp,
           ast.GeneratorExp, ast.DictComp, ast.SetComp, ast.JoinedStr, ast.Subscript)
_SCALARS = (int, float, bool, type(None), complex)
_SCALAR_SET = set(_SCALARS)
_DATA = {str, list, tuple, dict, set, frozenset}  # never a module or a function


class LimitExceeded(Exception):
    """An expression went past a size, work or time bound; the message says which."""


class _Running(threading.local):
    """The evaluator running on this thread: the functions, methods and operators below are
    called by simpleeval without it, and look at its clock through ``_tick``."""

    evaluator: Evaluator | None = None


_RUNNING = _Running()


def _tick() -> None:
    """The running evaluator's bounds, checked (nothing outside an evaluation)."""
    if _RUNNING.evaluator is not None:
        _RUNNING.evaluator._check_bounds()


def _length(value: Any) -> int:
    """What a call given ``value`` is charged: its length, or 1."""
    return len(value) if isinstance(value, Sized) else 1


def size_of(value: Any, cap: int, tick: Callable[[], None] = _tick) -> int:
    """Characters and items in ``value``, nested ones counted each time they appear.

    Stops as soon as the count passes ``cap``, so its own cost is at most ``cap``, and
    calls ``tick`` (the evaluator's clock) every few thousand steps. A list holding the
    same million-character string twice counts two million: that is what ``str()`` of
    it, or comparing it, would cost. A list of plain numbers is sized at C speed
    (``map(type, …)``), not item by item.
    """
    total = 0
    steps = 0
    stack = [value]
    while stack and total <= cap:
        item = stack.pop()
        steps += 1
        if steps % 4096 == 0:
            tick()
        if isinstance(item, (str, bytes)):
            total += len(item) or 1
            continue
        if isinstance(item, dict):
            total += len(item) + 1
            item = item.values()
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item) + 1
        else:
            total += 1
            continue
        kinds = set(map(type, item))
        if not kinds <= _SCALAR_SET:
            stack.extend(item)
    return total


def _check_size(value: Any, what: str) -> None:
    if size_of(value, MAX_VALUE_SIZE) > MAX_VALUE_SIZE:
        raise LimitExceeded(f"{what} would be over {MAX_VALUE_SIZE:,} characters or items")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _sequence(value: Any) -> bool:
    return isinstance(value, (str, bytes, list, tuple))


def _mult(a: Any, b: Any) -> Any:
    if _sequence(a) and _is_int(b) or _is_int(a) and _sequence(b):
        seq, times = (a, b) if _sequence(a) else (b, a)
        if times > 0 and size_of(seq, MAX_VALUE_SIZE) * times > MAX_VALUE_SIZE:
            raise LimitExceeded(f"repeating a value {times} times would be over "
                                f"{MAX_VALUE_SIZE:,} characters or items")
    elif _is_int(a) and _is_int(b) and a.bit_length() + b.bit_length() > MAX_INT_BITS:
        raise LimitExceeded(f"a product over {MAX_INT_BITS} bits")
    return a * b


def _add(a: Any, b: Any) -> Any:
    if _sequence(a) and _sequence(b) and \
            size_of(a, MAX_VALUE_SIZE) + size_of(b, MAX_VALUE_SIZE) > MAX_VALUE_SIZE:
        raise LimitExceeded(f"joining two values would be over {MAX_VALUE_SIZE:,} "
                            "characters or items")
    return a + b


def _pow(a: Any, b: Any) -> Any:
    if _is_int(a) and _is_int(b) and b > 0 and abs(a) > 1:
        if a.bit_length() * b > MAX_INT_BITS:
            raise LimitExceeded(f"a power over {MAX_INT_BITS} bits")
    elif isinstance(b, (int, float)) and abs(b) > 10_000 and isinstance(a, int) and abs(a) > 1:
        raise LimitExceeded("an exponent over 10000")
    return a ** b


def _lshift(a: Any, b: Any) -> Any:
    if _is_int(a) and _is_int(b) and a.bit_length() + b > MAX_INT_BITS:
        raise LimitExceeded(f"a shift over {MAX_INT_BITS} bits")
    return a << b


def _mod(a: Any, b: Any) -> Any:
    if isinstance(a, (str, bytes)):  # printf formatting pads without bound ('%999999999d')
        raise FeatureNotAvailable("'%' formatting of text is not available; use str() and +")
    return a % b


OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: _add, ast.Sub: op.sub, ast.Mult: _mult, ast.Div: op.truediv,
    ast.FloorDiv: op.floordiv, ast.Pow: _pow, ast.Mod: _mod, ast.LShift: _lshift,
    ast.RShift: op.rshift, ast.BitOr: op.or_, ast.BitAnd: op.and_, ast.BitXor: op.xor,
    ast.Eq: op.eq, ast.NotEq: op.ne, ast.Gt: op.gt, ast.Lt: op.lt, ast.GtE: op.ge,
    ast.LtE: op.le, ast.Not: op.not_, ast.USub: op.neg, ast.UAdd: op.pos,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
    ast.Is: op.is_, ast.IsNot: op.is_not, ast.Invert: op.invert,
}


def _str(value: Any = "") -> str:
    _check_size(value, "str() of this value")
    return str(value)


def _join(items: Any, sep: str = ", ") -> str:
    items = list(items)
    _check_size([sep] * len(items) + items, "join() of these items")
    return str(sep).join(map(str, items))  # at C speed: no Python step per item


def _sum(items: Any, start: float = 0) -> Any:
    if not isinstance(start, (int, float)):  # sum(lists, []) is quadratic list building
        raise FeatureNotAvailable("sum() adds numbers; its start must be a number")
    return sum(items, start)


def _round(number: Any, ndigits: int | None = None) -> Any:
    if ndigits is not None and abs(ndigits) > MAX_ROUND_DIGITS:
        raise LimitExceeded(f"round() to more than {MAX_ROUND_DIGITS} digits")
    return round(number, ndigits)


# The functions an expression may call; the rule loader checks names against these.
FUNCTIONS: dict[str, Any] = {
    "int": int, "float": float, "str": _str, "len": len, "min": min, "max": max,
    "sum": _sum, "any": any, "all": all, "round": _round, "abs": abs, "sorted": sorted,
    "count": lambda mapping, keys: sum(map(mapping.get, keys, itertools.repeat(0))),
    "join": _join,
}


def _width(s: str, width: Any, *rest: Any) -> None:
    if _is_int(width) and width > MAX_VALUE_SIZE:
        raise LimitExceeded(f"a width over {MAX_VALUE_SIZE:,}")


def _expandtabs(s: str, tabsize: Any = 8) -> None:
    if _is_int(tabsize) and len(s) + s.count("\t") * max(tabsize, 0) > MAX_VALUE_SIZE:
        raise LimitExceeded(f"expandtabs() would be over {MAX_VALUE_SIZE:,} characters")


def _replace(s: str, old: Any, new: Any, count: Any = -1) -> None:
    if isinstance(old, str) and isinstance(new, str):
        times = s.count(old) if old else len(s) + 1
        if _is_int(count) and count >= 0:
            times = min(times, count)
        if len(s) + times * len(new) > MAX_VALUE_SIZE:
            raise LimitExceeded(f"replace() would be over {MAX_VALUE_SIZE:,} characters")


def _str_join(s: str, items: Any) -> None:
    items = list(items)
    _check_size([s] * len(items) + items, "join() of these items")


# Methods that only read. Those that can grow a string have a check run first.
_GUARDS: dict[str, Callable[..., None]] = {
    "center": _width, "ljust": _width, "rjust": _width, "zfill": _width,
    "expandtabs": _expandtabs, "replace": _replace, "join": _str_join,
}
_STR_METHODS = {
    "capitalize", "casefold", "count", "endswith", "find", "index", "isalnum", "isalpha",
    "isdigit", "isnumeric", "isspace", "islower", "isupper", "lower", "lstrip", "partition",
    "removeprefix", "removesuffix", "rfind", "rindex", "rpartition", "rsplit", "rstrip",
    "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", *_GUARDS,
}
METHODS: dict[type, set[str]] = {
    str: _STR_METHODS,
    dict: {"get", "keys", "values", "items"},
    list: {"index", "count"}, tuple: {"index", "count"},
    set: {"issubset", "issuperset", "isdisjoint", "union", "intersection", "difference"},
    frozenset: {"issubset", "issuperset", "isdisjoint", "union", "intersection", "difference"},
    int: {"bit_length"}, float: {"is_integer"},
}


class Evaluator(EvalWithCompoundTypes):
    """Evaluates one rule's parsed expressions against ``names``, within the bounds above.

    One instance per rule: the work budget and the deadline cover all its items. Set
    ``names["item"]`` between items.
    """

    def __init__(self, names: dict[str, Any], time_limit_s: float) -> None:
        super().__init__(operators=dict(OPERATORS), functions=dict(FUNCTIONS), names=names)
        self.functions = dict(FUNCTIONS)  # the base class adds list, dict...: not ours
        self.time_limit_s = time_limit_s
        self.deadline = time.monotonic() + time_limit_s
        self.work = 0  # nodes plus sizes of values built, for MAX_WORK
        self.evaluated = 0  # nodes, for looking at the clock
        self.iterations = 0
        self.nodes[ast.SetComp] = self._eval_comprehension

    def run(self, tree: ast.expr, text: str = "") -> Any:
        """The value of one parsed expression; ``text`` is its source, for messages."""
        self.expr = text
        self.iterations = 0
        outer, _RUNNING.evaluator = _RUNNING.evaluator, self
        try:
            return self._eval(tree)
        finally:
            _RUNNING.evaluator = outer

    def _eval(self, node: ast.AST) -> Any:
        self.work += 1
        self.evaluated += 1
        if self.evaluated % _CHECK_CLOCK_EVERY == 0:
            self._check_bounds()
        try:
            handler = self.nodes[type(node)]
        except KeyError:
            raise FeatureNotAvailable(f"{type(node).__name__} is not available in a rule "
                                      "expression") from None
        result = handler(node)
        kind = type(result)
        if kind not in _SCALAR_SET:
            if kind not in _DATA:
                self._check_result(result)
            if isinstance(node, _BUILDS):
                size = size_of(result, MAX_VALUE_SIZE, self._check_bounds)
                if size > MAX_VALUE_SIZE:
                    raise LimitExceeded(f"a value it built would be over {MAX_VALUE_SIZE:,} "
                                        "characters or items")
                self.work += size
                self._check_bounds()
        return result

    def _check_bounds(self) -> None:
        if self.work > MAX_WORK:
            raise LimitExceeded(f"its expressions did over {MAX_WORK:,} units of work "
                                "(nodes evaluated, sizes of values built and given to calls)")
        if time.monotonic() > self.deadline:
            raise LimitExceeded(f"it ran past its time limit of {self.time_limit_s:g} s")

    @staticmethod
    def _check_result(result: Any) -> None:
        """simpleeval walks every container a node returns, each time: quadratic over a
        long list. Values here come from records (plain data) or from the functions and
        methods listed above, so only the value itself needs looking at."""
        if isinstance(result, types.ModuleType):
            raise FeatureNotAvailable("modules are not available in a rule expression")
        if callable(result) and not isinstance(result, type) and _disallowed(result):
            raise FeatureNotAvailable("this function is not available in a rule expression")

    def _eval_call(self, node: ast.Call) -> Any:
        """A call, charged before it runs for what it is given (a method also for its
        string or container); a function handed to it counts each of its own calls."""
        if isinstance(node.func, ast.Attribute):
            func = self._eval(node.func)
        elif isinstance(node.func, ast.Name):
            if node.func.id not in self.functions:
                raise FunctionNotDefined(node.func.id, self.expr)
            func = self.functions[node.func.id]
            if _disallowed(func):  # as simpleeval's own call would check
                raise FeatureNotAvailable("this function is not available in a rule expression")
        else:
            raise FeatureNotAvailable("only functions and methods called by name are available")
        args = [self._eval(a) for a in node.args]
        kwargs = dict(self._eval(k) for k in node.keywords)
        cost = sum(map(_length, itertools.chain(args, kwargs.values())))
        if isinstance(func, _Method):
            cost += _length(func.receiver)
        if func is sorted:  # n log n comparisons, each a Python object's
            cost *= max(cost.bit_length(), 1)
        self.work += cost
        self._check_bounds()
        return func(*[self._counted(a) if callable(a) else a for a in args],
                    **{k: self._counted(v) if callable(v) else v for k, v in kwargs.items()})

    def _counted(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` as a call may call it back (``key=``): each call charged and timed."""
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.work += 1 + sum(map(_length, itertools.chain(args, kwargs.values())))
            self._check_bounds()
            return function(*args, **kwargs)

        return counted

    def _eval_attribute(self, node: ast.Attribute) -> Any:
        """A record's field first (``item.comm``), then a method from METHODS."""
        if node.attr.startswith("_"):
            raise FeatureNotAvailable(f"'.{node.attr}': names starting with _ are not available")
        value = self._eval(node.value)
        if isinstance(value, dict) and node.attr in value:
            return value[node.attr]
        if node.attr in METHODS.get(type(value), ()):
            guard = _GUARDS.get(node.attr) if isinstance(value, str) else None
            return _Method(value, getattr(value, node.attr), guard)
        if isinstance(value, dict):
            raise AttributeError(f"'.{node.attr}': no such field in this record (it has "
                                 f"{', '.join(map(str, list(value)[:12]))})")
        raise FeatureNotAvailable(f"'.{node.attr}' is not available on a "
                                  f"{type(value).__name__} value")

    def _eval_formattedvalue(self, node: ast.FormattedValue) -> Any:
        value = self._eval(node.value)
        _check_size(value, "this f-string field")
        if node.format_spec:
            spec = self._eval(node.format_spec)
            if not SPEC.fullmatch(spec):
                raise FeatureNotAvailable(f"'{spec}' is not a plain format spec")
            return format(value, spec)
        return value

    def _eval_comprehension(self, node: Any) -> Any:
        """simpleeval's comprehension, counting iterations against MAX_ITERATIONS."""
        result: Any = {} if isinstance(node, ast.DictComp) else []
        scope: dict[str, Any] = {}
        outer = self.nodes[ast.Name]

        def name(n: ast.Name) -> Any:
            return scope[n.id] if n.id in scope else outer(n)

        def bind(target: ast.AST, value: Any) -> None:
            if isinstance(target, ast.Name):
                scope[target.id] = value
            else:
                for t, v in zip(target.elts, value):  # type: ignore[attr-defined]
                    bind(t, v)

        def loop(index: int) -> None:
            generator = node.generators[index]
            for value in self._eval(generator.iter):
                self.iterations += 1
                if self.iterations > MAX_ITERATIONS:
                    raise IterableTooLong(f"comprehensions ran over {MAX_ITERATIONS:,} items")
                bind(generator.target, value)
                if not all(self._eval(test) for test in generator.ifs):
                    continue
                if index + 1 < len(node.generators):
                    loop(index + 1)
                elif isinstance(result, dict):
                    result[self._eval(node.key)] = self._eval(node.value)
                else:
                    result.append(self._eval(node.elt))

        self.nodes[ast.Name] = name
        try:
            loop(0)
        finally:
            self.nodes[ast.Name] = outer
        return set(result) if isinstance(node, ast.SetComp) else result


def _disallowed(function: Any) -> bool:
    try:
        return function in DISALLOW_FUNCTIONS
    except TypeError:  # unhashable: not one of simpleeval's list
        return False


# Every node type an expression may contain; the loader refuses others with their name.
ALLOWED_NODES: tuple[type, ...] = (
    ast.BoolOp, ast.And, ast.Or, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Compare, ast.Call,
    ast.keyword, ast.Attribute, ast.Subscript, ast.Slice, ast.Name, ast.Load, ast.Store,
    ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp,
    ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.JoinedStr, ast.FormattedValue,
    *OPERATORS,
)


class _Method:
    """A method of a value (``item.comm.startswith``), with the check that runs before
    it (METHODS' guards); a call on it is also charged for the value's length."""

    __slots__ = ("guard", "method", "receiver")

    def __init__(self, receiver: Any, method: Callable[..., Any],
                 guard: Callable[..., None] | None) -> None:
        self.receiver, self.method, self.guard = receiver, method, guard

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.guard is not None:
            self.guard(self.receiver, *args, **kwargs)
        return self.method(*args, **kwargs)
