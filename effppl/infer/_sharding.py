"""Model data on a mesh, for every inference API: placing, checking, and reading results back.

Data sharded over a mesh's `data` axis (`effppl.distributed.shard`) are summed by XLA's
partitioner: each device evaluates the log density of its rows and one all-reduce adds them.
That holds for observed sites and covariates. A latent site inside the sharded plate (one value
per row) would be gathered whole onto every device at each evaluation, and a subsampled plate
would draw indices into rows held by other devices: both are refused here with a clear error.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .. import distributed
from .._errors import EffpplError
from ..handlers.internal import SiteError
from . import _model

__all__ = ["ShardingError", "place", "place_data", "data_rows", "check_data", "readable"]


class ShardingError(EffpplError, ValueError):
    """An invalid mesh or data layout for a sharded run."""


@functools.partial(jax.jit, static_argnums=1)
def _reshard(tree, shardings):
    return jax.lax.with_sharding_constraint(tree, shardings)


def place(tree, sharding: NamedSharding):
    """`tree`'s arrays with `sharding` (`jax.device_put`, but also for arrays that span
    processes, which only a compiled program can move; every process must call it)."""
    leaves, treedef = jax.tree.flatten(tree)
    spanning = [isinstance(x, jax.Array) and not x.is_fully_addressable for x in leaves]
    move = [i for i, x in enumerate(leaves)
            if spanning[i] and not x.sharding.is_equivalent_to(sharding, x.ndim)]
    if move:
        for i, x in zip(move, _reshard(tuple(leaves[i] for i in move), sharding)):
            leaves[i] = x
    put = [i for i in range(len(leaves)) if not spanning[i]]
    if not sharding.is_fully_addressable:  # JAX refuses to place one process's device arrays
        for i in [i for i in put if isinstance(leaves[i], jax.Array)]:
            leaves[i] = _from_host(leaves[i], sharding)
        put = [i for i in put if not isinstance(leaves[i], jax.Array)]
    for i, x in zip(put, jax.device_put([leaves[i] for i in put], sharding)):
        leaves[i] = x
    return jax.tree.unflatten(treedef, leaves)


def _from_host(x: jax.Array, sharding: NamedSharding) -> jax.Array:
    """`x`, an array on this process's devices and the same in every process, as a global array
    with `sharding` (each process places its part of its copy; typed PRNG keys too)."""
    if jax.numpy.issubdtype(x.dtype, jax.dtypes.prng_key):
        impl = jax.random.key_impl(x)
        return jax.random.wrap_key_data(_from_host(jax.random.key_data(x), sharding), impl=impl)
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def place_data(dynamic: tuple, mesh) -> tuple:
    """The model's arrays on `mesh`: those already sharded on it keep their layout, every other
    one is replicated (each process must pass the same values)."""
    replicated = NamedSharding(mesh, P())

    def put(x):
        sharding = getattr(x, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
            return x
        if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
            raise ShardingError(
                f"A model argument of shape {x.shape} is sharded as {sharding}, not on the run's "
                f"mesh {dict(mesh.shape)}: shard it with `effppl.distributed.shard(x, mesh)` on "
                f"the mesh given to the inference call.")
        return place(x, replicated)

    return tuple(put(x) for x in dynamic)


def data_rows(dynamic: tuple) -> dict:
    """`{rows: index in dynamic}`: the global lengths of the axes sharded over a mesh's data
    axis (of size > 1)."""
    rows = {}
    for i, x in enumerate(dynamic):
        sharding = getattr(x, "sharding", None)
        if not isinstance(sharding, NamedSharding) or \
                dict(sharding.mesh.shape).get(distributed.DATA, 1) == 1:
            continue
        for axis, part in enumerate(tuple(sharding.spec)):
            names = part if isinstance(part, tuple) else (part,)
            if distributed.DATA in names:
                rows.setdefault(x.shape[axis], i)
    return rows


def check_data(api: str, fns, dynamic: tuple, *, subsample_ok: bool = False) -> None:
    """Refuse, with a `SiteError` naming the site, a latent site inside a plate whose size is
    the row count of data sharded over the data axis (its values would be gathered to every
    device at each evaluation), and a subsampled plate on sharded data (unless `subsample_ok`).
    Models of NumPyro's backend (tests only) are not analysed."""
    rows = data_rows(dynamic)
    if not rows or _model._backend is not None:
        return
    args, kwargs = fns.args(dynamic)
    sites, analysis = _model.recorded_sites(fns.model, args, kwargs)
    for name, site in analysis.items():
        if site.type == "plate" and not subsample_ok:
            raise SiteError(
                f"`{api}`: plate `{name}` subsamples its rows, but the model's data are sharded "
                f"over the mesh's data axis: a subsample would gather rows from every device. "
                f"Run on unsharded data, or leave out `subsample_size`.")
    for name, site in sites.items():
        if site.kind != "sample" or site.is_observed:
            continue
        for frame in site.plates:
            if frame.size in rows:
                raise SiteError(
                    f"`{api}`: latent site `{name}` sits inside plate `{frame.name}` of size "
                    f"{frame.size}, the number of rows of model data sharded over the mesh's "
                    f"data axis (argument leaf {rows[frame.size]}). effppl shards data, not latent "
                    f"values: such a site would be gathered whole onto every device at each "
                    f"gradient. Replicate the data (`chain` axis only), or marginalise the "
                    f"per-row latent.")


def readable(tree):
    """`tree`, its process-spanning arrays gathered to every host (numpy), once; unchanged when
    every array is readable here."""
    return distributed.gather(tree) if distributed.spans_processes(tree) else tree


def split_draws(tree, mesh):
    """`tree`'s arrays (leading axis: draws) split over `mesh`'s chain axis when their number
    divides evenly, else replicated on it."""
    leaves = jax.tree.leaves(tree)
    n = mesh.shape[distributed.CHAIN]
    split = leaves and all(x.shape[:1] == leaves[0].shape[:1] and x.shape[0] % n == 0
                           for x in leaves)
    return place(tree, NamedSharding(mesh, P(distributed.CHAIN) if split else P()))


def check_mesh(mesh, api: str):
    """`mesh` itself, or a `ShardingError` when it is not one of `effppl.distributed`'s."""
    if mesh is not None:
        try:
            distributed._check_mesh(mesh, api)
        except distributed.DistributedError as err:
            raise ShardingError(str(err)) from None
    return mesh
