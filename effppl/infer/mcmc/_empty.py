"""MCMC of a model with no latent site (NumPyro runs it and returns no draws of latent sites):
there is nothing to move, so no sampler runs; each draw holds the model's deterministic sites."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._results import MCMCResults, MCMCState

__all__ = ["without_latents"]


def without_latents(fns, info, dynamic, num_chains: int, num_draws: int) -> MCMCResults:
    """The results of a run of a model with no latent site (`draws_without_latents`), and its
    last state: no position, log density 0, unit step size."""
    empty = {}
    last = MCMCState(position=empty, logdensity=jnp.zeros((num_chains,)), logdensity_grad=empty,
                     step_size=jnp.ones((num_chains,)), inverse_mass_matrix=empty)
    samples, stats = draws_without_latents(fns, dynamic, num_chains, num_draws)
    return MCMCResults(samples=samples, stats=stats, fns=fns, dynamic=dynamic, info=info,
                       last_state=last)


def draws_without_latents(fns, dynamic, num_chains: int, num_draws: int):
    """`(samples, stats)` of `num_draws` draws of `num_chains` chains of a model with no latent
    site: its deterministic sites (constant over draws: nothing random moves them), and
    statistics of transitions that never move (nothing diverges, every proposal is accepted, no
    leapfrog step)."""
    values = fns.constrain({}, dynamic)
    samples = {name: jnp.broadcast_to(jnp.asarray(v), (num_chains, num_draws, *jnp.shape(v)))
               for name, v in values.items()}
    zeros = np.zeros((num_chains, num_draws))
    stats = {"diverging": zeros.astype(bool), "acceptance_rate": zeros + 1.0,
             "energy": zeros, "n_steps": zeros.astype(np.int32),
             "tree_depth": zeros.astype(np.int32), "lp": zeros, "step_size": zeros + 1.0}
    return samples, jax.tree.map(jnp.asarray, stats)
