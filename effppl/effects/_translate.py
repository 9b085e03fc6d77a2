"""The translator: compiles handlers away by re-tracing a jaxpr (paper §4, §5, App. B).

The interpreter walks a jaxpr under a fresh trace and re-binds each equation. It carries

* `H`, the handler context: a tuple of `Frame`s (innermost last), each a handler's static spec,
  its *current* parameters (tracers of the output trace) and its closed-over values;
* `K`, the continuation list: `Cont(fn)` entries, `RET` markers (one per frame of `H` above the
  nearest `BARRIER`, paper's return clauses) and, at the bottom, a `BARRIER` where a region ends.

Reaching a `BARRIER` returns the answer `(outs, H)` to whoever started the region. A region is a
loop body, a `cond` branch, an inlined call, a handled body or a tail-resumptive clause. Every rule
first tries to translate its region in place (tail-resumptive clauses only, no continuation
materialised: the fast path, linear in program size). A general clause whose handler lies beyond
the region's barrier raises `CrossesBarrier`; the region's rule then retries with the rest of the
computation pushed in as a continuation (E-Call2/E-Cond2/E-Hop), or, for loops, rewrites the loop
(abortive clauses, App. B.2) or reports the clause as unsupported. A region's failed attempt is
recorded (`try_in_place`), so that translating it again skips straight to the retry; an attempt on a
region with side effects (callbacks, prints) is traced apart first, so a failed one leaves no
equation behind.

Rules are kept in one table keyed by primitive (`RULES`); a rule is a `Rule`,
`rule(eqn, ins, H, K, resume, rest) -> RuleResult`: `(outs, H)` when the rest of the current
jaxpr is still to run, or `Done(answer)` when the rule ran it itself (by calling
`rest(outs, H, K)`, which runs the remainder of the current jaxpr and then `K`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import gc
import sys
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, Union

import jax
import jax.numpy as jnp

from . import _compat
from ._buffer_reads import forward_reads
from ._compat import abstractify
from ._core import _OUR_EFFECTS, HandlerSpec, OpEffect, _handle_effects, handle_p, in_play
from ._errors import UnsupportedHandlerError


class Frame(NamedTuple):
    """One installed handler during translation."""

    spec: HandlerSpec
    params: tuple
    consts: tuple


class Cont(NamedTuple):
    fn: Callable  # fn(outs, H, K) -> answer


class _Marker:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


RET = _Marker("RET")
BARRIER = _Marker("BARRIER")


class Done(NamedTuple):
    """A rule consumed the rest of the computation and produced the region's answer."""

    answer: Any


class CrossesBarrier(Exception):
    """Internal: a clause needs a continuation that reaches past the current region.

    `key` and `eqn` are the perform in the region; `kind` is how the region sees it: `"abortive"`
    when it never comes back (its clause is abortive, or a tail-resumptive clause that forwards
    it to an abortive one unconditionally), else `"general"`."""

    def __init__(self, key, kind, where, eqn):
        super().__init__(key.op.name)
        self.key, self.kind, self.where, self.eqn = key, kind, where, eqn


RuleResult = Union[tuple[list, tuple[Frame, ...]], Done]
"""A rule's result: `(outs, H)`, the equation's outputs and the handler context after it, the
rest of the jaxpr still to run; or `Done(answer)`, the region's answer (the rule ran the rest)."""


class Rule(Protocol):
    """The translation rule of one primitive.

    **Arguments:** `eqn`, the equation; `ins`, its inputs (values of the output trace); `H`, the
    handler context; `K`, the continuation list; `resume`, inside a clause the function its
    `resume` calls, else `None`; `rest(outs, H, K)`, the rest of the current jaxpr, then `K`."""

    def __call__(self, eqn: Any, ins: list, H: tuple[Frame, ...], K: tuple,
                 resume: Callable | None, rest: Callable) -> RuleResult: ...


RULES: dict[Any, Rule] = {}


def register(*prims) -> Callable[[Rule], Rule]:
    """Register the decorated rule for each primitive in `prims`."""

    def deco(rule: Rule) -> Rule:
        for p in prims:
            RULES[p] = rule
        return rule
    return deco


# --------------------------------------------------------------------------------------------
# The interpreter


