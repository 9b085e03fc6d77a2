"""Windowed scatters written as in-place slice updates, in a jaxpr that is run, not differentiated.

`jax.vmap` of a program that writes a row of a buffer it carries through a loop (`trace`'s
record of a site inside a `lax.scan`: `dynamic_update_slice` or a windowed `scatter_add`) turns
each write into a `scatter` of a `[draws, 1]` window at an index that is the same for every
draw. XLA compiles such a scatter into an in-place update of the window, and, since a scatter
drops an update out of range where a slice update clamps it, adds a bounds check of its own:
two more kernels at each step of the loop. On CPU a loop body of more than 8 kernels runs them
through XLA's concurrent executor, whose per-step cost is several times the work of a small
step (the local level's `log_likelihood`, T=2000, 100 draws: 1.2 ms where the hand-written
`vmap` of a `scan` takes 0.4 ms).

`windows_as_updates(fn)` traces `fn` and writes each such scatter as what it computes: a
`dynamic_slice` of the window, the add (for `scatter_add`), a `select` of the old window where
the index is out of range (`FILL_OR_DROP`, `PROMISE_IN_BOUNDS`; `CLIP` clamps, as a slice update
does), a `dynamic_update_slice`. The values are the same, bit for bit; XLA fuses the bounds check
into the update. Only for programs that are not differentiated afterwards: an overwrite's
cotangent copies the buffer at each step (see `handlers._trace._Layout.write`).
"""

from collections.abc import Callable

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

from ...effects import internal

__all__ = ["windows_as_updates"]

_SCATTERS = (jax.lax.scatter_p, jax.lax.scatter_add_p)
_SUB_JAXPRS = ("jaxpr", "body_jaxpr", "cond_jaxpr", "branches")


def windows_as_updates(fn: Callable) -> Callable:
    """`fn` (traceable, any pytrees in and out), with every windowed scatter at one index, at
    any depth of loops, branches and `jax.jit` calls, written as a slice update (see the module's
    docstring). Same values; not for programs differentiated afterwards."""
    def rewritten(*args):
        closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
        out = internal.jaxpr_as_fun(_rewrite(closed))(*jax.tree.leaves(args))
        return jax.tree.unflatten(jax.tree.structure(shapes), out)

    rewritten.__name__ = getattr(fn, "__name__", "fn")
    return rewritten


def _rewrite(closed):
    """`closed` with its windowed scatters rewritten, or `closed` itself when it has none."""
    if not isinstance(closed, jax.extend.core.ClosedJaxpr) or not any(
            e.primitive in _SCATTERS for e in internal.iter_eqns(closed.jaxpr)):
        return closed
    return jax.make_jaxpr(lambda *args: _evaluate(closed.jaxpr, closed.consts, args))(
        *[v.aval for v in closed.jaxpr.invars])


def _evaluate(jaxpr, consts, args) -> list:
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))

    def read(v):
        return v.val if isinstance(v, jax.extend.core.Literal) else env[v]

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        out = _as_update(eqn, *ins) if eqn.primitive in _SCATTERS else None
        if out is not None:
            out = [out]
        else:
            params = dict(eqn.params)
            for name in _SUB_JAXPRS:
                if name in params:
                    sub = params[name]
                    params[name] = (tuple(_rewrite(b) for b in sub) if isinstance(sub, tuple)
                                    else _rewrite(sub))
            # `bind_eqn`: a call primitive's parameters (a custom JVP's `subfuns`) as bound
            out = internal.bind_eqn(eqn.replace(params=params), ins)
        env.update(zip(eqn.outvars, out))
    return [read(v) for v in jaxpr.outvars]


def _as_update(eqn, operand, indices, updates):
    """The scatter `eqn` as a slice update, or `None` when it is not one window at one index
    (then it is bound unchanged)."""
    numbers, mode = eqn.params["dimension_numbers"], eqn.params["mode"]
    if (numbers.inserted_window_dims or numbers.operand_batching_dims
            or tuple(numbers.update_window_dims) != tuple(range(np.ndim(operand)))
            or np.shape(indices) != (len(numbers.scatter_dims_to_operand_dims),)
            or np.ndim(updates) != np.ndim(operand) or np.size(updates) == 0
            or eqn.params.get("update_consts")):
        return None
    starts = [jnp.zeros((), indices.dtype)] * np.ndim(operand)
    for k, d in enumerate(numbers.scatter_dims_to_operand_dims):
        starts[d] = indices[k]
    clip = mode == jax.lax.GatherScatterMode.CLIP
    add = eqn.primitive is jax.lax.scatter_add_p
    old = None
    if add or not clip:
        old = jax.lax.dynamic_slice(operand, starts, np.shape(updates),
                                    allow_negative_indices=False)
    new = old + updates if add else updates
    if not clip:  # out of range: the scatter drops the update, a slice update would clamp it
        in_range = jnp.array(True)
        for d in numbers.scatter_dims_to_operand_dims:
            in_range &= (starts[d] >= 0) & (starts[d] <= operand.shape[d] - updates.shape[d])
        new = jax.lax.select(jnp.broadcast_to(in_range, np.shape(new)), new, old)
    return jax.lax.dynamic_update_slice(operand, new.astype(operand.dtype), starts,
                                        allow_negative_indices=False)
