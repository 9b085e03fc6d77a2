"""`over_chains`: map a per-chain function over a leading chain axis, without `vmap` for one chain.

`jax.vmap` turns every `lax.cond` into a `select` of both branches and every loop predicate into a
batched one; NUTS is built of such conds (tree doubling, proposal selection), so a vmapped sampler
is a program several times larger, slower to trace and to compile. A single chain needs no
batching: it runs unbatched, its outputs given a chain axis of length 1 (NumPyro's single chain
is not vmapped either). Values are those `vmap` gives.
"""

from collections.abc import Callable

import jax

from ...effects import internal

__all__ = ["over_chains", "per_chain_types"]


def _chain_size(args, in_axes):
    for x, axis in zip(args, in_axes):
        if axis is not None:
            leaves = jax.tree.leaves(x)
            if leaves:
                return leaves[0].shape[0]
    return None


def over_chains(fn: Callable, in_axes: tuple) -> Callable:
    """`jax.vmap(fn, in_axes)` (every mapped axis 0, every output mapped at axis 0), but a chain
    axis of length 1 calls `fn` once, unbatched. Traceable; wrap it in `jax.jit`."""
    vmapped = jax.vmap(fn, in_axes=in_axes)

    def mapped(*args):
        if _chain_size(args, in_axes) != 1:
            return vmapped(*args)
        inner = [x if axis is None else jax.tree.map(lambda a: a[0], x)
                 for x, axis in zip(args, in_axes)]
        return jax.tree.map(lambda a: a[None], fn(*inner))

    # Named after `fn`: JAX names the compiled program (and its compile logs) after it.
    mapped.__name__ = mapped.__qualname__ = internal.callable_name(fn).lstrip("_")
    return mapped


def per_chain_types(tree):
    """The types of one chain of `tree` (arrays with a leading chain axis): a
    `jax.ShapeDtypeStruct` per leaf, without that axis."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), tree)
