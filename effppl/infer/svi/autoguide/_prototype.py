"""An autoguide's first run and initial values.

The guide's *prototype* (the model's latent sites and concrete arguments, read by `median`,
`quantiles`, `sample_posterior`) is set up when the guide first runs, as NumPyro's: by `SVI.init`,
or by a run at arguments the outermost handler was given (`trace(seed(guide, key)).get_trace(
*args)`). Later runs guide those sites only (`Predictive` with `y=None` leaves `y` to the model).

Initial values come from `init_loc_fn` inside the guide body (hidden by `block`). In a first run
their key is the first `seed` gives, as NumPyro's guide draws it when it sets up its prototype,
and `init_to_uniform` draws as NumPyro does, so SVI.init's params equal NumPyro's at the same key;
in later runs (SVI substitutes the params) that code is dead and XLA drops it.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp

from .... import handlers
from ....handlers import internal as ppl
from ..._init import InitStrategy, ModelContext, _InitToUniform
from ..._model import initialising
from ._errors import AutoGuideError

__all__ = ["first_run", "in_first_run", "init_strategy", "initial_locs"]

@contextlib.contextmanager
def first_run():
    """The autoguides run in this block run for the first time (`AutoGuide._init_key`):
    `SVI.init`'s run of its guide, whose prototype it set up before."""
    with ppl.flag("guide_first_run"):
        yield


def in_first_run() -> bool:
    """Whether this code runs inside a `first_run()` block."""
    return ppl.is_set("guide_first_run")


def init_strategy(init_loc_fn, guide: str) -> InitStrategy:
    """`init_loc_fn` as an `InitStrategy`: one already, or NumPyro's style, the function itself
    (`init_loc_fn=init_to_median`). **Raises:** `AutoGuideError` naming the guide otherwise."""
    if isinstance(init_loc_fn, InitStrategy):
        return init_loc_fn
    if callable(init_loc_fn):
        made = init_loc_fn()
        if isinstance(made, InitStrategy):
            return made
    raise AutoGuideError(f"effppl.infer.autoguide.{guide}(model, init_loc_fn=...) expected an "
                         f"init strategy (`init_to_uniform()`, `init_to_median()`, "
                         f"`init_to_value(values=...)`), but got {init_loc_fn!r}.")


def uniform_chain(rng_key, types: dict, radius: float) -> dict:
    """`{site: Uniform(-radius, radius) draws}` of the unconstrained `types` (`{site: (shape,
    dtype)}`, in the model's order), as NumPyro's `find_valid_initial_params` draws its first
    point: a key split off for each site in turn, a draw in the default float type."""
    key, sub = jax.random.split(rng_key)
    out = {}
    for name, (shape, dtype) in types.items():
        out[name] = jax.random.uniform(sub, shape, minval=-radius, maxval=radius).astype(dtype)
        key, sub = jax.random.split(key)
    return out


def initial_locs(model, strategy: InitStrategy, args, kwargs, sites, key=None) -> dict:
    """Initial unconstrained values of the latent `sites` (`{name: Latent}`; stacked for sites
    in loops), from the init `strategy` with the raw `key` (`AutoGuide._init_key`; None: a fixed
    key, in a run whose initial values are not its first's, dead code once SVI substitutes the
    params, which XLA removes). Runs `model` hidden by `block`. `init_to_uniform` draws as
    NumPyro's `find_valid_initial_params` draws its first point, so the initial params equal
    NumPyro's at the same key."""
    key = jax.random.PRNGKey(0) if key is None else key
    if isinstance(strategy, _InitToUniform):
        return uniform_chain(key, {n: (latent.shape, latent.dtype)
                                   for n, latent in sites.items()}, strategy.radius)
    key = jax.random.wrap_key_data(key)

    def propose():
        with initialising():
            ctx = ModelContext(model=model, args=args, kwargs=kwargs, latent=tuple(sites))
            return strategy.propose(key, ctx, strategy.dynamic())

    locs = handlers.block(propose)()
    return {n: jnp.asarray(locs[n], sites[n].dtype).reshape(sites[n].shape) for n in sites}
