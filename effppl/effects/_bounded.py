"""`while_loop`: a `while` loop with a bound on its iterations, differentiable in both modes.

JAX's `lax.while_loop` has no reverse-mode derivative: the number of iterations is not known
when the program is traced, so nothing tells how much of the forward pass to keep. A loop with a
static bound `max_steps` can keep a bounded part of it. `while_loop` stages one primitive,
`bounded_while_p`, whose

* implementation and lowering are a `lax.while_loop` that also stops after `max_steps`
  iterations (no overhead: the loop runs as many iterations as it takes);
* JVP (forward mode) is the loop over primal and tangent carry (`jax.jvp`, `jax.jacfwd`);
* linearization (reverse mode: `jax.grad`, `jax.vjp`, `jax.linearize`) runs the loop keeping
  checkpoints of the carry and leaves a linear primitive whose transpose sweeps back over the
  iterations, recomputing them between checkpoints (`_checkpoint.py`);
* batching rule batches the body, keeps finished elements as they are, and stays this
  primitive (so a batched loop is still differentiable);
* translation rule (`rules/_loops.py`) is the one of `lax.while_loop`: the body and condition
  may perform operations handled outside the loop, tail-resumptive or abortive.

`effppl.ode` runs its integration loop in it; nothing here knows about ODEs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from . import _compat
from ._compat import Zero, ad, batching, mlir

bounded_while_p = _compat.Primitive("bounded_while")
bounded_while_p.multiple_results = True


def recompute_slots(max_steps: int, checkpoints: int) -> int:
    """`S`: the largest stride online thinning reaches within `max_steps` iterations, with
    `checkpoints` slots (`_checkpoint.py`); reverse mode recomputes at most `S` iterations at a
    time."""
    s = 1
    while -(-(max_steps - 1) // s) > checkpoints - 1:
        s *= 2
    return s


def default_checkpoints(max_steps: int) -> int:
    """The number of checkpoints kept when none is given: the even `C` that makes the memory of
    reverse mode, `C + recompute_slots(max_steps, C)` carries, least (about `2 sqrt(max_steps)`)."""
    top = 2 * math.isqrt(max_steps) + 4
    return min(range(2, top + 1, 2), key=lambda c: (c + recompute_slots(max_steps, c), c))


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any, *, max_steps: int,
               checkpoints: int | None = None) -> Any:
    """`lax.while_loop(cond_fun, body_fun, init_val)`, stopped after at most `max_steps`
    iterations, and differentiable in reverse mode as well as forward mode.

    **Arguments:**
    - `cond_fun(carry) -> bool scalar`, `body_fun(carry) -> carry`: as in `lax.while_loop`;
      both may close over traced values and perform operations of `effppl.effects` (handled
      outside the loop, as in a `lax.while_loop`).
    - `init_val`: the initial carry, a pytree of arrays.
    - `max_steps`: a static positive int, the most iterations run.
    - `checkpoints`: a static even int >= 2, how many carries reverse mode keeps while the loop
      runs forward (default about `sqrt(max_steps)`). Reverse mode then keeps at most
      `checkpoints + ceil(max_steps / checkpoints)` carries (rounded up to a power of two) and
      runs each iteration about twice forward before its transpose (once when at most
      `checkpoints` iterations ran). `checkpoints >= max_steps` keeps every carry and
      recomputes nothing.

    **Returns:** the final carry: that of the first iteration at which `cond_fun` is false, or
    after `max_steps` iterations.

    **Raises:** `TypeError` when `body_fun` returns a carry of another structure or type, or
    `cond_fun` does not return a bool scalar; `ValueError` for a `max_steps` or `checkpoints`
    that is not as above.

    **Example:** Newton's iteration for `sqrt(a)`, and its derivative `1 / (2 sqrt(a))` in
    reverse mode:

    >>> import jax, jax.numpy as jnp
    >>> from effppl.effects import while_loop
    >>> def sqrt(a):
    ...     step = lambda x: 0.5 * (x + a / x)
    ...     return while_loop(lambda x: jnp.abs(x * x - a) > 1e-6 * a, step, a, max_steps=50)
    >>> round(float(sqrt(9.0)), 5), round(float(jax.grad(sqrt)(9.0)), 5)
    (3.0, 0.16667)

    **References:** Griewank & Walther (2000), "Algorithm 799: Revolve" (checkpointing for
    reverse mode); Stumm & Walther (2010), "New algorithms for optimal online checkpointing"
    (an unknown number of iterations); the paper "Handling JAX" §5 (loops with effects).
    """
    _check_static(max_steps, checkpoints)
    checkpoints = default_checkpoints(max_steps) if checkpoints is None else checkpoints
    leaves, tree = jax.tree_util.tree_flatten(init_val)
    leaves = [x if isinstance(x, _compat.Tracer) else jnp.asarray(x) for x in leaves]
    struct = jax.tree_util.tree_unflatten(tree, [_compat.abstractify(x) for x in leaves])
    cond, cond_consts, cond_tree = _compat.trace_to_jaxpr(cond_fun, (struct,), "while_loop.cond")
    body, body_consts, body_tree = _compat.trace_to_jaxpr(body_fun, (struct,), "while_loop.body")
    _check_types(cond, cond_tree, body, body_tree, tree, leaves)
    outs = bounded_while_p.bind(*cond_consts, *body_consts, *leaves, cond_jaxpr=cond,
                                body_jaxpr=body, cond_nconsts=len(cond_consts),
                                body_nconsts=len(body_consts), max_steps=max_steps,
                                checkpoints=checkpoints)
    return jax.tree_util.tree_unflatten(tree, outs)


def _check_static(max_steps, checkpoints):
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"effppl.effects.while_loop(..., max_steps={max_steps!r}) expected a "
                         f"positive Python int (a static bound on the iterations).")
    if checkpoints is not None and (isinstance(checkpoints, bool)
                                    or not isinstance(checkpoints, int)
                                    or checkpoints < 2 or checkpoints % 2):
        raise ValueError(f"effppl.effects.while_loop(..., checkpoints={checkpoints!r}) expected "
                         f"an even Python int >= 2, or None.")


def _check_types(cond, cond_tree, body, body_tree, tree, leaves):
    want = [(x.shape, x.dtype) for x in map(_compat.abstractify, leaves)]
    have = [(a.shape, a.dtype) for a in body.out_avals]
    if body_tree != tree or have != want:
        raise TypeError(f"effppl.effects.while_loop: `body_fun` must return a carry of the "
                        f"structure and types of `init_val`, {tree.unflatten(want)}, but it "
                        f"returned {body_tree.unflatten(have)}.")
    out = cond.out_avals
    if len(out) != 1 or out[0].shape != () or out[0].dtype != jnp.bool_:
        raise TypeError(f"effppl.effects.while_loop: `cond_fun` must return a bool scalar, but "
                        f"it returned {cond_tree.unflatten(list(out))}.")


# --------------------------------------------------------------------------------------------
# The primitive: abstract evaluation, implementation, lowering.


def split_ins(ins, cond_nconsts, body_nconsts):
    """`(condition constants, body constants, initial carry)` of the primitive's inputs."""
    return _compat.split_list(list(ins), [cond_nconsts, body_nconsts])


