"""A reference interpreter for the *source* semantics of effect handlers.

This module is the oracle the translator is tested against: it never compiles anything away. It
interprets a tiny first-order effectful language (frozen dataclasses below) directly, in
continuation-passing style, with **real Python continuations** (paper §3.3, rules S-HDo1/S-HDo2,
S-HRet): on `Perform`, the innermost handler that handles the operation is found, and its clause
runs, *outside* that handler (paper §5.2 scoping), with the handler's parameters, the operation's
arguments and a resumption. Calling the resumption re-installs the handler, with the new
parameters, around the rest of the handled computation and returns that handler's output to the
clause; never calling it aborts to whatever followed the `Handle`; calling it twice runs the rest
twice. Loops run one iteration at a time (each iteration is a continuation, so an operation
performed inside a loop captures the remaining iterations too). Every continuation is invoked
through a trampoline, so Python's stack stays as deep as the program text, however long it runs.

Values are numpy scalars (`float64`, `int32`), tuples of them, and the unit `()`. A `Perform` of
an operation whose result is unit (a `Resume` with `value=None`) evaluates to `float64` zero, so
effects can be sequenced with `Let`.

Evaluation order is left to right everywhere: the arguments of `Unary`/`Binary`/`Compare`/
`MakeTuple`/`Perform`/`Resume` and the initial parameters of `Handle`; a `While` evaluates its
condition (effects included) before each iteration and once more before it stops, *and* it stops
after `max_iter` iterations whatever the condition says (the condition is still evaluated then).

Example: the state program of the paper's appendix (read the state 1, store it doubled, return
42) evaluates to the final state and the result:

>>> from tests.effects import reference as R
>>> state = R.Handler(
...     kind="state", param_names=("s",),
...     clauses=(R.Clause("get", (), R.Resume((R.Var("s"),), R.Var("s"))),
...              R.Clause("put", ("v",), R.Resume((R.Var("v"),), None))),
...     ret=R.MakeTuple((R.Var("s"), R.Var("r"))))
>>> body = R.Let("x", R.Perform("get"),
...              R.Let("_", R.Perform("put", (R.Binary("add", R.Var("x"), R.Var("x")),)),
...                    R.Lit(42, "int32")))
>>> tuple(int(v) for v in R.evaluate(R.Handle(state, (R.Lit(1, "int32"),), body)))
(2, 42)

**References:** the paper "Handling JAX", §3.3 (the source semantics) and its first appendix
(the safe_div and state examples).

(Longer than the ~400-line guideline only by the one-line docstrings of the syntax classes.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Union

import numpy as np

from effppl import EffpplError

__all__ = [
    "Binary", "Clause", "Compare", "Cond", "Convert", "Fori", "Handle", "Handler", "Jit", "Let",
    "Lit", "MakeTuple", "Perform", "ReferenceUnhandledError", "Resume", "Scan", "Switch",
    "Unary", "Var", "While", "evaluate",
]

_frozen = dataclasses.dataclass(frozen=True)


# --------------------------------------------------------------------------------------------
# The abstract syntax.
# --------------------------------------------------------------------------------------------


@_frozen
class Lit:
    """A scalar literal of dtype `"float64"` or `"int32"`."""

    value: float | int
    dtype: str = "float64"


@_frozen
class Var:
    name: str


@_frozen
class Unary:
    """`op` in `neg`, `abs`, `sin`, `tanh`."""

    op: str
    x: Expr


@_frozen
class Binary:
    """`op` in `add`, `sub`, `mul`, `max`, `min`, `div` (floor division on integers)."""

    op: str
    x: Expr
    y: Expr


@_frozen
class Compare:
    """`op` in `lt`, `le`, `gt`, `ge`, `eq`, `ne`; the result is `float64` 1.0 or 0.0."""

    op: str
    x: Expr
    y: Expr


@_frozen
class Convert:
    x: Expr
    dtype: str


@_frozen
class MakeTuple:
    items: tuple[Expr, ...]


@_frozen
class Let:
    name: str
    value: Expr
    body: Expr


@_frozen
class Cond:
    """`then` if `pred > 0` else `else_` (`lax.cond`)."""

    pred: Expr
    then: Expr
    else_: Expr


@_frozen
class Switch:
    """Branch `#{k in 1..n-1 : index > k - 0.5}` of `n` (`lax.switch`; NaN picks branch 0)."""

    index: Expr
    branches: tuple[Expr, ...]


@_frozen
class Scan:
    """`lax.scan` over `xs = arange(length)` (float64); `body` sees `carry` and `index` (= x).

    The new carry and the per-iteration output `y` are both the value of `body`. The result is the
    final carry if `out == "carry"`, else `sum_i (i + 1) * ys[i]` summed in order `i = 0, 1, ...`.
    """

    length: int
    init: Expr
    carry: str
    index: str
    body: Expr
    reverse: bool = False
    out: str = "carry"


@_frozen
class Fori:
    """`lax.fori_loop(0, length, ...)`; `index` is the iteration number as float64."""

    length: int
    init: Expr
    carry: str
    index: str
    body: Expr


@_frozen
class While:
    """`lax.while_loop` carrying an int32 iteration counter (seen as float64 `counter`).

    Before each iteration `cond` is evaluated; the loop goes on iff `counter < max_iter` and
    `cond > 0`.
    """

    init: Expr
    carry: str
    counter: str
    cond: Expr
    body: Expr
    max_iter: int


@_frozen
class Jit:
    """A call (`jax.jit`) of `body` on the variables `args` (the only ones it sees)."""

    body: Expr
    args: tuple[str, ...]


@_frozen
class Perform:
    """Performs `op` on `args`; `static` are `(name, python int)` pairs (static kwargs)."""

    op: str
    args: tuple[Expr, ...] = ()
    static: tuple[tuple[str, int], ...] = ()


@_frozen
class Resume:
    """Inside a clause: resume with new parameters and a value (`None`: the unit value)."""

    params: tuple[Expr, ...]
    value: Expr | None


@_frozen
class Clause:
    """The clause for `op`: binds `args` (the operation arguments) and `static` (static kwargs,
    as float64) on top of the handler's parameters and the scope of its `Handle`."""

    op: str
    args: tuple[str, ...]
    body: Expr
    static: tuple[str, ...] = ()


