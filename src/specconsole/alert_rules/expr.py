"""The alert condition language: a small, safe expression over one host's figures.

A rule's ``when`` is read with Python's own parser (:func:`ast.parse`, mode ``eval``) and then
checked against a whitelist: only the nodes below are allowed, every name must be a known
figure (``training.step``, ``gpu.util_max``: :data:`specconsole.alerts.figures.FIGURES`) and
every call a function of :data:`FUNCTIONS`. It is then evaluated by :func:`evaluate`, a walk over
that tree: never ``eval()``, no attribute access on objects, no imports, no loops.

::

    training.running and host.reachable and unchanged(training.step)
    not finite(training.loss)
    sglang.accept_len < 0.8 * eval.accept_len and sglang.running_reqs > 0
    sglang.state in ("down", "error", "hung")

Allowed: figures, numbers, strings, ``true``/``false`` (or ``True``/``False``), tuples of
constants (for ``in``), ``+ - * /``, unary ``-``, comparisons (``< <= > >= == != in``, chained),
``and``, ``or``, ``not``, and the functions:

``finite(x)``
    x is a finite number (``nan`` and ``inf`` are not).
``unchanged(x)``
    x has the same value as at the previous evaluation (for this rule and host). With the
    rule's ``for_s`` this is "x did not change for for_s seconds".
``median(x, seconds)``
    the median of x's values over the last ``seconds`` (one value per new sample).

A figure that is not known now (no sample yet, no GPU readings, no eval baseline) is *unknown*
(``None``) and so is everything computed from it; ``and``/``or``/``not`` follow three-valued
logic (``unknown and false`` is false, ``unknown or true`` is true) and a condition that is
unknown never fires.
"""

from __future__ import annotations

import ast
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: the functions of the language and how many arguments each takes
FUNCTIONS: dict[str, int] = {"finite": 1, "unchanged": 1, "median": 2}
#: the longest ``median`` window (a day): the history is kept per host, so it is bounded
MAX_WINDOW_S = 86400.0
#: the most characters a condition may have (it is a config value, shown in errors)
MAX_CHARS = 500

_CMP: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_BIN: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b if b else math.copysign(math.inf, a) if a else math.nan,
}
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_BOOLS = {"true": True, "false": False}


