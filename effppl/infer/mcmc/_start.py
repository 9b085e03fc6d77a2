"""Where `MCMC`'s chains start: a `post_warmup_state` (no warmup), the user's `init_params`, or
points drawn by the kernel's init strategy; and the new points of chains whose warmup restarts."""

import jax
import numpy as np

from .._init import find_initial_params, given_initial_params
from ._results import MCMCError, MCMCState
from ._warmup import restarted

__all__ = ["initial_chain", "restart_chains"]


def initial_chain(mcmc, sampler, fns, info, keys, dynamic, place, api, pws, init_params):
    """`(ChainState, num_warmup)` to start from.

    **Arguments:** `mcmc`: the `MCMC` (its kernel and settings); `sampler`: its compiled
    `Sampler`; `fns`, `info`, `dynamic`: the model's functions, sites and array arguments;
    `keys`: the initialisation's key and its split per chain; `place(tree)`: puts a tree with a
    leading chain axis where the chains run; `api`: the caller's name for errors; `pws`: the
    `post_warmup_state` to continue from, or None; `init_params`: the user's starting point, or
    None.

    **Raises:** `MCMCError` for `init_params` with a `post_warmup_state`, or a
    `post_warmup_state` of another model, chain count, or at which the log density is not
    finite; `InitializationError` when no finite initial point is found.
    """
    if pws is not None and init_params is not None:
        raise MCMCError(
            f"`{api}` got `init_params` while `post_warmup_state` is set: a run continuing "
            "from a saved state starts at its position. Set `mcmc.post_warmup_state = None` "
            "to start from `init_params` (with a new warmup).")
    if pws is not None and not isinstance(pws, MCMCState):
        raise MCMCError(
            f"`{api}`: `post_warmup_state` must be an `MCMCState` (`mcmc.last_state` or the "
            f"one `mcmc.warmup(...)` sets), or None, but got {type(pws).__name__}.")
    if pws is not None:  # continue after `warmup()` (or a previous run): no warmup
        chains = np.shape(pws.logdensity)[:1]
        if chains != (mcmc.num_chains,) or set(pws.position) != set(info.latent):
            raise MCMCError(
                f"`{api}`: `post_warmup_state` holds {chains[0] if chains else '?'} chains of "
                f"sites {sorted(pws.position)}, but this run has num_chains="
                f"{mcmc.num_chains} and model `{fns.name}` has latent sites "
                f"{sorted(info.latent)}. Set `post_warmup_state = None` to warm up anew.")
        # The log density and its gradient at the saved position are recomputed: the data
        # (or a global the model reads) may have changed since the state was saved.
        position = place(pws.position)
        pe, grad, _, _ = fns.potential_and_grad(position, dynamic, forward=_forward(mcmc))
        if not np.all(np.isfinite(np.asarray(pe))):
            raise MCMCError(
                f"`{api}`: the log density of model `{fns.name}` is not finite at the "
                f"`post_warmup_state`'s position (a state of another model or data?). Set "
                f"`post_warmup_state = None` to initialise and warm up anew.")
        chain = sampler.start(mcmc.num_warmup)(position, pe, grad)
        if pws.kernel_state is not None:  # (`SA`'s population)
            chain = chain._replace(state=chain.state._replace(**place(pws.kernel_state)))
        return chain._replace(step_size=pws.step_size,
                              inverse_mass_matrix=pws.inverse_mass_matrix), 0
    if init_params is not None:
        init = given_initial_params(fns, init_params, mcmc.num_chains, dynamic, api=api,
                                    forward=_forward(mcmc))
    else:
        init = find_initial_params(fns, mcmc.kernel.init_strategy, keys[0], mcmc.num_chains,
                                   dynamic, api=api, chain_keys=keys[1],
                                   max_rounding_error=mcmc.kernel.divergence_threshold,
                                   forward=_forward(mcmc))
    return sampler.start(mcmc.num_warmup)(*place(init)), mcmc.num_warmup


def _forward(mcmc) -> bool:
    """Whether the kernel takes gradients in forward mode (NumPyro's option)."""
    return getattr(mcmc.kernel, "forward_mode_differentiation", False)


def restart_chains(mcmc, sampler, fns, init_key, dynamic, place, api, first, keys, bad, attempt):
    """`(first, keys)` with the chains in `bad` given a new initial point (drawn with
    `init_key` folded with `attempt`: a function of the run's key, so a resumed run restarts
    as the uninterrupted one did) and new transition keys; the other chains keep theirs."""
    init = find_initial_params(fns, mcmc.kernel.init_strategy,
                               jax.random.fold_in(init_key, attempt), mcmc.num_chains,
                               dynamic, api=api,
                               max_rounding_error=mcmc.kernel.divergence_threshold,
                               forward=_forward(mcmc))
    fresh = sampler.start(mcmc.num_warmup)(*place(init))
    return restarted(first, keys, fresh, bad, attempt)