def _abstract_eval(*avals, cond_jaxpr, body_jaxpr, **_):
    return list(body_jaxpr.out_avals), set(cond_jaxpr.effects) | set(body_jaxpr.effects)


def call(closed, *args):
    """Evaluate a ClosedJaxpr on `args` in the current trace; a list of outputs."""
    return list(_compat.eval_jaxpr(closed.jaxpr, closed.consts, *args))


def _run(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, max_steps, checkpoints):
    """The loop as a `lax.while_loop` with an iteration counter."""
    del checkpoints
    cc, bc, init = split_ins(args, cond_nconsts, body_nconsts)

    def cond(state):
        i, c = state
        return jnp.logical_and(i < max_steps, call(cond_jaxpr, *cc, *c)[0])

    def body(state):
        i, c = state
        return i + 1, call(body_jaxpr, *bc, *c)

    return jax.lax.while_loop(cond, body, (jnp.int32(0), list(init)))[1]


def _dce(used_outputs, eqn):
    """Dead code elimination (JAX has none for `while_loop`; this is its `scan` rule's carry
    fixpoint): keep the carry leaves that are outputs used after the loop, or read by the
    condition or by kept leaves, prune the body and condition to them, and drop the constants
    nothing kept reads."""
    p = eqn.params
    cond, body, ncc, nbc = p["cond_jaxpr"], p["body_jaxpr"], p["cond_nconsts"], p["body_nconsts"]
    if not any(used_outputs) and not _compat.pe.has_effects(eqn):
        return [False] * len(eqn.invars), None
    _, cond_used = _compat.pe.dce_jaxpr(cond.jaxpr, [True])
    used = [a or b for a, b in zip(used_outputs, cond_used[ncc:])]
    while True:
        _, body_used = _compat.pe.dce_jaxpr(body.jaxpr, used)
        grown = [a or b for a, b in zip(used, body_used[nbc:])]
        if grown == used:
            break
        used = grown
    new_body, body_used = _compat.pe.dce_jaxpr(body.jaxpr, used, instantiate=[False] * nbc + used)
    new_cond, cond_used = _compat.pe.dce_jaxpr(cond.jaxpr, [True],
                                               instantiate=[False] * ncc + used)
    new_cond = _compat.ClosedJaxpr(new_cond, cond.consts)
    new_body = _compat.ClosedJaxpr(new_body, body.consts)
    used_ins = cond_used[:ncc] + body_used[:nbc] + used
    params = dict(p, cond_jaxpr=new_cond, body_jaxpr=new_body, cond_nconsts=sum(cond_used[:ncc]),
                  body_nconsts=sum(body_used[:nbc]))
    new = _compat.new_jaxpr_eqn(
        [v for v, u in zip(eqn.invars, used_ins) if u],
        [v for v, u in zip(eqn.outvars, used) if u], bounded_while_p, params,
        set(new_cond.effects) | set(new_body.effects), eqn.source_info, eqn.ctx)
    return used_ins, new