def run(jaxpr, consts, args, H, K, resume=None, start=0, env=None):
    """Translate `jaxpr` applied to `args` under handlers `H` and continuations `K`."""
    if env is None:
        env = {}
        for v, x in zip(jaxpr.constvars, consts):
            env[v] = x
        for v, x in zip(jaxpr.invars, args):
            env[v] = x

    def read(v):
        return v.val if isinstance(v, _compat.Literal) else env[v]

    eqns = jaxpr.eqns
    for i in range(start, len(eqns)):
        eqn = eqns[i]
        ins = [read(v) for v in eqn.invars]
        rule = RULES.get(eqn.primitive)
        if not in_play(eqn.effects):
            outs = _compat.bind_eqn(eqn, ins)
        elif rule is None:
            raise UnsupportedHandlerError(
                f"The primitive `{eqn.primitive}` contains effect operations still to handle "
                f"({_ops_of(eqn.effects)}), but the translator has no rule for it (traced at "
                f"{_compat.summarize_source(eqn.source_info)}).")
        else:
            rest = functools.partial(_rest, jaxpr, i, env, resume)
            r = rule(eqn, ins, H, K, resume, rest)
            if isinstance(r, Done):
                return r.answer
            outs, H = r
        for v, x in zip(eqn.outvars, outs):
            env[v] = x
    return apply_k([read(v) for v in jaxpr.outvars], H, K)


def _rest(jaxpr, i, env, resume, outs, H, K):
    env = dict(env)
    for v, x in zip(jaxpr.eqns[i].outvars, outs):
        env[v] = x
    return run(jaxpr, None, None, H, K, resume, start=i + 1, env=env)


def apply_k(outs, H, K):
    """Return `outs` to the continuation list `K` (rules E-Ret1..3)."""
    while True:
        top = K[-1]
        if top is BARRIER:
            return outs, H
        if top is RET:
            frame = H[-1]
            ret = frame.spec.ret
            if ret is None:
                H, K = H[:-1], K[:-1]
                continue
            ins = [*frame.consts[frame.spec.ret_consts], *frame.params, *outs]
            return run(ret.jaxpr, ret.consts, ins, H[:-1], K[:-1])
        return top.fn(outs, H, K[:-1])


def inline(run_region, H, K, rest, region=None):
    """Translate a region in place; on a crossing clause, redo it with the rest pushed in.
    `region` (the region's jaxpr) lets a known crossing skip the in-place attempt (`try_in_place`)."""
    try:
        return try_in_place(region, H, lambda: run_region(H, (BARRIER,)))
    except CrossesBarrier:
        return Done(run_region(H, K + (Cont(rest),)))


# The record of the elimination in progress (see `elimination_record`); a context variable, so
# that an elimination started inside another (a handler run eagerly by a rule) gets its own.
_record: contextvars.ContextVar = contextvars.ContextVar("effppl_elimination_record",
                                                         default=None)


def elimination_record() -> dict:
    """The record kept for the elimination in progress (failed in-place attempts, loop
    rewrites), keyed by static objects (jaxprs, handler specs); a throwaway dict outside any
    elimination. It holds tracers of the elimination's trace and ends with it."""
    record = _record.get()
    return {} if record is None else record


def try_in_place(region, H, in_place):
    """`in_place()`, the in-place translation of `region` (a jaxpr, or a tuple of them) under the
    handlers `H`, unless it is already known to raise `CrossesBarrier`: then raise that again.

    Whether a region crosses its barrier depends only on its jaxpr and the handlers in scope, and
    a rewrite or a continuation pushed into a region translates the regions inside it again:
    without this record, every enclosing level would redo its inner levels' failed attempts
    (exponential in the depth of nested loops with an abortive clause)."""
    if region is None:
        return in_place()
    record = elimination_record()
    key = ("attempt", region, tuple(f.spec for f in H))
    known = record.get(key)
    if known is not None:
        raise CrossesBarrier(*known)
    try:
        return _sandboxed(in_place) if _side_effects(region) else in_place()
    except CrossesBarrier as exc:
        record[key] = (exc.key, exc.kind, exc.where, exc.eqn)
        raise


def _side_effects(region):
    """Whether a region's jaxpr(s) hold side effects (`debug.print`, `io_callback`, ...) that dead
    code elimination keeps, besides the effect operations and handlers being translated."""
    jaxprs = region if isinstance(region, tuple) else (region,)
    return any(not isinstance(e, _OUR_EFFECTS)
               for j in jaxprs if hasattr(j, "effects") for e in j.effects)


