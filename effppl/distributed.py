"""More than one device, more than one host: JAX's own multi-controller runtime for inference.

effppl writes no distributed engine of its own. `initialize` is `jax.distributed.initialize`
(gloo collectives on CPU, NCCL on GPU); `make_mesh` lays the global devices out on a `chain` and
a `data` axis; `shard` places a process's rows of a data array on that mesh; `gather` reads
process-spanning results back to every host. `effppl.infer.MCMC(..., chain_method="sharded",
mesh=mesh)` runs the chains as a `shard_map` over the `chain` axis (no collective in the
sampler), and data sharded over the `data` axis are summed by XLA's partitioner (one all-reduce
of value and gradient per evaluation). Every process runs the same script with the same key.

Sharp edges:

- `initialize` must come first, before anything asks JAX for a device (JAX fixes its devices
  on first use); to force several CPU devices, set
  `XLA_FLAGS=--xla_force_host_platform_device_count=N` before JAX starts too.
- The mesh is row-major over the devices sorted by process: the `data` axis varies fastest, so
  `make_mesh(chain=num_hosts, data=devices_per_host)` keeps every all-reduce inside a host.
- `shard` takes the rows *this process* holds (`process_rows` says which); rows must divide
  evenly over the `data` axis (pad and `mask` the padding, if needed).
- A process that dies after `initialize` takes the others down: JAX's coordination service
  notices the missing heartbeats (`heartbeat_timeout_seconds`) and ends every process, with a
  message naming the task that stopped. Nothing hangs; nothing can be resumed in-process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._errors import EffpplError

__all__ = ["DistributedError", "initialize", "make_mesh", "shard", "replicate", "process_rows",
           "gather", "check_same", "spans_processes"]

CHAIN, DATA = "chain", "data"
"""The names of the mesh axes: chains are split over `CHAIN`, data rows over `DATA`."""


class DistributedError(EffpplError, RuntimeError):
    """A distributed setting is invalid, or the processes of a run disagree."""


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, local_device_ids: Sequence[int] | None = None,
               initialization_timeout: int = 300, heartbeat_timeout_seconds: int = 100,
               **kwargs) -> None:
    """Join (or start) a multi-process JAX run: `jax.distributed.initialize`, a no-op for one
    process.

    Call it first, in every process of the run, before any other JAX call.

    **Arguments:** as `jax.distributed.initialize`: `coordinator_address` (`"host:port"` of
    process 0), `num_processes`, `process_id` (`0 <= process_id < num_processes`),
    `local_device_ids`, `initialization_timeout` and `heartbeat_timeout_seconds` (seconds: a
    process silent this long is taken as dead, and every process stops); other keywords go to
    JAX unchanged. Without arguments, JAX detects a cluster (Slurm, Open MPI, TPU, ...); where it
    finds none, this is one process and nothing happens. `num_processes=1` does nothing.

    **Returns:** `None`. A second call after a successful one does nothing.

    **Raises:** `DistributedError` (a `RuntimeError`) when JAX has already started (a device was
    asked for, an array made), when the arguments are invalid, or when the coordinator cannot be
    reached within `initialization_timeout`.

    Example:
        >>> import effppl.distributed as dist
        >>> dist.initialize(num_processes=1)   # one process: nothing to join
        >>> import jax; jax.process_count()
        1

    **References:** JAX, "Multi-host and multi-process environments"
    (`jax.distributed.initialize`).
    """
    if num_processes == 1 or jax.distributed.is_initialized():
        return
    every = (coordinator_address, num_processes, process_id, local_device_ids)
    try:
        jax.distributed.initialize(
            coordinator_address, num_processes, process_id, local_device_ids,
            initialization_timeout=initialization_timeout,
            heartbeat_timeout_seconds=heartbeat_timeout_seconds, **kwargs)
    except RuntimeError as err:
        if "must be called before" in str(err):
            raise DistributedError(
                "`effppl.distributed.initialize` must run before JAX starts: something already "
                "asked JAX for its devices or made an array (jax.devices(), jnp.ones(...), a "
                "model run). Call it first in the script, right after the imports, in every "
                "process.") from None
        raise DistributedError(f"`effppl.distributed.initialize` could not join the run: "
                               f"{err}") from err
    except (ValueError, TypeError) as err:
        if all(a is None for a in every) and "coordinator_address" in str(err):
            return  # no cluster found: one process
        raise DistributedError(f"`effppl.distributed.initialize(coordinator_address="
                               f"{coordinator_address!r}, num_processes={num_processes!r}, "
                               f"process_id={process_id!r})`: {err}") from None


def _global_devices(devices):
    devices = list(jax.devices() if devices is None else devices)
    return sorted(devices, key=lambda d: (d.process_index, d.id))


def make_mesh(chain: int | None = None, data: int = 1, *, devices=None) -> Mesh:
    """A mesh of the global devices (every process's) with axes `("chain", "data")`.

    **Arguments:** `chain`: the number of groups of chains (default: all devices over `data`);
    `data`: the number of shards of the data rows; `chain * data` must equal the number of
    devices. `devices`: the devices to use (default `jax.devices()`, every process's).

    **Returns:** a `jax.sharding.Mesh` of shape `(chain, data)`, devices sorted by process, then
    id, laid out row-major (the `data` axis varies fastest: a host's devices share chains).

    **Raises:** `DistributedError` (a `RuntimeError`) when the sizes do not fit the devices.

    Example:
        >>> import jax, numpy as np
        >>> import effppl.distributed as ed
        >>> mesh = ed.make_mesh()
        >>> dict(mesh.shape) == {"chain": jax.device_count(), "data": 1}
        True
    """
    devices = _global_devices(devices)
    for name, value in (("chain", chain), ("data", data)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                  or value < 1):
            raise DistributedError(f"`effppl.distributed.make_mesh({name}=...)` expected a "
                                   f"positive int, but got {value!r}.")
    if chain is None:
        chain = len(devices) // data if len(devices) % data == 0 else 0
    if chain * data != len(devices):
        raise DistributedError(
            f"`effppl.distributed.make_mesh(chain={chain or None}, data={data})` needs "
            f"chain * data devices, but there are {len(devices)} ({jax.process_count()} "
            f"process(es)). Choose sizes whose product is {len(devices)}, or pass `devices`.")
    return Mesh(np.asarray(devices, dtype=object).reshape(int(chain), int(data)), (CHAIN, DATA))


def _check_mesh(mesh, api: str) -> None:
    if not isinstance(mesh, Mesh) or set(mesh.axis_names) != {CHAIN, DATA}:
        got = dict(mesh.shape) if isinstance(mesh, Mesh) else type(mesh).__name__
        raise DistributedError(f"`{api}` expected a mesh from `effppl.distributed.make_mesh` "
                               f"(axes 'chain' and 'data'), but got {got}.")


def process_rows(num_rows: int, mesh: Mesh) -> slice:
    """The rows of a data array of `num_rows` rows that this process holds when it is sharded
    over `mesh`'s `data` axis (`shard`'s input in this process).

    **Returns:** a `slice` of the global rows. **Raises:** `DistributedError` when `num_rows`
    does not divide evenly over the `data` axis.

    Example:
        >>> import jax, numpy as np
        >>> import effppl.distributed as ed
        >>> ed.process_rows(8, ed.make_mesh())
        slice(0, 8, None)
    """
    _check_mesh(mesh, "effppl.distributed.process_rows")
    n_data = mesh.shape[DATA]
    _check_rows(num_rows, n_data, "effppl.distributed.process_rows")
    mine = _held_shards(mesh)
    if not mine:
        return slice(0, 0)
    per = num_rows // n_data
    return slice(min(mine) * per, (max(mine) + 1) * per)


def _held_shards(mesh: Mesh) -> list[int]:
    """The indices along `mesh`'s data axis of the shards this process's devices hold."""
    return [i for i in range(mesh.shape[DATA])
            if any(d.process_index == jax.process_index() for d in mesh.devices[:, i])]


def _check_rows(num_rows, n_data, api):
    if num_rows % n_data:
        raise DistributedError(
            f"`{api}`: {num_rows} rows do not divide evenly over the mesh's data axis of "
            f"{n_data} devices. Pad the data to a multiple of {n_data} rows and mask the padding "
            f"(`effppl.handlers.mask`), or choose another `data` size.")


def shard(x, mesh: Mesh, axis: int = 0) -> jax.Array:
    """A global array whose `axis` is split over `mesh`'s `data` axis, made from this process's
    rows (`process_rows`: in one process, all of them); replicated over the `chain` axis.

    **Arguments:** `x`: this process's rows (array-like); `mesh`: from `make_mesh`; `axis`: the
    axis holding the rows (that of the plate over them).

    **Returns:** a `jax.Array` of the global shape, sharded `P(..., "data")`.

    **Raises:** `DistributedError` when the global rows do not divide evenly over the devices.

    Example:
        >>> import jax, numpy as np
        >>> import effppl.distributed as ed
        >>> x = ed.shard(np.arange(8.0), ed.make_mesh(chain=1, data=jax.device_count()))
        >>> x.shape
        (8,)
    """
    api = "effppl.distributed.shard"
    _check_mesh(mesh, api)
    x = np.asarray(x) if not isinstance(x, jax.Array) else x
    if not 0 <= axis < x.ndim:
        raise DistributedError(f"`{api}(x, mesh, axis={axis})`: x of shape {x.shape} has no "
                               f"axis {axis}.")
    n_data = mesh.shape[DATA]
    blocks = len(_held_shards(mesh)) or 1
    if x.shape[axis] % blocks:
        raise DistributedError(
            f"`{api}`: this process holds {blocks} of the {n_data} data shards, but x has "
            f"{x.shape[axis]} rows along axis {axis}, not a multiple of {blocks}.")
    global_shape = list(x.shape)
    global_shape[axis] = x.shape[axis] // blocks * n_data
    _check_rows(global_shape[axis], n_data, api)
    spec = PartitionSpec(*([None] * axis), DATA)
    return jax.make_array_from_process_local_data(NamedSharding(mesh, spec), x,
                                                  tuple(global_shape))


def replicate(tree, mesh: Mesh):
    """`tree`'s arrays, the same in every process, placed whole on every device of `mesh`.

    **Arguments:** `tree`: a pytree of arrays; `mesh`: from `make_mesh`.

    **Returns:** the tree of `jax.Array`s, each replicated (`PartitionSpec()`) on `mesh`.

    **Raises:** `DistributedError` for a mesh not made by `make_mesh`.

    Example:
        >>> import jax, numpy as np
        >>> import effppl.distributed as ed
        >>> ed.replicate({"w": np.zeros(3)}, ed.make_mesh())["w"].sharding.is_fully_replicated
        True
    """
    _check_mesh(mesh, "effppl.distributed.replicate")
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def spans_processes(tree) -> bool:
    """Whether an array among `tree`'s leaves has parts this process cannot read alone (then
    `gather` reads it, in every process).

    **Returns:** a bool; False for host values and arrays of this process's devices.

    Example:
        >>> import jax, numpy as np
        >>> import effppl.distributed as ed
        >>> ed.spans_processes({"a": jax.numpy.ones(2), "n": 3})
        False
    """
    return any(_spans(x) for x in jax.tree.leaves(tree))


def _spans(x) -> bool:
    return isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated


def gather(tree):
    """`tree` with each array read to the host, as numpy: a process-spanning array is gathered
    from every process (one collective for the whole tree: every process must call it).

    **Returns:** the same tree, numpy arrays of the global shapes; non-array leaves unchanged.

    Example:
        >>> import jax, numpy as np
        >>> import effppl.distributed as ed
        >>> ed.gather({"a": jax.numpy.ones(2)})["a"]
        array([1., 1.], dtype=float32)
    """
    leaves, treedef = jax.tree.flatten(tree)
    spanning = [i for i, x in enumerate(leaves) if _spans(x)]
    if spanning:
        from jax.experimental import multihost_utils

        got = multihost_utils.process_allgather([leaves[i] for i in spanning], tiled=True)
        for i, value in zip(spanning, got):
            leaves[i] = np.asarray(value)
    leaves = [np.asarray(x) if isinstance(x, (jax.Array, np.ndarray)) else x for x in leaves]
    return jax.tree.unflatten(treedef, leaves)


def check_same(api: str, **settings: Any) -> None:
    """Check that every process passed the same `settings` (a collective; nothing to check in
    one process).

    **Arguments:** `api`: the call, for the message; `settings`: name -> value (arrays by their
    bytes, anything else by its `repr`).

    **Raises:** `DistributedError` naming the settings and the processes that differ from
    process 0.

    Example:
        >>> import jax, numpy as np
        >>> import effppl.distributed as ed
        >>> ed.check_same("my_run", rng_key=jax.random.key(0), num_chains=4)  # one process
    """
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    names = sorted(settings)
    digests = np.stack([np.frombuffer(_digest(settings[n]), np.uint8) for n in names])
    every = np.asarray(multihost_utils.process_allgather(digests))  # [process, setting, 32]
    differ = {names[j]: [p for p in range(every.shape[0]) if not np.array_equal(every[p, j],
                                                                               every[0, j])]
              for j in range(len(names))}
    differ = {n: ps for n, ps in differ.items() if ps}
    if differ:
        said = "; ".join(f"`{n}` in process(es) {ps}" for n, ps in differ.items())
        raise DistributedError(
            f"`{api}`: every process must run the same call with the same key and settings, but "
            f"these differ from process 0's: {said} (this is process {jax.process_index()}).")


def _digest(value) -> bytes:
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(value):
        if isinstance(leaf, (jax.Array, np.ndarray, np.generic)):
            if jax.numpy.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                leaf = jax.random.key_data(leaf)
            a = np.asarray(leaf)
            h.update(f"{a.dtype}{a.shape}".encode() + a.tobytes())
        else:
            h.update(repr(leaf).encode())
    h.update(repr(jax.tree.structure(value)).encode())
    return h.digest()