bounded_while_p.def_effectful_abstract_eval(_abstract_eval)
_compat.pe.dce_rules[bounded_while_p] = _dce
bounded_while_p.def_impl(_run)
mlir.register_lowering(bounded_while_p, mlir.lower_fun(_run, multiple_results=True))


# --------------------------------------------------------------------------------------------
# Forward mode


def inexact(aval) -> bool:
    return jnp.issubdtype(aval.dtype, jnp.inexact)


def carry_nonzeros(body_jaxpr, bc_nz, c_nz):
    """Which carry leaves have a nonzero tangent at the end of the loop: a fixpoint of the body's
    JVP from the nonzero body constants `bc_nz` and initial carry `c_nz`."""
    c_nz = list(c_nz)
    while True:
        _, out_nz = ad.jvp_jaxpr(body_jaxpr, list(bc_nz) + c_nz, instantiate=False)
        grown = [a or (b and inexact(v)) for a, b, v in zip(c_nz, out_nz, body_jaxpr.out_avals)]
        if grown == c_nz:
            return c_nz
        c_nz = grown


def nonzero(t, aval) -> bool:
    return not isinstance(t, Zero) and inexact(aval)


def _jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, max_steps,
         checkpoints):
    cc, bc, c0 = split_ins(primals, cond_nconsts, body_nconsts)
    _, tbc, tc0 = split_ins(tangents, cond_nconsts, body_nconsts)
    avals = body_jaxpr.in_avals
    bc_nz = [nonzero(t, a) for t, a in zip(tbc, avals[:body_nconsts])]
    c_nz = carry_nonzeros(body_jaxpr, bc_nz,
                          [nonzero(t, a) for t, a in zip(tc0, avals[body_nconsts:])])
    jvp_body, _ = ad.jvp_jaxpr(body_jaxpr, bc_nz + c_nz, instantiate=c_nz)
    tbc_nz = [t for t, nz in zip(tbc, bc_nz) if nz]
    tc_nz = [ad.instantiate_zeros(t) for t, nz in zip(tc0, c_nz) if nz]
    n = len(c0)

    def body(carry):
        c, t = carry
        outs = call(jvp_body, *bc, *c, *tbc_nz, *t)
        return outs[:n], outs[n:]

    c, t = while_loop(lambda carry: call(cond_jaxpr, *cc, *carry[0])[0], body, (list(c0), tc_nz),
                      max_steps=max_steps, checkpoints=checkpoints)
    t = iter(t)
    return c, [next(t) if nz else Zero(a.to_tangent_aval())
               for nz, a in zip(c_nz, body_jaxpr.out_avals)]