def _is_spec(x):
    return isinstance(x, HandlerSpec)


def _sandboxed(in_place):
    """`in_place()` traced into a jaxpr of its own first, then evaluated in the current trace: an
    attempt that fails leaves no equation behind (a side effect of a failed attempt would
    otherwise run too, since dead code elimination keeps effectful equations)."""
    box = []

    def traced():
        leaves, tree = jax.tree_util.tree_flatten(in_place(), is_leaf=_is_spec)
        box.append((tree, {i: x for i, x in enumerate(leaves) if _is_spec(x)}, len(leaves)))
        return [jnp.asarray(x) for x in leaves if not _is_spec(x)]

    closed = _compat.trace_to_closed_jaxpr(traced, [], "in-place translation")
    arrays = iter(_compat.eval_jaxpr(closed.jaxpr, closed.consts))
    tree, static, n = box[0]
    return jax.tree_util.tree_unflatten(
        tree, [static[i] if i in static else next(arrays) for i in range(n)])


def frame_params(H):
    return [x for f in H for x in f.params]


def with_params(H, flat):
    out, i = [], 0
    for f in H:
        n = len(f.params)
        out.append(f._replace(params=tuple(flat[i:i + n])))
        i += n
    return tuple(out)


def _ops_of(effects):
    return ", ".join(sorted(f"`{e.op.name}`" for e in effects if hasattr(e, "op"))) or "handlers"


def ret_index(K, n_inner):
    """Index in `K` of the return marker of the frame with `n_inner` frames inside it."""
    seen = 0
    for j in range(len(K) - 1, -1, -1):
        if K[j] is BARRIER:
            return None
        if K[j] is RET:
            if seen == n_inner:
                return j
            seen += 1
    return None


# --------------------------------------------------------------------------------------------
# Entry points


def eliminate_jaxpr(closed):
    """Translate a ClosedJaxpr (effectful) into an equivalent ClosedJaxpr with no handler or
    operation left. Raises `UnhandledEffectError` / `UnsupportedHandlerError`."""
    if not in_play(closed.effects):
        return closed
    with _deep_recursion(), paused_gc():
        try:
            return _eliminate(closed)
        except RecursionError as err:
            if str(err).startswith(("Handlers nested", "Translating the handlers")):
                raise
            raise RecursionError(
                "Translating the handlers nested more Python calls than this interpreter "
                "allows: each captured continuation (the rest of the program after an operation "
                "whose clause resumes) is translated inside the clause that resumes it, so "
                "operations performed in sequence under clauses that resume several times nest "
                "deeply. Python 3.12's fixed C recursion limit stops this at about 8 such "
                "operations in a row (a two-way choice); Python 3.11 allows more. Perform fewer "
                "of them in one handled program.") from None


@contextlib.contextmanager
def _deep_recursion(limit=100_000):
    """Raise Python's recursion limit while a program is eliminated, restoring it after.

    Why it must exist: general clauses are compiled by CPS, and each captured continuation
    nests Python calls (the rest of the program is translated inside the clause that resumes),
    so a program with a few such operations in a row passes the default limit of 1,000. Scoped
    to one elimination; the limit is process-wide, so another thread sees the raised limit
    meanwhile (harmless: a limit, not a behaviour)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


@contextlib.contextmanager
def paused_gc():
    """Pause Python's cyclic garbage collector while a program is traced or translated,
    restoring it after (left off if it was off).

    Why it must exist: tracing allocates many small objects (tracers, equations, variables) that
    stay alive until the trace ends, so the collector runs often and each full collection walks
    every live object of the process (JAX's and NumPyro's included): a third of the time of
    eliminating a 200-site model went to it. What is garbage is freed by reference counting as
    before; cycles wait for the next collection after the block. Process-wide, like the
    collector: another thread meanwhile also runs without cyclic collection."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _eliminate(closed):
    def fn(*args):
        token = _record.set({})  # reset before the trace ends: it holds the trace's tracers
        try:
            outs, _ = run(closed.jaxpr, closed.consts, args, (), (BARRIER,))
        finally:
            _record.reset(token)
        return outs

    out = _compat.trace_to_closed_jaxpr(fn, closed.in_avals, "eliminate")
    jaxpr, _ = _compat.pe.dce_jaxpr(forward_reads(out.jaxpr), [True] * len(out.jaxpr.outvars),
                                    instantiate=True)
    return _compat.ClosedJaxpr(jaxpr, out.consts)