@_frozen
class Handler:
    """`kind` is a label only. `ret` sees the parameters and the body's value as `result`."""

    kind: str
    param_names: tuple[str, ...]
    clauses: tuple[Clause, ...]
    ret: Expr
    result: str = "r"

    def clause_for(self, op: str) -> Clause | None:
        for clause in self.clauses:
            if clause.op == op:
                return clause
        return None


@_frozen
class Handle:
    """Runs `body` under `handler`, whose parameters start at the values of `params`."""

    handler: Handler
    params: tuple[Expr, ...]
    body: Expr


Expr = Union[
    Lit, Var, Unary, Binary, Compare, Convert, MakeTuple, Let, Cond, Switch, Scan, Fori, While,
    Jit, Perform, Resume, Handle,
]


class ReferenceUnhandledError(EffpplError, LookupError):
    """An operation was performed with no handler for it in scope."""


# --------------------------------------------------------------------------------------------
# The interpreter.
# --------------------------------------------------------------------------------------------

_DTYPES = {"float64": np.float64, "int32": np.int32}
_UNARY = {"neg": np.negative, "abs": np.abs, "sin": np.sin, "tanh": np.tanh}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
           "min": np.minimum}
_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}
_RESUME = "$resume"  # the clause's resumption, bound lexically (names cannot contain `$`)

Env = Mapping[str, Any]
# A continuation takes a value and the handler context (outermost frame first) and returns a jump.
Cont = Callable[[Any, tuple], "_Jump | _Done"]


class _Jump(NamedTuple):
    fn: Callable
    args: tuple