ad.primitive_jvps[bounded_while_p] = _jvp


def _transpose_error(*args, **params):
    raise NotImplementedError(
        "effppl.effects.while_loop is differentiated in reverse mode by its own linearization "
        "rule; it was reached here through JAX's older path (JVP, then partial evaluation), "
        "which `jax.checkpoint`/`jax.remat` or a `custom_jvp` rule around the loop take. "
        "Differentiate the loop outside such a function.")


ad.primitive_transposes[bounded_while_p] = _transpose_error


# --------------------------------------------------------------------------------------------
# Batching


def _batched_carry(axis_data, cond_jaxpr, body_jaxpr, cc_b, bc_b, c_b):
    """`(which carry leaves are batched, whether the predicate is)`: a fixpoint of the body's
    batching, as JAX's own `while_loop` rule; a batched predicate batches every leaf."""
    c_b = list(c_b)
    while True:
        _, out_b = batching.batch_jaxpr(body_jaxpr, axis_data, bc_b + c_b, False)
        grown = [a or b for a, b in zip(c_b, out_b)]
        if grown == c_b:
            break
        c_b = grown
    _, (pred_b,) = batching.batch_jaxpr(cond_jaxpr, axis_data, cc_b + c_b, False)
    return ([True] * len(c_b) if pred_b else c_b), pred_b


def _batch(axis_data, args, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
           max_steps, checkpoints):
    # (A loop that performs operations runs element by element instead: `_batching.py`.)
    size = axis_data.size
    cc, bc, c0 = split_ins(args, cond_nconsts, body_nconsts)
    cc_d, bc_d, c0_d = split_ins(dims, cond_nconsts, body_nconsts)
    c_b, pred_b = _batched_carry(axis_data, cond_jaxpr, body_jaxpr, [d is not None for d in cc_d],
                                 [d is not None for d in bc_d], [d is not None for d in c0_d])
    c0 = [batching.bdim_at_front(x, d, size) if b else x for x, d, b in zip(c0, c0_d, c_b)]
    c_axes = [0 if b else None for b in c_b]

    def running(c):
        return jax.vmap(lambda *a: call(cond_jaxpr, *a)[0], in_axes=(*cc_d, *c_axes),
                        out_axes=0 if pred_b else None, axis_size=size)(*cc, *c)

    def body(c):
        new = jax.vmap(lambda *a: call(body_jaxpr, *a), in_axes=(*bc_d, *c_axes),
                       out_axes=c_axes, axis_size=size)(*bc, *c)
        if not pred_b:
            return new
        keep = running(c)
        return [jnp.where(keep.reshape((size,) + (1,) * (x.ndim - 1)), x, old)
                for x, old in zip(new, c)]

    cond = (lambda c: jnp.any(running(c))) if pred_b else (lambda c: running(c))
    outs = while_loop(cond, body, c0, max_steps=max_steps, checkpoints=checkpoints)
    return outs, c_axes


batching.fancy_primitive_batchers[bounded_while_p] = _batch
