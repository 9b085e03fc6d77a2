"""`jax.vmap` of a `cond`/`while_loop` that performs operations and whose predicate is batched.

JAX batches such a `cond` by running *every* branch for every element and selecting the results
(`lax.select_n`), and such a `while_loop` by running the body for every element until the last one
is done. Both assume the branches and the body are pure: an operation performed there would be
performed for elements that never took that branch or that had already left the loop (a sample
site of an untaken branch would count in the log density). JAX refuses its own state and IO
effects there; for operations we keep `vmap`'s meaning, "the same as mapping over the elements":
such a `cond` or `while_loop` runs element by element, in a `lax.map` over the batch, each element
with its own (unbatched) predicate. Everything else in the `vmap` stays batched, and a `cond` or
`while_loop` with an unbatched predicate, or without operations, is batched by JAX as usual.

The cost: that one `cond`/`while_loop` is a sequential loop over the batch (slower on a GPU than
the vectorised select), which is the price of not performing the operations of untaken branches.
Inside it every operation is performed once per element, also one whose arguments do not depend
on the batch (which elsewhere under `vmap` is performed once, with a batch rule).
"""

from __future__ import annotations

import jax

from . import _compat
from ._bounded import bounded_while_p
from ._core import OpEffect
from ._errors import UnsupportedHandlerError
from ._walk import iter_eqns


def _performs(*jaxprs) -> bool:
    """Whether any of the closed jaxprs performs an operation not handled inside it."""
    return any(isinstance(e, OpEffect) for j in jaxprs for e in j.effects)


def _uses_axis(jaxpr, name) -> bool:
    """Whether `jaxpr` (or one nested in it) has a collective over the axis called `name`."""
    def names(eqn):
        return any(value == name or (isinstance(value, tuple) and name in value)
                   for value in (eqn.params.get("axes"), eqn.params.get("axis_name")))
    return any(names(eqn) for eqn in iter_eqns(jaxpr))


def _map_elements(primitive, axis_data, args, dims, params):
    """`primitive.bind(*args_i, **params)` for each element i of the batch, in a `lax.map`."""
    name = getattr(axis_data, "name", None)
    if name is not None and any(_uses_axis(j, name) for j in _compat.jaxprs_in_params(params)):
        what = "lax.cond/switch" if primitive is _compat.cond_p else "lax.while_loop"
        raise UnsupportedHandlerError(
            f"A `{what}` under `jax.vmap` whose predicate depends on the vmapped data and that "
            f"performs operations runs element by element, so a collective over the vmapped axis "
            f"{name!r} (`psum`, `pmean`, `axis_index`, ...) cannot be used inside it. Compute the "
            f"collective outside the `{what}` and pass its result in.")
    mapped = [jax.numpy.moveaxis(x, d, 0) for x, d in zip(args, dims) if d is not None]

    def one(xs):
        it = iter(xs)
        args_i = [next(it) if d is not None else x for x, d in zip(args, dims)]
        return primitive.bind(*args_i, **params)

    outs = jax.lax.map(one, mapped)
    return outs, [0] * len(outs)


def _cond_batch_rule(original, axis_data, args, dims, *, branches, **params):
    index_dim = dims[0]
    if index_dim is None or "branches_platforms" in params or not _performs(*branches):
        return original(axis_data, args, dims, branches=branches, **params)
    return _map_elements(_compat.cond_p, axis_data, args, dims, dict(params, branches=branches))


def _batched_outputs(closed, batched_in):
    """Which outputs of `closed` depend on a batched input: every output of an equation with a
    batched input counts as batched. An over-approximation of JAX's batching that, unlike
    `batch_jaxpr`, needs no operation's batch rule; erring on "batched" is safe (element by
    element is always right, only slower)."""
    jaxpr = closed.jaxpr
    batched = {v for v, b in zip(jaxpr.invars, batched_in) if b}
    depends = lambda v: not isinstance(v, _compat.Literal) and v in batched  # noqa: E731
    for eqn in jaxpr.eqns:
        if any(map(depends, eqn.invars)):
            batched.update(eqn.outvars)
    return [depends(v) for v in jaxpr.outvars]


def _while_predicate_batched(dims, cond_nconsts, cond_jaxpr, body_nconsts, body_jaxpr):
    """Whether the loop's predicate depends on the batch (the carry's batching is a fixpoint of
    the body's, as in JAX's own batching rule)."""
    batched = [d is not None for d in dims]
    cconsts, bconsts = batched[:cond_nconsts], batched[cond_nconsts:cond_nconsts + body_nconsts]
    carry = batched[cond_nconsts + body_nconsts:]
    while True:
        out = _batched_outputs(body_jaxpr, bconsts + carry)
        grown = [a or b for a, b in zip(carry, out)]
        if grown == carry:
            break
        carry = grown
    return _batched_outputs(cond_jaxpr, cconsts + carry)[0]


def _while_batch_rule(original, axis_data, args, dims, *, cond_nconsts, cond_jaxpr, body_nconsts,
                body_jaxpr):
    params = dict(cond_nconsts=cond_nconsts, cond_jaxpr=cond_jaxpr, body_nconsts=body_nconsts,
                  body_jaxpr=body_jaxpr)
    if not (_performs(cond_jaxpr, body_jaxpr)
            and _while_predicate_batched(dims, **params)):
        return original(axis_data, args, dims, **params)
    return _map_elements(_compat.while_p, axis_data, args, dims, params)


# Why JAX's own batching rules are replaced, process-wide, at import: JAX batches a `cond` or
# `while_loop` when the user's `jax.vmap` inside a handled body is traced, and JAX has no
# per-trace hook for a primitive's batching rule; swapping its rule table in and out around each
# of our traces would race with other threads tracing plain JAX code meanwhile. The wrappers are
# inert for every `cond` and `while_loop` that performs none of our operations, or whose
# predicate is not batched: they call JAX's rule unchanged, so a program that does not perform
# operations is batched exactly as without effppl.
_compat.wrap_batching_rule(_compat.cond_p, _cond_batch_rule)
_compat.wrap_batching_rule(_compat.while_p, _while_batch_rule)


def _bounded_batch_rule(original, axis_data, args, dims, **params):
    """`effects.while_loop` (`_bounded.py`): one that performs runs element by element, so
    each operation is performed once per element and iteration, as in a `lax.while_loop`
    above; any other is batched by its own rule."""
    if not _performs(params["cond_jaxpr"], params["body_jaxpr"]):
        return original(axis_data, args, dims, **params)
    return _map_elements(bounded_while_p, axis_data, args, dims, params)


_compat.wrap_batching_rule(bounded_while_p, _bounded_batch_rule)
