"""`chain_method="sharded"`: the sampler's programs as a `shard_map` over a mesh's chain axis.

A `jit(vmap)` over chains whose chain axis is sharded leaves XLA's partitioner to run NUTS's
while loops in lockstep: each loop condition becomes an all-reduce of a predicate, every step of
every chain waits for the slowest chain on any device. Under `shard_map` each device runs its
own chains (`k = num_chains / mesh.shape["chain"]`, a `vmap` over them, also for `k = 1`) and
the sampler's program holds no collective over chains. The mesh's `data` axis
stays automatic (`shard_map(..., axis_names={"chain"})`): data sharded over it are summed by
XLA's partitioner, one all-reduce per evaluation of the log density and its gradient.

Chain `c`'s keys are `split(key)[c]`'s whatever the layout: the keys of every chain are made in
one program (as for one device) and each device is given its chains' rows. Each device runs the
vectorized sampler's program on its chains (a `vmap`, never the unbatched one-chain program), so
on CPU the draws equal `chain_method="vectorized"`'s bit for bit wherever XLA rounds a chain's
row the same at every batch size (elementwise operations and reductions do); a matrix product's
kernel depends on the batch size and rounds differently (~1e-14 per evaluation). Layouts with
the same number of chains per device run the same program: identical draws.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ... import distributed
from .._compile._cache import cached
from .._compile._persistent import stored
from .._sharding import ShardingError, check_data, check_mesh
from ._sampler import by_user_code, split_run_key

__all__ = ["ShardedSampler", "chain_mesh", "run_keys", "sharded_sampler", "check_run"]

_CHAINS = P(distributed.CHAIN)


def chain_mesh(num_chains: int, mesh, api: str):
    """The mesh a sharded run uses: `mesh` (checked: its chain axis divides `num_chains`), or by
    default the global devices, as many as divide `num_chains` in one process (all of them, and
    `num_chains` divisible by their number, with several processes)."""
    if mesh is None:
        devices = jax.devices()
        if jax.process_count() > 1:
            if num_chains % len(devices):
                raise ShardingError(
                    f"`{api}`: {num_chains} chains do not divide over the {len(devices)} devices "
                    f"of {jax.process_count()} processes. Pass `mesh=effppl.distributed."
                    f"make_mesh(chain=..., data=...)` whose chain axis divides num_chains.")
            return distributed.make_mesh()
        n = max(d for d in range(1, len(devices) + 1) if num_chains % d == 0)
        return distributed.make_mesh(chain=n, devices=devices[:n])
    check_mesh(mesh, api)
    if num_chains % mesh.shape[distributed.CHAIN]:
        raise ShardingError(
            f"`{api}`: num_chains={num_chains} must be a multiple of the mesh's chain axis "
            f"({mesh.shape[distributed.CHAIN]} devices): each device runs the same number of "
            f"chains.")
    return mesh


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _keys(key, num_chains, num_steps, mesh):
    chains = NamedSharding(mesh, _CHAINS)
    return jax.lax.with_sharding_constraint(
        split_run_key(key, num_chains, num_steps), (NamedSharding(mesh, P()), chains, chains))


# the run's keys on one device: one program (stored across processes, as the sampler's), not a
# few eager splits
_one_device_keys = stored(jax.jit(split_run_key, static_argnums=(1, 2)), None, "keys",
                          static_argnums=(1, 2))


def run_keys(key, num_chains: int, num_steps: int, mesh):
    """`(init_key, its split per chain, keys[chain, step])` as `_sampler.split_run_key` makes
    them, placed on `mesh` (None: one device): split per chain over its chain axis (so that the
    initial points' programs, partitioned along it, also compute each device's chains at that
    device's batch size: XLA's rounding of a batched matrix product depends on it), `init_key`
    replicated."""
    if mesh is None:
        return _one_device_keys(key, num_chains, num_steps)
    raw = np.asarray(jax.random.key_data(key))  # the same in every process: host data
    return _keys(jax.random.wrap_key_data(raw), num_chains, num_steps, mesh)


def _named(fn, name):
    """`fn`, named `name` (JAX names the compiled program, and XLA's dumps, after it)."""
    fn.__name__ = fn.__qualname__ = name
    return fn


class ShardedSampler:
    """`Sampler`'s `start` and `chunk` as `shard_map`s over `mesh`'s chain axis (cached per
    sampler and mesh, and per buffer length)."""

    def __init__(self, sampler, mesh):
        self.sampler, self.mesh = sampler, mesh
        self._starts: dict = {}
        self._chunks: dict = {}

    def start(self, num_warmup: int):
        """`Sampler.start(num_warmup)` as a `shard_map` (cached per value)."""
        if num_warmup not in self._starts:
            fn = functools.partial(self.sampler._start, num_warmup=num_warmup)
            start = self._mapped(_named(jax.vmap(fn), "start"), (_CHAINS,) * 3)
            self._starts[num_warmup] = stored(start, None, "start")
        return self._starts[num_warmup]

    def schedule(self, num_warmup: int):
        """The plain sampler's warmup schedule (`Sampler.schedule`)."""
        return self.sampler.schedule(num_warmup)

    def _mapped(self, fn, in_specs):
        mapped = jax.shard_map(fn, mesh=self.mesh, in_specs=in_specs, out_specs=_CHAINS,
                               axis_names={distributed.CHAIN}, check_vma=False)
        return jax.jit(mapped)

    def _program_key(self, length, *args):
        """The plain sampler's key of the chunk (`Sampler._program_key`), marked as the
        `shard_map` over this mesh's axes (the mesh's devices key it too, in `stored`)."""
        key = self.sampler._program_key(length, *args)
        return None if key is None else repr(("sharded", dict(self.mesh.shape), key))

    def chunk(self, length: int):
        """The sampler's chunk with buffers of `length` draws: chain state and keys split over
        the chain axis; the span, schedule and data given whole to every device's chains."""
        return by_user_code(self.sampler, self._chunks, length, self._build_chunk)

    def _build_chunk(self, length: int):
        fn = functools.partial(self.sampler._chunk, length=length)
        per_device = jax.vmap(fn, in_axes=(0, 0, None, None, None))
        jitted = self._mapped(_named(per_device, "chunk"), (_CHAINS, _CHAINS, P(), P(), P()))
        return stored(jitted, functools.partial(self._program_key, length), "chunk")


def sharded_sampler(sampler, mesh) -> ShardedSampler:
    """The cached `ShardedSampler` of `sampler` on `mesh`."""
    return cached(("sharded-sampler", sampler, mesh), lambda: ShardedSampler(sampler, mesh))


def check_run(api: str, fns, dynamic: tuple, key, settings: dict) -> None:
    """Before a sharded run: the model's sites fit its sharded data (`check_data`), and every
    process passed the same key, settings and data types (`distributed.check_same`)."""
    check_data(api, fns, dynamic)
    types = [(x.shape, str(x.dtype), str(getattr(x, "sharding", None))) for x in dynamic]
    distributed.check_same(api, rng_key=key, settings=settings, data=types)
