"""`scan` and `while` (paper §5.1, App. B).

* Tail-resumptive clauses are handled in place inside the loop body; the parameters of the
  handlers in scope become extra loop carry (the *final continuation* of §5.1).
* An abortive clause performed in the body is handled by rewriting the loop first (App. B.2): a
  local handler records the operation's arguments and a flag and stops the iteration, the loop
  condition also checks the flag, and after the loop the recorded operation is performed again,
  outside the loop, where the outer handler aborts as usual. A `scan` stays a `scan` (so it can
  still be differentiated in reverse mode): its remaining iterations skip the body. The same
  holds for a tail-resumptive clause that re-performs, at its top level, an operation whose
  clause aborts (a forwarder in front of the abort): that perform never comes back either.
* An effectful `while` condition is moved into the body with a boolean carry (App. B.1).
* Any other clause across a loop boundary raises `UnsupportedHandlerError`. A `while` is never
  unrolled.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import _compat
from .._bounded import bounded_while_p, while_loop
from .._core import _OUR_EFFECTS, ClauseKind, OpEffect, handle_p, in_play
from .._errors import UnsupportedHandlerError
from .._handle import handle
from .._translate import (
    BARRIER,
    CrossesBarrier,
    elimination_record,
    frame_params,
    inline,
    register,
    run,
    try_in_place,
    with_params,
)


def _cast(xs, avals):
    """`xs` with the dtypes of `avals`, so loop carries keep one type."""
    def cast(x, aval):
        have = _compat.typeof(x)
        if have.dtype == aval.dtype:
            return x
        return jax.lax.convert_element_type(x, aval.dtype)
    return [cast(x, a) for x, a in zip(xs, avals)]


def _param_avals(H):
    return [_compat.abstractify(x) for x in frame_params(H)]


def _translate_rewritten(program, ins, H, K, rest, record_key=None):
    """Translate the effectful program `program(*ins)`, a rewrite of the current equation.

    The trace of the rewrite is kept for the elimination in progress under `record_key`: when the
    loop is translated again (an enclosing region's retry), the same jaxpr, and so the same
    `try_in_place` records, serve."""
    avals = tuple(_compat.abstractify(x) for x in ins)
    record = elimination_record() if record_key is not None else {}
    closed = record.get((record_key, avals))
    if closed is None:
        closed = _compat.trace_to_closed_jaxpr(program, list(avals), "loop rewrite")
        record[(record_key, avals)] = closed
    return inline(lambda H, K: run(closed.jaxpr, closed.consts, ins, H, K), H, K, rest,
                  region=closed.jaxpr)


def _crossing(exc, eqn, rewrite, ins, H, K, rest):
    if exc.kind == ClauseKind.ABORTIVE:
        key = ("abortive rewrite", _loop_key(eqn), exc.key)
        return _translate_rewritten(rewrite(eqn, exc.key), ins, H, K, rest, record_key=key)
    raise UnsupportedHandlerError(
        f"The clause for operation `{exc.key.op.name}` (performed at {exc.where}) would have to "
        f"capture a continuation across the `{eqn.primitive}` loop traced at "
        f"{_compat.summarize_source(eqn.source_info)}. Across a loop boundary a clause must end "
        f"with `return resume(...)` and perform nothing whose clause needs the rest of the "
        f"computation, or never resume: itself, or by performing, unconditionally (not inside a "
        f"`cond`), an operation whose clause never resumes.") from None


def _loop_key(eqn):
    """The loop's body jaxpr (and condition jaxpr), which identify it across re-traces."""
    p = eqn.params
    return p["jaxpr"].jaxpr if "jaxpr" in p else (p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr)


# --------------------------------------------------------------------------------------------
# scan


@register(_compat.scan_p)
def _scan_translate_rule(eqn, ins, H, K, resume, rest):
    p = eqn.params
    (nc, ncarry), body = _compat.scan_counts(p), p["jaxpr"]
    consts, init, xs = ins[:nc], ins[nc:nc + ncarry], ins[nc + ncarry:]
    carry_avals, p_avals = body.in_avals[nc:nc + ncarry], _param_avals(H)

    def step(carry, x):
        c, params = carry
        outs, H_out = run(body.jaxpr, body.consts, [*consts, *c, *x], with_params(H, params),
                          (BARRIER,))
        return ((_cast(outs[:ncarry], carry_avals), _cast(frame_params(H_out), p_avals)),
                outs[ncarry:])

    try:
        (c, params), ys = try_in_place(body.jaxpr, H, lambda: jax.lax.scan(
            step, (init, frame_params(H)), xs, length=p["length"], reverse=p["reverse"],
            unroll=p["unroll"]))
    except CrossesBarrier as exc:
        return _crossing(exc, eqn, _scan_abortive_rewrite, ins, H, K, rest)
    return [*c, *ys], with_params(H, params)


def _scan_abortive_rewrite(eqn, key):
    """App. B.2 for a `scan`, kept a `scan` (so reverse-mode differentiation still works): after
    the operation is performed, the remaining iterations skip the body; then it is performed
    again after the loop."""
    p = eqn.params
    (nc, ncarry), body, length = _compat.scan_counts(p), p["jaxpr"], p["length"]
    y_avals = body.out_avals[ncarry:]

    def program(*ins):
        consts, init, xs = ins[:nc], ins[nc:nc + ncarry], ins[nc + ncarry:]
        ys0 = [jnp.zeros(a.shape, a.dtype) for a in y_avals]

        def step(state, x):
            c, flag, args = state

            def run():
                outs, flag, args_out = _intercepted(
                    key, lambda: _compat.eval_jaxpr(body.jaxpr, body.consts, *consts, *c, *x),
                    [*c, *ys0], args)
                return (outs[:ncarry], flag, args_out), outs[ncarry:]

            return jax.lax.cond(flag == 0, run, lambda: ((list(c), flag, list(args)), ys0))

        (c, flag, args), ys = jax.lax.scan(step, (list(init), jnp.int32(0), _zeros(key)), xs,
                                           length=length, reverse=p["reverse"])
        return _perform_again(key, flag, args, [*c, *ys])

    return program


def _zeros(key):
    return [jnp.zeros(a.shape, a.dtype) for a in key.in_avals]


def _intercepted(key, body, stopped_outs, args):
    """Run `body()` under a local handler that, when `key`'s operation is performed, stops the
    body and returns `(stopped_outs, 1, the operation's arguments)`; else `(outs, 0, args)`."""
    op = key.op

    def clause(params, *op_args, resume, **static):
        leaves = _signature_leaves(key, op_args, static)
        if leaves is not None:
            return list(stopped_outs), jnp.int32(1), leaves
        return resume(params, op(*op_args, **static))

    return handle(lambda: list(body()), clauses={op: clause},
                  ret=lambda _, r: (r, jnp.int32(0), list(args)))()


def _signature_leaves(key, op_args, static):
    """The flattened arguments of a perform of `key.op` when it has `key`'s signature (tree,
    types, static arguments), else None: the perform the local handlers stop at."""
    leaves, tree = jax.tree_util.tree_flatten(op_args)
    avals = tuple(_compat.abstractify(x) for x in leaves)
    if (tree, avals, tuple(sorted(static.items()))) == (key.in_tree, key.in_avals, key.static):
        return leaves
    return None


def _perform_again(key, flag, args, outs):
    """After the loop: the loop's outputs, or the recorded operation performed again."""
    def again():
        key.op(*jax.tree_util.tree_unflatten(key.in_tree, args), **dict(key.static))
        return outs

    return jax.lax.cond(flag == 0, lambda: outs, again)


# --------------------------------------------------------------------------------------------
# while

_LOOPS = (_compat.while_p, _compat.scan_p, bounded_while_p)


class _WhileLoop(NamedTuple):
    """A `while_loop` equation's parameters, by name (a `lax.while_loop`, or an
    `effects.while_loop`, bounded, whose rewrites and translation stay bounded loops)."""

    cond: Any  # ClosedJaxpr of the condition
    body: Any  # ClosedJaxpr of the body
    n_cond_consts: int
    n_body_consts: int
    bound: tuple = ()  # `(max_steps, checkpoints)` of a bounded loop

    @classmethod
    def of(cls, eqn):
        p = eqn.params
        bound = (p["max_steps"], p["checkpoints"]) if eqn.primitive is bounded_while_p else ()
        return cls(p["cond_jaxpr"], p["body_jaxpr"], p["cond_nconsts"], p["body_nconsts"], bound)

    def split(self, ins):
        """`(condition constants, body constants, initial carry)` from the equation's inputs."""
        return _compat.split_list(list(ins), [self.n_cond_consts, self.n_body_consts])

    def loop(self, cond, body, init):
        """A new loop of the same kind: `lax.while_loop`, or `while_loop` with the same bound."""
        if not self.bound:
            return jax.lax.while_loop(cond, body, init)
        max_steps, checkpoints = self.bound
        return while_loop(cond, body, init, max_steps=max_steps, checkpoints=checkpoints)


@register(_compat.while_p, bounded_while_p)
def _while_translate_rule(eqn, ins, H, K, resume, rest):
    loop = _WhileLoop.of(eqn)
    if in_play(loop.cond.effects):
        return _translate_rewritten(_effectful_cond_rewrite(eqn), ins, H, K, rest,
                                    record_key=("effectful condition", _loop_key(eqn)))
    cc, bc, init = loop.split(ins)
    carry_avals, p_avals = loop.body.out_avals, _param_avals(H)

    def cond(state):
        return _compat.eval_jaxpr(loop.cond.jaxpr, loop.cond.consts, *cc, *state[0])[0]

    def body(state):
        c, params = state
        outs, H_out = run(loop.body.jaxpr, loop.body.consts, [*bc, *c], with_params(H, params), (BARRIER,))
        return _cast(outs, carry_avals), _cast(frame_params(H_out), p_avals)

    try:
        c, params = try_in_place(loop.body.jaxpr, H, lambda: loop.loop(
            cond, body, (list(init), frame_params(H))))
    except CrossesBarrier as exc:
        return _crossing(exc, eqn, _abortive_rewrite, ins, H, K, rest)
    return c, with_params(H, params)


def _effectful_cond_rewrite(eqn):
    """App. B.1: evaluate the condition once before the loop and at the end of each body."""
    loop = _WhileLoop.of(eqn)

    def program(*ins):
        cc, bc, init = loop.split(ins)

        def test(c):
            return _compat.eval_jaxpr(loop.cond.jaxpr, loop.cond.consts, *cc, *c)[0]

        def step(state):
            _, c = state
            c = list(_compat.eval_jaxpr(loop.body.jaxpr, loop.body.consts, *bc, *c))
            return test(c), c

        _, c = loop.loop(lambda s: s[0], step, (test(list(init)), list(init)))
        return c

    return program


def _abortive_rewrite(eqn, key):
    """App. B.2: stop the loop at the next condition check when `key`'s operation is performed,
    then perform it again after the loop (where the outer handler aborts)."""
    loop = _WhileLoop.of(eqn)

    def program(*ins):
        cc, bc, init = loop.split(ins)

        def cond(state):
            c, flag, _ = state
            return jnp.logical_and(flag == 0, _compat.eval_jaxpr(loop.cond.jaxpr, loop.cond.consts, *cc, *c)[0])

        intercept = _recorded if _recordable(loop.body.jaxpr, key) else _intercepted

        def step(state):
            c, _, args = state
            return intercept(key, lambda: _compat.eval_jaxpr(loop.body.jaxpr, loop.body.consts, *bc, *c),
                             c, args)

        c, flag, args = loop.loop(cond, step, (list(init), jnp.int32(0), _zeros(key)))
        return _perform_again(key, flag, args, c)

    return program


def _recordable(body, key) -> bool:
    """Whether, in a loop body, `key`'s operation returns nothing, nothing after the first
    equation that performs it performs another operation or has a side effect, and no loop
    inside the body performs it: then an iteration that performs it may run to its end, its
    outputs discarded (`_recorded`), with the same result as stopping it there (`_intercepted`),
    and without a branch around the rest of the body. (A result the rest of the body reads
    would be `_recorded`'s zeros there, and a derivative through them NaN, which `where` does
    not mask: `0 * inf`. The body of a `_recorded` handler, for another signature of the
    operation, is read in its place: it is the same body.)"""
    from .._walk import iter_eqns

    op = key.op
    if op.result_type(key.in_tree, key.in_avals, key.static)[1]:
        return False

    def eqns(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive is handle_p and eqn.params["spec"].name == _RECORDING:
                yield from eqns(eqn.params["body"].jaxpr)
            else:
                yield eqn

    def performs(eqn):
        return {e.op for e in eqn.effects if isinstance(e, OpEffect)}

    seen = False
    for eqn in eqns(body):
        ops = performs(eqn)
        if op in ops and any(e.primitive in _LOOPS and op in performs(e)
                             for e in [eqn, *(x for sub in _compat.jaxprs_in_params(eqn.params)
                                             for x in iter_eqns(sub))]):
            return False
        if seen or op in ops:
            if ops - {op} or any(not isinstance(e, _OUR_EFFECTS) for e in eqn.effects):
                return False
            seen = True
    return True


_RECORDING = "_recording"  # the name of `_recorded`'s handler (`_recordable` reads its body)


def _recorded(key, body, stopped_outs, args):
    """`_intercepted`, where the body may run to its end (`_recordable`): a tail-resumptive
    local handler records `(1, the operation's arguments)` at the first perform of `key` and
    resumes with zeros; the body's outputs are then `stopped_outs`. No `cond` around the rest."""
    op = key.op
    out_tree, out_avals = op.result_type(key.in_tree, key.in_avals, key.static)

    def clause(params, *op_args, resume, **static):
        leaves = _signature_leaves(key, op_args, static)
        if leaves is None:
            return resume(params, op(*op_args, **static))
        flag, recorded = params
        recorded = [jnp.where(flag == 1, r, x) for r, x in zip(recorded, leaves)]
        value = out_tree.unflatten([jnp.zeros(a.shape, a.dtype) for a in out_avals])
        return resume((jnp.int32(1), recorded), value)

    def ret(params, outs):
        flag, recorded = params
        outs = [jnp.where(flag == 1, s, o) for s, o in zip(stopped_outs, outs)]
        return outs, flag, recorded

    def _recording():
        return list(body())

    assert _recording.__name__ == _RECORDING
    return handle(_recording, params=(jnp.int32(0), list(args)), clauses={op: clause}, ret=ret)()