class ExprError(ValueError):
    """A condition the language does not allow: ``problem`` and ``fix``, one line each."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem} (fix: {fix})")
        self.problem, self.fix = problem, fix


@dataclass(frozen=True)
class Condition:
    """A checked condition: its text, its tree, the figures it reads and its longest window."""

    text: str
    tree: ast.expr
    figures: tuple[str, ...]
    window_s: float = 0.0
    #: it calls unchanged() or median(), whose answers depend on earlier evaluations (its memory);
    #: without them its truth is a function of the figures it reads
    stateful: bool = False
    #: the figure (or number) an alert reports as its value: a comparison's left side, else the
    #: first function's argument, else None
    value_node: ast.expr | None = None
    #: the tree compiled to closures (:func:`_compile`): what :func:`evaluate` runs
    run: Callable[[_Ctx], Any] = field(default=lambda _c: None, repr=False, compare=False)
    value_run: Callable[[_Ctx], Any] | None = field(default=None, repr=False, compare=False)


@dataclass
class Memory:
    """What the stateful functions remember for one rule on one host between evaluations."""

    previous: dict[int, object] = field(default_factory=dict)  # unchanged(): node id -> value
    points: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)  # median(): figure -> (at, v)


def parse(text: str, known: Mapping[str, object]) -> Condition:
    """Check ``text`` against the language and the ``known`` figure names; raises :class:`ExprError`."""
    if not text.strip():
        raise ExprError("the condition is empty", 'write one, e.g. when = "gpu.util_max < 5"')
    if len(text) > MAX_CHARS:
        raise ExprError(f"the condition has {len(text)} characters (at most {MAX_CHARS})", "shorten it")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        raise ExprError(f"not a valid condition: {err.msg} at column {err.offset or 0}",
                        'write e.g. "training.running and unchanged(training.step)"') from None
    checker = _Checker(known)
    checker.visit(tree)
    value_node = _value_node(tree)
    return Condition(text=text, tree=tree, figures=tuple(dict.fromkeys(checker.figures)),
                     window_s=checker.window_s, stateful=checker.stateful, value_node=value_node, run=_compile(tree),
                     value_run=_compile(value_node, stateless=True) if value_node is not None else None)


def figure_name(node: ast.AST) -> str | None:
    """``training.step`` for the tree of ``training.step``; None for anything else."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self, known: Mapping[str, object]) -> None:
        self.known = known
        self.figures: list[str] = []
        self.window_s = 0.0
        self.stateful = False

    def generic_visit(self, node: ast.AST) -> None:
        raise ExprError(f"{_shown(node)} is not allowed in a condition",
                        "use figures, numbers, + - * /, comparisons, and/or/not, finite(), unchanged(), median()")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = figure_name(node)
        if name is None or name not in self.known:
            import difflib  # only for the error: not on the config's import path

            close = difflib.get_close_matches(_shown(node), list(self.known), n=1)
            raise ExprError(f"unknown figure {_shown(node)!r}" + (f" (did you mean {close[0]}?)" if close else ""),
                            f"use one of {', '.join(sorted(self.known))}")
        self.figures.append(name)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in _BOOLS:
            return
        raise ExprError(f"unknown name {node.id!r}",
                        f"use a figure such as training.step ({', '.join(sorted(self.known))})")

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, bool | int | float | str):
            raise ExprError(f"{node.value!r} is not a number or string", "write a number, e.g. 0.8")

    def visit_Tuple(self, node: ast.Tuple) -> None:
        if not all(isinstance(e, ast.Constant) for e in node.elts):
            raise ExprError("a tuple may hold only numbers and strings", 'write e.g. ("down", "hung")')
        for e in node.elts:
            self.visit(e)

    def visit_List(self, node: ast.List) -> None:
        self.visit_Tuple(ast.Tuple(elts=node.elts))

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        for v in node.values:
            self.visit(v)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if not isinstance(node.op, ast.Not | ast.USub):
            raise ExprError(f"the operator in {_shown(node)!r} is not allowed", "use not or -")
        self.visit(node.operand)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) not in _BIN:
            raise ExprError(f"the operator in {_shown(node)!r} is not allowed", "use + - * /")
        self.visit(node.left)
        self.visit(node.right)

    def visit_Compare(self, node: ast.Compare) -> None:
        for op in node.ops:
            if type(op) not in _CMP:
                raise ExprError(f"the comparison in {_shown(node)!r} is not allowed", "use < <= > >= == != in")
        self.visit(node.left)
        for c in node.comparators:
            self.visit(c)

    def visit_Call(self, node: ast.Call) -> None:
        fn = node.func.id if isinstance(node.func, ast.Name) else _shown(node.func)
        if fn not in FUNCTIONS:
            raise ExprError(f"unknown function {fn!r}", f"use {', '.join(FUNCTIONS)}")
        self.stateful = self.stateful or fn in ("unchanged", "median")
        if node.keywords or len(node.args) != FUNCTIONS[fn]:
            raise ExprError(f"{fn}() takes {FUNCTIONS[fn]} argument(s)",
                            "write e.g. median(sglang.tokens_per_s, 600)" if fn == "median" else f"write {fn}(x)")
        if fn == "median":
            arg, window = node.args
            if figure_name(arg) is None:
                raise ExprError("median()'s first argument must be a figure",
                                "write e.g. median(sglang.tokens_per_s, 600)")
            if not (isinstance(window, ast.Constant) and isinstance(window.value, int | float)
                    and not isinstance(window.value, bool) and 0 < window.value <= MAX_WINDOW_S):
                raise ExprError(f"median()'s window must be a number of seconds, > 0 and <= {MAX_WINDOW_S:g}",
                                "write e.g. median(sglang.tokens_per_s, 600)")
            self.window_s = max(self.window_s, float(window.value))
        for a in node.args:
            self.visit(a)

    visit_Expression = visit_Expr = generic_visit