class _Done(NamedTuple):
    value: Any


class _Frame(NamedTuple):
    """An installed handler: its current parameters, the scope of its `Handle` (for clauses and
    `ret`) and `k_after`, where its output goes (after the `Handle`, or back into the clause that
    resumed it)."""

    handler: Handler
    params: tuple
    env: Env
    k_after: Cont


class _Resumption(NamedTuple):
    k: Cont  # the continuation of the `Perform`, up to the return clause of the innermost frame
    frame: _Frame  # the handler that handled the operation
    inner: tuple  # the frames between the `Perform` and that handler, as they were then


def evaluate(expr: Expr, env: Env | None = None) -> Any:
    """Runs `expr` by the source semantics.

    **Arguments:**
    - `expr`: the program.
    - `env`: values (numpy scalars) of its free variables.

    **Returns:** its value: a numpy scalar, or a tuple for `MakeTuple`.

    **Raises:** `ReferenceUnhandledError` if an operation is performed with no handler for it.
    """
    with np.errstate(all="ignore"):
        step = _eval(expr, dict(env or {}), (), _finish)
        while isinstance(step, _Jump):
            step = step.fn(*step.args)
    return step.value


def _finish(value, ctx):
    del ctx
    return _Done(value)


def _eval(e: Expr, env: Env, ctx: tuple, k: Cont):
    return _RULES[type(e)](e, env, ctx, k)


def _eval_all(es, env, ctx, k, acc=()):
    """Evaluates `es` left to right, then passes the tuple of their values to `k`."""
    if not es:
        return _Jump(k, (acc, ctx))
    return _eval(es[0], env, ctx,
                 lambda v, c: _eval_all(es[1:], env, c, k, acc + (v,)))


def _apply(fn, k):
    """A continuation taking a tuple of values: `k(fn(*values))`."""
    return lambda vs, c: _Jump(k, (fn(*vs), c))


def _eval_lit(e, env, ctx, k):
    return _Jump(k, (_DTYPES[e.dtype](e.value), ctx))


def _eval_var(e, env, ctx, k):
    return _Jump(k, (env[e.name], ctx))


def _eval_unary(e, env, ctx, k):
    return _eval_all((e.x,), env, ctx, _apply(_UNARY[e.op], k))


def _binary(op, x, y):
    if op == "div":
        return np.floor_divide(x, y) if np.issubdtype(type(x), np.integer) else np.divide(x, y)
    return _BINARY[op](x, y)


def _eval_binary(e, env, ctx, k):
    return _eval_all((e.x, e.y), env, ctx, _apply(lambda x, y: _binary(e.op, x, y), k))


def _eval_compare(e, env, ctx, k):
    return _eval_all((e.x, e.y), env, ctx,
                     _apply(lambda x, y: np.float64(1.0 if _COMPARE[e.op](x, y) else 0.0), k))


def _eval_convert(e, env, ctx, k):
    return _eval_all((e.x,), env, ctx, _apply(_DTYPES[e.dtype], k))


def _eval_tuple(e, env, ctx, k):
    return _eval_all(e.items, env, ctx, k)


def _eval_let(e, env, ctx, k):
    return _eval(e.value, env, ctx, lambda v, c: _eval(e.body, {**env, e.name: v}, c, k))


def _eval_cond(e, env, ctx, k):
    return _eval(e.pred, env, ctx,
                 lambda p, c: _eval(e.then if p > 0 else e.else_, env, c, k))


def _eval_switch(e, env, ctx, k):
    def branch(v, c):
        index = sum(1 for i in range(1, len(e.branches)) if v > i - 0.5)
        return _eval(e.branches[index], env, c, k)
    return _eval(e.index, env, ctx, branch)


