"""PRNG key arguments: what `seed`, `MCMC.run`, `Predictive` and `SVI` accept as a key."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def key_data(rng_key: Any, what: str, *, seeds: bool = True) -> jax.Array:
    """`rng_key` as raw key data, `uint32[2]`.

    **Arguments:**
    - `rng_key`: a typed key `jax.random.key(...)`, a raw key `jax.random.PRNGKey(...)`, or with
      `seeds=True` (NumPyro's `seed` handler) an int or 0-d int array, the seed of a key.
    - `what`: the API and argument, for the error message (e.g. "`effppl.infer.MCMC.run`").

    **Raises:** `TypeError` for anything else, e.g. a batch of keys.
    """
    dtype = getattr(rng_key, "dtype", None)
    shape = np.shape(rng_key) if dtype is not None else None
    is_int = isinstance(rng_key, (int, np.integer))
    if seeds and (is_int or (shape == () and jnp.issubdtype(dtype, jnp.integer))):
        return jax.random.PRNGKey(rng_key)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key) and shape == ():
        return jax.random.key_data(rng_key)
    if dtype == jnp.uint32 and shape == (2,):
        return jnp.asarray(rng_key)
    got = type(rng_key).__name__ + (f" of dtype {dtype} and shape {shape}" if dtype is not None
                                    else "")
    accepted = "an int seed, " if seeds else "a PRNG key: "
    raise TypeError(f"{what} expected {accepted}a raw PRNG key `jax.random.PRNGKey(...)` "
                    f"(uint32[2]) or a typed PRNG key `jax.random.key(...)`, one key (not a batch "
                    f"of keys), but got {got}.")


def typed_key(rng_key: Any, what: str, error: type[Exception] = TypeError) -> jax.Array:
    """`rng_key` (a typed or raw key, never an int seed, as NumPyro's `MCMC.run` takes) as a typed
    key. **Raises:** `error` (default `TypeError`) with `key_data`'s message."""
    dtype = getattr(rng_key, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key) \
            and np.shape(rng_key) == ():
        return rng_key  # as it is: keeps its PRNG implementation
    try:
        return jax.random.wrap_key_data(key_data(rng_key, what, seeds=False))
    except TypeError as err:
        if error is TypeError:
            raise
        raise error(str(err)) from None