# --------------------------------------------------------------------------------------------
# `handle_p` outside a translation (run eagerly, differentiated, batched or lowered by JAX):
# the handler is eliminated first, then JAX runs, differentiates, batches or lowers the plain
# jaxpr. The translator registers these into the primitive's tables (as JAX's interpreters do),
# so `_core.py` does not depend on this module.


def _eliminated(params, avals):
    """The plain jaxpr of one `handle` equation, translated once per params and input types."""
    return _eliminated_cached(tuple(sorted(params.items(), key=lambda kv: kv[0])),
                              tuple(abstractify(a) for a in avals))


@functools.lru_cache(maxsize=256)
def _eliminated_cached(params, avals):
    params = dict(params)
    closed, _, _ = _compat.trace_to_jaxpr(lambda *a: handle_p.bind(*a, **params), avals, "handle")
    return eliminate_jaxpr(closed)


def _check_closed(eqn_effects, what):
    leftover = [e for e in eqn_effects if isinstance(e, OpEffect)]
    if leftover:
        names = ", ".join(sorted(e.op.name for e in leftover))
        raise UnsupportedHandlerError(
            f"A handler is used under {what} while its body performs `{names}`, handled further out; "
            f"apply {what} outside the outermost handler instead.")


def _handle_impl(*args, **params):
    return _compat.jaxpr_as_fun(_eliminated(params, args))(*args)


def _handle_jvp(primals, tangents, **params):
    _check_closed(_handle_effects(params["body"], params["spec"]), "`jax.grad`/`jax.jvp`")
    tangents = [_compat.ad.instantiate_zeros(t) for t in tangents]
    fun = _compat.jaxpr_as_fun(_eliminated(params, primals))
    return jax.jvp(lambda *a: fun(*a), tuple(primals), tuple(tangents))


def _handle_linearize(is_vjp, nonzeros, *primals, **params):
    """Reverse mode: linearize the plain jaxpr (as JAX's `jit` does), so that the primitives in
    it take their own linearization rules (`effects.while_loop`'s checkpointing) instead of
    JVP followed by partial evaluation."""
    _check_closed(_handle_effects(params["body"], params["spec"]), "`jax.grad`/`jax.vjp`")
    closed = _eliminated(params, primals)
    primal, n_res, nonzeros_out, _, tangent = _compat.ad.linearize_jaxpr(
        closed, nonzeros, allow_fwds=False, is_vjp=is_vjp)
    outs = _compat.eval_jaxpr(primal.jaxpr, primal.consts, *primals)
    outs, residuals = outs[:len(outs) - n_res], outs[len(outs) - n_res:]

    def linearized(residuals, *tangents):
        nz = [_compat.ad.instantiate_zeros(t) for t, n in zip(tangents, nonzeros) if n]
        it = iter(_compat.eval_jaxpr(tangent.jaxpr, tangent.consts, *residuals, *nz))
        return [next(it) if n else _compat.Zero(a.to_tangent_aval())
                for n, a in zip(nonzeros_out, closed.out_avals)]

    return outs, nonzeros_out, residuals, linearized


def _handle_batch(args, dims, **params):
    _check_closed(_handle_effects(params["body"], params["spec"]), "`jax.vmap`")
    avals = [abstractify(a) if d is None else
             _compat.ShapedArray(tuple(s for i, s in enumerate(a.shape) if i != d), a.dtype)
             for a, d in zip(args, dims)]
    fun = _compat.jaxpr_as_fun(_eliminated(params, avals))
    outs = jax.vmap(lambda *a: fun(*a), in_axes=tuple(dims))(*args)
    return outs, [0] * len(outs)


def _handle_lowering(ctx, *args, **params):
    fun = _compat.jaxpr_as_fun(_eliminated(params, ctx.avals_in))
    return _compat.mlir.lower_fun(lambda *a: fun(*a), multiple_results=True)(ctx, *args)


handle_p.def_impl(_handle_impl)
_compat.ad.primitive_jvps[handle_p] = _handle_jvp
_compat.ad.primitive_linearizations[handle_p] = _handle_linearize
_compat.batching.primitive_batchers[handle_p] = _handle_batch
_compat.mlir.register_lowering(handle_p, _handle_lowering)