def _eval_scan(e, env, ctx, k):
    order = tuple(reversed(range(e.length))) if e.reverse else tuple(range(e.length))

    def step(n, carry, ys, c):  # `ys` maps position -> output, filled in iteration order
        if n == e.length:
            if e.out == "carry":
                return _Jump(k, (carry, c))
            total = np.float64(0.0)
            for i in range(e.length):
                total = total + np.float64(i + 1) * ys[i]
            return _Jump(k, (total, c))
        i = order[n]
        benv = {**env, e.carry: carry, e.index: np.float64(i)}
        return _eval(e.body, benv, c, lambda v, c2: step(n + 1, v, {**ys, i: v}, c2))

    return _eval(e.init, env, ctx, lambda v, c: step(0, v, {}, c))


def _eval_fori(e, env, ctx, k):
    def step(i, carry, c):
        if i == e.length:
            return _Jump(k, (carry, c))
        benv = {**env, e.carry: carry, e.index: np.float64(i)}
        return _eval(e.body, benv, c, lambda v, c2: step(i + 1, v, c2))

    return _eval(e.init, env, ctx, lambda v, c: step(0, v, c))


def _eval_while(e, env, ctx, k):
    def check(i, x, c):
        lenv = {**env, e.carry: x, e.counter: np.float64(i)}

        def decide(p, c2):
            if i < e.max_iter and p > 0:
                return _eval(e.body, lenv, c2, lambda x2, c3: check(i + 1, x2, c3))
            return _Jump(k, (x, c2))

        return _eval(e.cond, lenv, c, decide)

    return _eval(e.init, env, ctx, lambda v, c: check(0, v, c))


def _eval_jit(e, env, ctx, k):
    return _eval(e.body, {name: env[name] for name in e.args}, ctx, k)


def _eval_perform(e, env, ctx, k):
    def handle(args, c):
        for j in reversed(range(len(c))):
            clause = c[j].handler.clause_for(e.op)
            if clause is not None:
                break
        else:
            raise ReferenceUnhandledError(
                f"operation `{e.op}` was performed with no handler for it in scope "
                f"(handlers in scope: {[f.handler.kind for f in c]}).")
        frame = c[j]
        cenv = {**frame.env, **dict(zip(frame.handler.param_names, frame.params)),
                **dict(zip(clause.args, args)),
                **{name: np.float64(value) for name, value in e.static},
                _RESUME: _Resumption(k, frame, c[j + 1:])}
        # The clause runs outside its handler, and its value is the handler's output.
        return _eval(clause.body, cenv, c[:j], frame.k_after)

    return _eval_all(e.args, env, ctx, handle)


def _eval_resume(e, env, ctx, k):
    resumption = env[_RESUME]
    exprs = e.params + (() if e.value is None else (e.value,))

    def go(vs, c):
        n = len(e.params)
        value = np.float64(0.0) if e.value is None else vs[n]
        # Re-install the handler with its new parameters, returning its output to *this* point
        # of the clause, below whatever handlers are in scope here.
        frame = resumption.frame._replace(params=vs[:n], k_after=k)
        return _Jump(resumption.k, (value, c + (frame,) + resumption.inner))

    return _eval_all(exprs, env, ctx, go)


def _eval_handle(e, env, ctx, k):
    def install(params, c):
        frame = _Frame(e.handler, params, env, k)
        return _eval(e.body, env, c + (frame,), _return_clause)
    return _eval_all(e.params, env, ctx, install)


def _return_clause(result, ctx):
    frame = ctx[-1]
    handler = frame.handler
    renv = {**frame.env, **dict(zip(handler.param_names, frame.params)), handler.result: result}
    return _eval(handler.ret, renv, ctx[:-1], frame.k_after)


_RULES = {
    Lit: _eval_lit, Var: _eval_var, Unary: _eval_unary, Binary: _eval_binary,
    Compare: _eval_compare, Convert: _eval_convert, MakeTuple: _eval_tuple, Let: _eval_let,
    Cond: _eval_cond, Switch: _eval_switch, Scan: _eval_scan, Fori: _eval_fori,
    While: _eval_while, Jit: _eval_jit, Perform: _eval_perform, Resume: _eval_resume,
    Handle: _eval_handle,
}
