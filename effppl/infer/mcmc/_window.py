"""Stan's window adaptation, one warmup step at a time, from blackjax's public pieces.

`blackjax.window_adaptation(...).run` runs the whole warmup in one call; effppl runs it in
chunks (for a progress bar, and so that one executable serves warmup and sampling). This is the
step it scans: Nesterov's dual averaging of the step size in every window
(`blackjax.adaptation.step_size.dual_averaging_adaptation`), a mass-matrix estimator in the
slow windows (a `MetricCore` from `blackjax.adaptation.metric_recipes`: Welford's diagonal or
dense covariance), and at the end of each slow window the new inverse mass matrix with the step
size restarted from the window's average, on Stan's schedule (`build_schedule`).
`tests/inference/test_mcmc.py` checks that a warmup gives exactly what
`blackjax.window_adaptation(...).run` gives for the same keys.

**References:** Stan Reference Manual, "HMC algorithm parameters: automatic parameter tuning"
(the windowed schedule); Hoffman and Gelman (2014), §3.2 (dual averaging).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from blackjax.adaptation.metric_recipes import lookup_recipe
from blackjax.adaptation.step_size import dual_averaging_adaptation
from jax.flatten_util import ravel_pytree

__all__ = ["WindowState", "window_adaptation"]


class WindowState(NamedTuple):
    """The adaptation's state: `ss_state` (dual averaging), `imm_state` (the mass-matrix
    estimator), and the `step_size` and `inverse_mass_matrix` the kernel uses now."""

    ss_state: Any
    imm_state: Any
    step_size: Any
    inverse_mass_matrix: Any


def window_adaptation(dense_mass, target_accept_prob: float, adapt_mass_matrix: bool = True,
                      structure=None, regularize: bool = True):
    """`(init, update, final, restart)` of Stan's window adaptation, diagonal or dense.

    - `init(position, step_size) -> WindowState`.
    - `update(state, stage, position, grad, acceptance_rate) -> WindowState`: one warmup step,
      `stage = (slow?, ends a slow window?)` a row of Stan's schedule.
    - `final(state) -> (step_size, inverse_mass_matrix)`: the averaged step size of the last
      window and the last inverse mass matrix.
    - `restart(state, step_size) -> WindowState`: the step size's adaptation started anew there.

    `dense_mass`: a bool, or NumPyro's site groups (a dense matrix whose entries outside the
    groups' blocks are zeroed after each slow window, `_mass.py`); `adapt_mass_matrix=False`
    keeps the initial matrix; `structure(position) -> (mask, initial)` (`_mass.structure` of
    the position's sites) gives the block mask and the initial inverse mass matrix (None: the
    identity). `regularize=False` (NumPyro's `regularize_mass_matrix=False`): each window's
    matrix is the draws' sample covariance `m2 / (n - 1)` itself, not Stan's
    `n / (n + 5) * cov + 5 / (n + 5) * 1e-3 * I`.
    """
    recipe = lookup_recipe("welford_diag" if dense_mass is False else "welford_dense")
    core = recipe.build_core(imm_shrinkage_to_previous=0.0, initial_inverse_mass_matrix=None)
    da_init, da_update, da_final = dual_averaging_adaptation(target_accept_prob)
    mask_of: dict = {}  # the block mask, found by `init` from the position's sites

    def init(position, step_size) -> WindowState:
        imm_state = core.init(ravel_pytree(position)[0].size)
        mask, initial = (None, None) if structure is None else structure(position)
        mask_of["mask"] = mask
        if initial is not None:
            imm_state = imm_state._replace(inverse_mass_matrix=jnp.asarray(
                initial, imm_state.inverse_mass_matrix.dtype))
        return WindowState(da_init(step_size), imm_state, step_size, imm_state.inverse_mass_matrix)

    def fast(position, grad, acceptance_rate, state):
        ss = da_update(state.ss_state, acceptance_rate)
        return state._replace(ss_state=ss, step_size=jnp.exp(ss.log_step_size))

    def slow(position, grad, acceptance_rate, state):
        if not adapt_mass_matrix:
            return fast(position, grad, acceptance_rate, state)
        imm = core.update(state.imm_state, position, grad)
        ss = da_update(state.ss_state, acceptance_rate)
        return WindowState(ss, imm, jnp.exp(ss.log_step_size), imm.inverse_mass_matrix)

    def end_of_slow_window(state):
        imm = core.final(state.imm_state) if adapt_mass_matrix else state.imm_state
        if adapt_mass_matrix and not regularize:  # the window's sample covariance
            _, m2, count = state.imm_state.wc_state
            imm = imm._replace(inverse_mass_matrix=m2 / (count - 1))
        mask = mask_of.get("mask")
        if mask is not None and adapt_mass_matrix:
            imm = imm._replace(inverse_mass_matrix=imm.inverse_mass_matrix * jnp.asarray(
                mask, imm.inverse_mass_matrix.dtype))
        ss = da_init(da_final(state.ss_state))
        return WindowState(ss, imm, jnp.exp(ss.log_step_size), imm.inverse_mass_matrix)

    def update(state, stage, position, grad, acceptance_rate) -> WindowState:
        is_slow, ends_window = stage
        state = jax.lax.switch(is_slow, (fast, slow), position, grad, acceptance_rate, state)
        return jax.lax.cond(ends_window, end_of_slow_window, lambda s: s, state)

    def final(state):
        return jnp.exp(state.ss_state.log_step_size_avg), state.imm_state.inverse_mass_matrix

    def restart(state, step_size) -> WindowState:
        """The dual averaging restarted from `step_size` (NumPyro's `find_heuristic_step_size`)."""
        return state._replace(ss_state=da_init(step_size), step_size=step_size)

    return init, update, final, restart
