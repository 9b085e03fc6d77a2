"""Random effectful programs: a hypothesis generator and a compiler to plain JAX.

(Longer than the ~400-line guideline: the compiler, the generator and the printer each walk the
same abstract syntax, and are easier to keep in step side by side.)

Programs are written in the abstract syntax of `tests/effects/reference.py` (the oracle), so each
one can be run two ways: by the reference interpreter (`Program.evaluate`), and compiled by
`to_jax` into an ordinary Python function that uses **only** the public effects API
(`fx.Operation`, `fx.handle`, resume) and plain `jax.lax.cond/switch/scan/fori_loop/while_loop`,
`jax.jit` and `jax.numpy`, which the translator must then compile away.

What `programs()` generates (all values float64 scalars, handler counters int32):
- expressions: literals, variables, `neg/abs/sin/tanh`, `+ - * max min`, comparisons, `let`;
  `cond`, `switch`, `scan` (forward or reverse; the final carry or a weighted sum of the stacked
  outputs), `fori_loop`, `while_loop` (whose condition may perform operations; a counter carried
  in the loop stops it after at most `max_iter` iterations), `jit` calls; nested up to
  `max_nesting` deep, loops at most `max_length` long;
- 1 to `max_handlers` handlers, some around the whole program, others installed anywhere inside
  it (inside loop bodies, branches, jit calls, initial handler parameters) — plus, right inside a
  forwarder, sometimes a handler of the operation it re-performs, which that re-perform must skip
  (paper §5.2 scoping): `state` (get/put),
  `reader` (ask), `writer` (tell with a static `weight`; parameters `(acc: f64, n: i32)`), an
  abortive exception handler (`abort`: raise_ returns a default, possibly logging with tell), a
  resuming one (`recover`: safe_div style), `forward` (re-performs the same operation, or another
  of the same signature, with transformed arguments, for the handlers outside it; optionally
  logs; counts; resumes with a transformed result), `nondet` (choose: resumes twice, combines with + or max) and `post` (ask:
  resumes, then post-processes the handler's output);
- return clauses that combine the result with the final parameters, sometimes with a variable
  closed over from the scope of the `Handle` (a traced value when the program has inputs).

What it never generates, by design of the translator: an operation whose (last, after following
`forward`s) handler is multi-shot or resumes and then post-processes (`nondet`, `post`) performed
inside a loop that handler is outside of. Aborts cross scan/fori/while boundaries freely (the App.
B.2 rewrite), also through forwarding clauses, which re-perform at their top level
(`GenOptions(abort_through_forwarders_in_loops=False)` leaves that case out).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from hypothesis import strategies as st

from . import reference as R

F64, I32 = "float64", "int32"


class OpSpec(NamedTuple):
    n_args: int
    out: str | None  # the result dtype; None for the unit result
    static: tuple[str, ...] = ()


OPS = {
    "get": OpSpec(0, F64), "put": OpSpec(1, None), "ask": OpSpec(0, F64),
    "tell": OpSpec(1, None, ("weight",)), "raise_": OpSpec(1, F64), "choose": OpSpec(0, F64),
    # The paper's worked examples (Appendix A) use integers.
    "throw": OpSpec(0, I32), "iget": OpSpec(0, I32), "iset": OpSpec(1, None),
}


@dataclasses.dataclass(frozen=True)
class Program:
    body: R.Expr
    inputs: tuple[tuple[str, float], ...] = ()

    def args(self) -> tuple[np.float64, ...]:
        return tuple(np.float64(v) for _, v in self.inputs)

    def evaluate(self) -> Any:
        return R.evaluate(self.body, {n: v for (n, _), v in zip(self.inputs, self.args())})

    def to_jax(self, bounded_while: bool = False) -> Callable[..., Any]:
        return to_jax(self.body, tuple(n for n, _ in self.inputs), bounded_while)


# --------------------------------------------------------------------------------------------
# The compiler to plain JAX + the public effects API.
# --------------------------------------------------------------------------------------------


@functools.cache
def operations() -> dict[str, Any]:
    """One `fx.Operation` per entry of `OPS`, created once (operations are compared by identity)."""
    import jax
    import jax.numpy as jnp

    from effppl import effects as fx

    def make(name, spec):
        if spec.out is None:
            return fx.Operation(name, out=lambda *args, **static: ())
        aval = jax.ShapeDtypeStruct((), jnp.dtype(spec.out))
        return fx.Operation(name, out=lambda *args, **static: aval)

    return {name: make(name, spec) for name, spec in OPS.items()}


_BOUNDED_WHILE = contextvars.ContextVar("bounded_while", default=False)


def to_jax(expr: R.Expr, inputs: tuple[str, ...] = (),
           bounded_while: bool = False) -> Callable[..., Any]:
    """Compiles `expr` into `fn(*inputs)`. Call it with `jax_enable_x64` on. With
    `bounded_while`, a `While` becomes `effects.while_loop` with `max_steps=max_iter` (else a
    `lax.while_loop`)."""
    def fn(*args):
        token = _BOUNDED_WHILE.set(bounded_while)
        try:
            return _compile(expr, dict(zip(inputs, args, strict=True)))
        finally:
            _BOUNDED_WHILE.reset(token)
    return fn


_RESUME = "$resume"


def _compile(e, env):
    import jax
    import jax.numpy as jnp
    from jax import lax

    from effppl import effects as fx

    def c(e, env=env):
        return _compile(e, env)

    def f64(x):
        return jnp.asarray(x).astype(jnp.float64)

    match e:
        case R.Lit(value, dtype):
            return jnp.asarray(value, dtype=dtype)
        case R.Var(name):
            return env[name]
        case R.Unary(op, x):
            return {"neg": jnp.negative, "abs": jnp.abs, "sin": jnp.sin, "tanh": jnp.tanh}[op](c(x))
        case R.Binary(op, x, y):
            x, y = c(x), c(y)
            if op == "div":
                return x // y if jnp.issubdtype(x.dtype, jnp.integer) else x / y
            return {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply,
                    "max": jnp.maximum, "min": jnp.minimum}[op](x, y)
        case R.Compare(op, x, y):
            x, y = c(x), c(y)
            return f64({"lt": jnp.less, "le": jnp.less_equal, "gt": jnp.greater,
                        "ge": jnp.greater_equal, "eq": jnp.equal, "ne": jnp.not_equal}[op](x, y))
        case R.Convert(x, dtype):
            return jnp.asarray(c(x)).astype(dtype)
        case R.MakeTuple(items):
            return tuple(c(item) for item in items)
        case R.Let(name, value, body):
            return c(body, {**env, name: c(value)})
        case R.Cond(pred, then, else_):
            p = c(pred)
            return lax.cond(p > 0, lambda: c(then), lambda: c(else_))
        case R.Switch(index, branches):
            v = c(index)
            i = sum(((v > k - 0.5).astype(jnp.int32) for k in range(1, len(branches))),
                    jnp.int32(0))
            return lax.switch(i, [functools.partial(c, b) for b in branches])
        case R.Scan(length, init, carry, index, body, reverse, out):
            def step(x, i):
                v = c(body, {**env, carry: x, index: i})
                return v, v
            final, ys = lax.scan(step, c(init), jnp.arange(length, dtype=jnp.float64),
                                 reverse=reverse)
            if out == "carry":
                return final
            total = jnp.float64(0.0)
            for i in range(length):  # in order, as the interpreter does
                total = total + jnp.float64(i + 1) * ys[i]
            return total
        case R.Fori(length, init, carry, index, body):
            return lax.fori_loop(0, length, lambda i, x: c(body, {**env, carry: x, index: f64(i)}),
                                 c(init))
        case R.While(init, carry, counter, cond, body, max_iter):
            def cond_fn(s):
                i, x = s
                p = c(cond, {**env, carry: x, counter: f64(i)})
                return jnp.logical_and(i < max_iter, p > 0)

            def body_fn(s):
                i, x = s
                return i + 1, c(body, {**env, carry: x, counter: f64(i)})

            if _BOUNDED_WHILE.get():
                return fx.while_loop(cond_fn, body_fn, (jnp.int32(0), c(init)),
                                     max_steps=max_iter)[1]
            return lax.while_loop(cond_fn, body_fn, (jnp.int32(0), c(init)))[1]
        case R.Jit(body, args):
            return jax.jit(lambda *vs: _compile(body, dict(zip(args, vs))))(*[env[a] for a in args])
        case R.Perform(op, args, static):
            out = operations()[op](*[c(a) for a in args], **dict(static))
            return jnp.zeros((), jnp.float64) if OPS[op].out is None else out
        case R.Resume(params, value):
            resume, names = env[_RESUME]
            new_params = _pack(names, [c(p) for p in params])
            return resume(new_params, () if value is None else c(value))
        case R.Handle(handler, params, body):
            return _compile_handle(handler, [c(p) for p in params], body, env, fx)
    raise TypeError(f"not an expression: {e!r}")


def _pack(names, values):
    """Handler parameters as a pytree: `()`, a bare array, or a dict keyed by name."""
    if len(names) == 0:
        return ()
    if len(names) == 1:
        return values[0]
    return dict(zip(names, values, strict=True))


def _unpack(names, p):
    if len(names) == 0:
        return {}
    if len(names) == 1:
        return {names[0]: p}
    return {name: p[name] for name in names}


def _compile_handle(handler, params, body, env, fx):
    import jax.numpy as jnp

    names = handler.param_names

    def make_clause(clause):
        def run(p, *args, resume, **static):  # `resume` is keyword-only in the API's signature
            cenv = {**env, **_unpack(names, p), **dict(zip(clause.args, args, strict=True)),
                    **{k: jnp.asarray(v, jnp.float64) for k, v in static.items()},
                    _RESUME: (resume, names)}
            return _compile(clause.body, cenv)
        return run

    def ret(p, r):
        return _compile(handler.ret, {**env, **_unpack(names, p), handler.result: r})

    default_ret = handler.ret == R.Var(handler.result)
    return fx.handle(lambda: _compile(body, env), params=_pack(names, params),
                     clauses={operations()[cl.op]: make_clause(cl) for cl in handler.clauses},
                     ret=None if default_ret else ret)()


# --------------------------------------------------------------------------------------------
# The generator.
# --------------------------------------------------------------------------------------------

KINDS = ("state", "reader", "writer", "abort", "recover", "forward", "nondet", "post")
TAIL_KINDS = ("state", "reader", "writer", "abort", "recover", "forward")


@dataclasses.dataclass(frozen=True)
class GenOptions:
    kinds: tuple[str, ...] = KINDS  # () for effect-free programs
    max_handlers: int = 3
    max_depth: int = 4
    max_nesting: int = 3  # cond/switch/scan/fori/while/jit inside one another
    max_length: int = 4  # scan/fori lengths, while iteration bounds
    max_general: int = 3  # performs whose handler is not tail-resumptive
    max_multishot: int = 2  # performs handled by `nondet` (each doubles the rest)
    max_inputs: int = 2
    abort_through_forwarders_in_loops: bool = True


class _Site(NamedTuple):
    """An installed handler, as the generator sees it."""

    kind: str
    modes: dict[str, str]  # op -> "tail" | "abort" | "general" | "forward:<re-performed op>"
    loops: int  # how many loops enclose the `Handle`


class _Scope(NamedTuple):
    vars: tuple[str, ...]
    sites: tuple[_Site, ...]  # outermost first
    loops: int = 0
    nesting: int = 0
    favour: tuple[str, ...] = ()  # operations to perform more often here

    def bind(self, *names):
        return self._replace(vars=self.vars + names)


_LITERALS = (0.0, 1.0, -1.0, 0.5, 2.0, -2.0, 1.5, -0.5, 3.0, -3.0)


class _Gen:
    def __init__(self, draw, options: GenOptions, spare_handlers: int):
        self.draw = draw
        self.opts = options
        self.spare = spare_handlers
        self.general_left = options.max_general
        self.multishot_left = options.max_multishot
        self.uids = itertools.count()

    # -- helpers ----------------------------------------------------------------------------
    def pick(self, choices):
        return self.draw(st.sampled_from(choices))

    def flip(self):
        return self.draw(st.booleans())

    def name(self, prefix):
        return f"{prefix}{next(self.uids)}"

    def lit(self):
        return R.Lit(self.pick(_LITERALS))

    def final(self, op, scope):
        """`(site, mode, forwarded)`: the handler that finally handles `op` performed in `scope`,
        following forwarding clauses outward (each may re-perform another operation); or None."""
        forwarded = False
        for site in reversed(scope.sites):
            mode = site.modes.get(op)
            if mode is None:
                continue
            if mode.startswith("forward:"):
                op, forwarded = mode.removeprefix("forward:"), True
                continue
            return site, mode, forwarded
        return None

    def resolve(self, op, scope):
        """How `op` performed in `scope` is finally handled: a mode, or None if not allowed."""
        found = self.final(op, scope)
        if found is None:
            return None
        site, mode, forwarded = found
        crossed = site.loops < scope.loops
        if mode == "abort" and forwarded and crossed:
            return mode if self.opts.abort_through_forwarders_in_loops else None
        if mode == "general" and crossed:
            return None
        return mode

    def multishot(self, op, scope):
        found = self.final(op, scope)
        return found is not None and found[0].kind == "nondet"

    def performable(self, scope):
        ops = sorted({op for site in scope.sites for op in site.modes})
        ok = []
        for op in ops:
            mode = self.resolve(op, scope)
            if mode is None or (mode in ("abort", "general") and self.general_left <= 0):
                continue
            if self.multishot(op, scope) and self.multishot_left <= 0:
                continue
            ok.append(op)
        return ok

    # -- expressions ------------------------------------------------------------------------
    def expr(self, scope: _Scope, depth: int) -> R.Expr:
        ops = self.performable(scope)
        choices = ["lit"] + ["var"] * 2 * bool(scope.vars) + ["perform"] * 3 * bool(ops)
        if depth > 0:
            choices += ["unary", "binary", "binary", "compare", "let", "let"]
            if scope.nesting < self.opts.max_nesting:
                choices += ["cond", "cond", "switch", "scan", "scan", "fori", "while", "while",
                            "jit"]
            if self.spare > 0 and self.opts.kinds:  # more often where it is more interesting
                choices += ["handle"] * (2 + 2 * min(scope.loops, 1))
        return getattr(self, "gen_" + self.pick(choices))(scope, depth, ops)

    def sub(self, scope, depth):
        if depth <= 0:  # arguments of a perform at depth 0: a literal or a variable
            return self.gen_var(scope, 0, ()) if scope.vars and self.flip() else self.lit()
        return self.expr(scope, depth - 1)

    def gen_lit(self, scope, depth, ops):
        return self.lit()

    def gen_var(self, scope, depth, ops):
        return R.Var(self.pick(scope.vars))

    def gen_unary(self, scope, depth, ops):
        return R.Unary(self.pick(("neg", "abs", "sin", "tanh")), self.sub(scope, depth))

    def gen_binary(self, scope, depth, ops):
        op = self.pick(("add", "sub", "mul", "max", "min"))
        return R.Binary(op, self.sub(scope, depth), self.sub(scope, depth))

    def gen_compare(self, scope, depth, ops):
        op = self.pick(("lt", "le", "gt", "ge", "eq", "ne"))
        return R.Compare(op, self.sub(scope, depth), self.sub(scope, depth))

    def gen_let(self, scope, depth, ops):
        name = self.name("v")
        value = self.sub(scope, depth)
        return R.Let(name, value, self.sub(scope.bind(name), depth))

    def gen_perform(self, scope, depth, ops):
        favoured = [op for op in ops if op in scope.favour]
        op = self.pick(favoured) if favoured and self.flip() else self.pick(ops)
        mode = self.resolve(op, scope)
        if mode in ("abort", "general"):
            self.general_left -= 1
        if mode == "general" and self.multishot(op, scope):
            self.multishot_left -= 1
        spec = OPS[op]
        args = tuple(self.sub(scope, depth) for _ in range(spec.n_args))
        static = tuple((s, self.draw(st.integers(1, 3))) for s in spec.static)
        perform = R.Perform(op, args, static)
        if op == "raise_" and depth > 0 and self.draw(st.integers(0, 3)) > 0:  # mostly guarded
            nested = scope._replace(nesting=scope.nesting + 1)
            return R.Cond(self.gen_compare(scope, depth, ops), perform, self.sub(nested, depth))
        return perform

    def nested(self, scope):
        return scope._replace(nesting=scope.nesting + 1)

    def gen_cond(self, scope, depth, ops):
        pred = self.sub(scope, depth)
        inner = self.nested(scope)
        return R.Cond(pred, self.sub(inner, depth), self.sub(inner, depth))

    def gen_switch(self, scope, depth, ops):
        index = self.sub(scope, depth)
        inner = self.nested(scope)
        n = self.draw(st.integers(2, 3))
        return R.Switch(index, tuple(self.sub(inner, depth) for _ in range(n)))

    def loop_scope(self, scope, *names):
        return scope.bind(*names)._replace(loops=scope.loops + 1, nesting=scope.nesting + 1)

    def body(self, scope, depth):
        """A loop body: sometimes a handler installed inside the loop, around it."""
        if self.spare > 0 and self.opts.kinds and self.flip():
            self.spare -= 1
            return self.handled(scope, 1, max(depth - 1, 0))
        return self.sub(scope, depth)

    def gen_scan(self, scope, depth, ops):
        length = self.draw(st.integers(1, self.opts.max_length))
        init = self.sub(scope, depth)
        carry, index = self.name("c"), self.name("i")
        body = self.body(self.loop_scope(scope, carry, index), depth)
        return R.Scan(length, init, carry, index, body, reverse=self.flip(),
                      out=self.pick(("carry", "ys")))

    def gen_fori(self, scope, depth, ops):
        length = self.draw(st.integers(1, self.opts.max_length))
        init = self.sub(scope, depth)
        carry, index = self.name("c"), self.name("i")
        return R.Fori(length, init, carry, index,
                      self.body(self.loop_scope(scope, carry, index), depth))

    def gen_while(self, scope, depth, ops):
        max_iter = self.draw(st.integers(1, self.opts.max_length))
        init = self.sub(scope, depth)
        carry, counter = self.name("c"), self.name("n")
        inner = self.loop_scope(scope, carry, counter)
        cond = self.sub(inner, depth)
        return R.While(init, carry, counter, cond, self.body(inner, depth), max_iter)

    def gen_jit(self, scope, depth, ops):
        return R.Jit(self.sub(self.nested(scope), depth), scope.vars)

    def gen_handle(self, scope, depth, ops):
        self.spare -= 1
        return self.handled(scope, 1, max(depth - 1, 0))

    # -- handlers ---------------------------------------------------------------------------
    def handled(self, scope, n, depth):
        """`n` handlers around an expression of depth `depth`."""
        if n == 0:
            return self.expr(scope, depth)
        kinds = [k for k in self.opts.kinds if k != "forward"]
        if "forward" in self.opts.kinds and self.forwardable(scope):
            kinds += ["forward"] * 3  # only possible inside another handler: favour it there
        kind = self.pick(kinds)
        handler, params, modes = getattr(self, "handler_" + kind)(scope)
        inner = scope._replace(sites=scope.sites + (_Site(kind, modes, scope.loops),))
        target = next(iter(modes.values())).removeprefix("forward:") if kind == "forward" else None
        sandwich = [k for k in self.opts.kinds
                    if target in _HANDLES.get(k, ()) and target not in modes]
        if sandwich and self.draw(st.integers(0, 3)) > 0:
            # A handler of the forwarded operation inside the forwarder: an operation performed
            # in the forwarder's clause must skip it (paper §5.2), which only matters then, and
            # only when the body performs the forwarder's operation: favour it.
            kind = self.pick(sandwich)
            h2, params2, modes2 = getattr(self, "handler_" + kind)(inner)
            inner2 = inner._replace(sites=inner.sites + (_Site(kind, modes2, scope.loops),),
                                    favour=inner.favour + tuple(modes))
            body = R.Handle(h2, params2, self.handled(inner2, n - 1, depth))
        else:
            body = self.handled(inner, n - 1, depth)
        return R.Handle(handler, params, body)

    def forwardable(self, scope):
        return [op for op in sorted({op for s in scope.sites for op in s.modes})
                if self.resolve(op, scope) is not None]

    def ret(self, scope, result, extra=()):
        """`result` plus some of `extra` (parameters) and maybe a variable closed over; it may
        also log the result for the handlers outside."""
        terms = [e for e in extra if self.flip()]
        if scope.vars and self.draw(st.integers(0, 3)) == 0:
            terms.append(R.Var(self.pick(scope.vars)))
        out = R.Var(result)
        for t in terms:
            out = R.Binary(self.pick(("add", "sub")), out, t)
        return self.log(scope, R.Var(result), out)

    def handler_state(self, scope):
        s, r = self.name("s"), self.name("r")
        clauses = (R.Clause("get", (), R.Resume((R.Var(s),), R.Var(s))),
                   R.Clause("put", ("v",), R.Resume((R.Var("v"),), None)))
        h = R.Handler("state", (s,), clauses, self.ret(scope, r, (R.Var(s),)), r)
        return h, (self.sub(scope, 1),), {"get": "tail", "put": "tail"}

    def handler_reader(self, scope):
        e, r = self.name("e"), self.name("r")
        h = R.Handler("reader", (e,), (R.Clause("ask", (), R.Resume((R.Var(e),), R.Var(e))),),
                      self.ret(scope, r), r)
        return h, (self.sub(scope, 1),), {"ask": "tail"}

    def handler_writer(self, scope):
        acc, n, r = self.name("acc"), self.name("cnt"), self.name("r")
        new_acc = R.Binary("add", R.Var(acc), R.Binary("mul", R.Var("weight"), R.Var("v")))
        new_n = R.Binary("add", R.Var(n), R.Lit(1, I32))
        clause = R.Clause("tell", ("v",), R.Resume((new_acc, new_n), None), static=("weight",))
        ret = self.ret(scope, r, (R.Var(acc), R.Convert(R.Var(n), F64)))
        h = R.Handler("writer", (acc, n), (clause,), ret, r)
        return h, (self.lit(), R.Lit(0, I32)), {"tell": "tail"}

    def payload(self, scope, var):
        out = R.Binary("add", R.Binary("mul", R.Var(var), R.Lit(self.pick((0.0, 1.0, -1.0, 0.5)))),
                       self.lit())
        if scope.vars and self.flip():
            out = R.Binary("add", out, R.Var(self.pick(scope.vars)))
        return out

    def log(self, scope, value, body):
        """`tell(value)` for the handlers outside, then `body` (when some writer can hear it)."""
        if self.resolve("tell", scope) == "tail" and self.flip():
            return R.Let(self.name("_"), R.Perform("tell", (value,), (("weight", 1),)), body)
        return body

    def handler_abort(self, scope):
        r = self.name("r")
        body = self.log(scope, R.Var("exc"), self.payload(scope, "exc"))
        h = R.Handler("abort", (), (R.Clause("raise_", ("exc",), body),), self.ret(scope, r), r)
        return h, (), {"raise_": "abort"}

    def handler_recover(self, scope):
        r = self.name("r")
        resume = R.Resume((), self.payload(scope, "exc"))
        clause = R.Clause("raise_", ("exc",), self.log(scope, R.Var("exc"), resume))
        return R.Handler("recover", (), (clause,), self.ret(scope, r), r), (), {"raise_": "tail"}

    def handler_nondet(self, scope):
        r = self.name("r")
        both = R.Binary(self.pick(("add", "max")), R.Resume((), self.lit()), R.Resume((), self.lit()))
        h = R.Handler("nondet", (), (R.Clause("choose", (), both),), self.ret(scope, r), r)
        return h, (), {"choose": "general"}

    def handler_post(self, scope):
        e, r = self.name("e"), self.name("r")
        resumed = R.Resume((R.Binary("add", R.Var(e), R.Lit(1.0)),), R.Var(e))
        body = R.Binary("add", R.Binary("mul", resumed, R.Lit(0.5)), self.lit())
        h = R.Handler("post", (e,), (R.Clause("ask", (), body),), self.ret(scope, r), r)
        return h, (self.sub(scope, 1),), {"ask": "general"}

    def handler_forward(self, scope):
        """Handles `op` by re-performing `target` (the same operation, or another one of the same
        signature: the scoping of §5.2 matters then) for the handlers outside, with transformed
        arguments; counts, maybe logs, and resumes with the transformed result."""
        target = self.pick(self.forwardable(scope))
        others = [op for op in sorted(_FORWARDABLE)
                  if op != target and _signature(op) == _signature(target)]
        op = self.pick(others) if others and self.draw(st.integers(0, 3)) > 0 else target
        spec, target_spec = OPS[op], OPS[target]
        n, r, t = self.name("fw"), self.name("r"), self.name("t")
        args = ("a",) * spec.n_args

        def transform(x):
            return self.pick((x, R.Binary("mul", x, R.Lit(2.0)), R.Binary("add", x, R.Lit(1.0))))

        fwd_args = tuple(transform(R.Var(a)) for a in args)
        if spec.static:  # tell: fold the incoming weight into the value
            fwd_args = tuple(R.Binary("mul", a, R.Var("weight")) for a in fwd_args)
        static = tuple((name, self.draw(st.integers(1, 3))) for name in target_spec.static)
        value = None if spec.out is None else transform(R.Var(t))
        resume = R.Resume((R.Binary("add", R.Var(n), R.Lit(1, I32)),), value)
        logged = R.Var(t) if spec.out is not None else (R.Var("a") if args else R.Lit(1.0))
        body = resume if target == "tell" else self.log(scope, logged, resume)
        body = R.Let(t, R.Perform(target, fwd_args, static), body)
        clause = R.Clause(op, args, body, static=spec.static)
        h = R.Handler("forward", (n,), (clause,),
                      self.ret(scope, r, (R.Convert(R.Var(n), F64),)), r)
        return h, (R.Lit(0, I32),), {op: "forward:" + target}


_HANDLES = {"state": ("get", "put"), "reader": ("ask",), "writer": ("tell",),
            "abort": ("raise_",), "recover": ("raise_",), "nondet": ("choose",), "post": ("ask",)}
_FORWARDABLE = ("get", "put", "ask", "tell", "raise_", "choose")


def _signature(op):
    return OPS[op].n_args, OPS[op].out


@st.composite
def programs(draw, options: GenOptions = GenOptions()) -> Program:
    """A hypothesis strategy of closed, well-typed, terminating `Program`s (see module doc)."""
    n_inputs = draw(st.integers(0, options.max_inputs))
    inputs = tuple((f"x{i}", draw(st.sampled_from(_LITERALS))) for i in range(n_inputs))
    counts = [1] + [n for n in range(2, options.max_handlers + 1) for _ in range(n)]
    n_handlers = draw(st.sampled_from(counts)) if options.kinds else 0  # shrinks towards 1
    n_top = draw(st.integers(min(1, n_handlers), min(n_handlers, 2)))
    gen = _Gen(draw, options, spare_handlers=n_handlers - n_top)
    scope = _Scope(vars=tuple(n for n, _ in inputs), sites=())
    return Program(gen.handled(scope, n_top, options.max_depth), inputs)


# --------------------------------------------------------------------------------------------
# Pretty-printing (for hypothesis' notes on a failing example).
# --------------------------------------------------------------------------------------------

_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">",
            "ge": ">=", "eq": "==", "ne": "!="}


def show(x: Program | R.Expr) -> str:
    """A readable, indented rendering of a program."""
    if isinstance(x, Program):
        inputs = ", ".join(f"{n}={v}" for n, v in x.inputs)
        return f"program({inputs}):\n  " + _show(x.body, "  ")
    return _show(x, "")


def _show(e, ind):  # noqa: C901 -- one case per node
    nl = "\n" + ind + "  "

    def s(x, extra=""):
        return _show(x, ind + "  " + extra)

    match e:
        case R.Lit(value, dtype):
            return f"{value}" + ("i" if dtype == I32 else "")
        case R.Var(name):
            return name
        case R.Unary(op, x):
            return f"{op}({s(x)})"
        case R.Binary(op, x, y) | R.Compare(op, x, y) if op in _SYMBOLS:
            return f"({s(x)} {_SYMBOLS[op]} {s(y)})"
        case R.Binary(op, x, y):
            return f"{op}({s(x)}, {s(y)})"
        case R.Convert(x, dtype):
            return f"{dtype}({s(x)})"
        case R.MakeTuple(items):
            return "(" + ", ".join(s(i) for i in items) + ")"
        case R.Let(name, value, body):
            return f"let {name} = {s(value)}\n{ind}{_show(body, ind)}"
        case R.Cond(pred, then, else_):
            return f"cond {s(pred)}:{nl}{s(then)}\n{ind}else:{nl}{s(else_)}"
        case R.Switch(index, branches):
            return f"switch {s(index)}:" + "".join(f"{nl}case {k}: {s(b, '  ')}"
                                                   for k, b in enumerate(branches))
        case R.Scan(length, init, carry, index, body, reverse, out):
            rev = " reversed" if reverse else ""
            return (f"scan{rev} {index} < {length} from {carry} = {s(init)} -> {out}:"
                    f"{nl}{s(body)}")
        case R.Fori(length, init, carry, index, body):
            return f"fori {index} < {length} from {carry} = {s(init)}:{nl}{s(body)}"
        case R.While(init, carry, counter, cond, body, max_iter):
            return (f"while {counter} < {max_iter} and {s(cond)} from {carry} = {s(init)}:"
                    f"{nl}{s(body)}")
        case R.Jit(body, args):
            return f"jit({', '.join(args)}):{nl}{s(body)}"
        case R.Perform(op, args, static):
            items = [s(a) for a in args] + [f"{k}={v}" for k, v in static]
            return f"{op}!({', '.join(items)})"
        case R.Resume(params, value):
            value = "()" if value is None else s(value)
            return f"resume(({', '.join(s(p) for p in params)}), {value})"
        case R.Handle(handler, params, body):
            init = ", ".join(f"{n}={s(p)}" for n, p in zip(handler.param_names, params))
            clauses = "".join(
                f"{nl}{cl.op}({', '.join(cl.args + cl.static)}) -> {s(cl.body, '  ')}"
                for cl in handler.clauses)
            return (f"handle[{handler.kind}]({init}){clauses}"
                    f"{nl}return {handler.result} -> {s(handler.ret, '  ')}"
                    f"\n{ind}in:{nl}{s(body)}")
    return repr(e)