def _shown(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # an unparseable fragment: its kind is enough
        return type(node).__name__


def _value_node(tree: ast.expr) -> ast.expr | None:
    calls: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            return node.left
        if isinstance(node, ast.Call) and node.args:
            calls.append(node.args[0])
    return calls[0] if calls else None


# ------------------------------------------------------------------------------------- evaluation

Figures = Mapping[str, object]


@dataclass
class _Ctx:
    figures: Figures
    memory: Memory
    now: float
    fresh: Callable[[str], bool]


def evaluate(cond: Condition, figures: Figures, memory: Memory, now: float,
             fresh: Callable[[str], bool] = lambda _name: True) -> bool | None:
    """The condition's truth on ``figures`` (None: unknown). ``fresh(name)``: the figure comes from
    a sample ``median`` has not counted yet (each sample is counted once)."""
    result = cond.run(_Ctx(figures, memory, now, fresh))
    return None if result is None else bool(result)


def value_of(cond: Condition, figures: Figures, *, whole: bool = False) -> float | None:
    """The number an alert of ``cond`` reports (finite, else None): its :attr:`~Condition.value_node`,
    or with ``whole`` the whole expression (a rule's own ``value``)."""
    run = cond.run if whole else cond.value_run
    if run is None:
        return None
    v = run(_Ctx(figures, Memory(), 0.0, lambda _n: False))
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


Compiled = Callable[[_Ctx], Any]


def _compile(node: ast.expr, stateless: bool = False) -> Compiled:
    """``node`` (checked by :class:`_Checker`) as a closure over a :class:`_Ctx`: the tree is walked
    once, here, not at every evaluation. ``stateless``: unchanged() and median() give None (an
    alert's reported value must not touch the rule's memory)."""
    if isinstance(node, ast.Constant):
        const = node.value
        return lambda _c: const
    if isinstance(node, ast.Name):
        flag = _BOOLS.get(node.id)
        return lambda _c: flag
    if isinstance(node, ast.Attribute):
        name = figure_name(node) or ""
        return lambda c: c.figures.get(name)
    if isinstance(node, ast.Tuple | ast.List):
        items = tuple(e.value for e in node.elts if isinstance(e, ast.Constant))
        return lambda _c: items
    if isinstance(node, ast.BoolOp):  # every operand evaluated: unchanged() must see each tick
        parts = [_compile(v, stateless) for v in node.values]
        combine = _and if isinstance(node.op, ast.And) else _or
        return lambda c: combine([p(c) for p in parts])
    if isinstance(node, ast.UnaryOp):
        operand = _compile(node.operand, stateless)
        if isinstance(node.op, ast.Not):
            return lambda c: None if (v := operand(c)) is None else not v
        return lambda c: -v if _number(v := operand(c)) else None
    if isinstance(node, ast.BinOp):
        op, left, right = _BIN[type(node.op)], _compile(node.left, stateless), _compile(node.right, stateless)

        def binop(c: _Ctx) -> Any:
            a, b = left(c), right(c)
            return op(a, b) if _number(a) and _number(b) else None

        return binop
    if isinstance(node, ast.Compare):
        return _compile_compare(node, stateless)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return _compile_call(node.func.id, node, stateless)
    return lambda _c: None


def _compile_compare(node: ast.Compare, stateless: bool) -> Compiled:
    operands = [_compile(n, stateless) for n in (node.left, *node.comparators)]
    ops = [(_CMP[type(op)], isinstance(op, _ORDER)) for op in node.ops]
    if len(ops) == 1:  # the usual case: a < b
        (op1, ordered1), left1, right1 = ops[0], operands[0], operands[1]

        def compare1(c: _Ctx) -> bool | None:
            a, b = left1(c), right1(c)
            if a is None or b is None or (ordered1 and not (_number(a) and _number(b))):
                return None
            try:
                return bool(op1(a, b))
            except TypeError:
                return None

        return compare1

    def compare(c: _Ctx) -> bool | None:
        values = [f(c) for f in operands]
        results: list[bool | None] = []
        for (op, ordered), left, right in zip(ops, values, values[1:], strict=False):
            if left is None or right is None or (ordered and not (_number(left) and _number(right))):
                results.append(None)
                continue
            try:
                results.append(bool(op(left, right)))
            except TypeError:  # "a" in 3: not comparable
                results.append(None)
        return _and(results)

    return compare


def _compile_call(fn: str, node: ast.Call, stateless: bool) -> Compiled:
    arg = _compile(node.args[0], stateless)
    if fn == "finite":
        return lambda c: math.isfinite(v) if _number(v := arg(c)) else None
    if stateless:
        return lambda _c: None
    if fn == "unchanged":
        key = id(node)

        def unchanged(c: _Ctx) -> bool | None:
            value = arg(c)
            before = c.memory.previous.get(key)
            c.memory.previous[key] = value
            return None if value is None or before is None else value == before

        return unchanged
    name = figure_name(node.args[0]) or ""  # median(figure, window)
    raw = node.args[1].value if isinstance(node.args[1], ast.Constant) else 0.0
    window = float(raw) if isinstance(raw, int | float) else 0.0

    def median(c: _Ctx) -> float | None:
        value = arg(c)
        points = c.memory.points.setdefault(name, deque())
        if _number(value) and math.isfinite(value) and c.fresh(name):
            points.append((c.now, float(value)))
        while points and points[0][0] < c.now - window:
            points.popleft()
        return _median([v for _, v in points]) if points else None

    return median


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _and(values: list[Any]) -> bool | None:
    unknown = False
    for v in values:
        if v is None:
            unknown = True
        elif not v:
            return False
    return None if unknown else True


def _or(values: list[Any]) -> bool | None:
    unknown = False
    for v in values:
        if v is None:
            unknown = True
        elif v:
            return True
    return None if unknown else False


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
