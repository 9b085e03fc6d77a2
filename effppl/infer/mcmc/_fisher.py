"""Fisher-divergence low-rank mass-matrix adaptation (nutpie's warmup), inside the compiled
sampler (`mass_matrix="low_rank"`; the diagonal alone, re-estimated after every draw, is
`_fisher_diag`).

The inverse mass matrix minimises the sample Fisher divergence between the target and a Gaussian
transformed by it (Seyboldt, Carlson & Carpenter 2026, arXiv 2603.18845): its diagonal is
`sqrt(Var[x] / Var[grad log p])`, coordinate by coordinate, and its low-rank correction
(`mass_matrix="low_rank"`) the geometric mean of the draws' covariance and the inverse of the
gradients' covariance on the subspace their leading singular vectors span (Algorithm 1 there).
blackjax computes both (`fisher_score_diagonal_from_moments`; the `"fisher_low_rank"` recipe's
`MetricCore.final`, which estimates from the first `buffer_idx` rows of its buffers) and applies
the low-rank matrix `diag(sigma) (I + U (Lambda - I) U^T) diag(sigma)` in O(dk) per
leapfrog step (`LowRankInverseMassMatrix`), k = min(d, 100); beyond 100 dimensions no d x d
matrix is formed.

The schedule and buffers follow nutpie's (nuts-rs `EuclideanAdaptOptions`), precomputed by
blackjax's `build_growing_window_schedule`: the mass matrix adapts from the first draw, in
windows of 10 draws over the first 30% of the warmup, then in windows of 80 growing by 1.5x;
the last 15% tunes the step size alone. Each estimate uses the current window's draws and the
previous window's ("background") draws, so an early estimate sees 10 to 20 draws. The first
estimate starts from the gradient at the initial point (`1 / |grad|`, nutpie's default). The
step size follows one dual-averaging run (Hoffman & Gelman 2014, as in Stan) over the whole
warmup, restarted once, when the first estimate replaces the gradient-based one (as nutpie
does); Stan's schedule instead restarts it at every window's end, which with nutpie's 10-draw
windows would throw away its progress every 10 draws. Unlike nutpie, the estimate is refreshed
at each window's end rather than after every draw (an SVD per draw would cost more than the
gradients of most models).
"""

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
from blackjax.adaptation.low_rank_adaptation import build_growing_window_schedule
from blackjax.adaptation.metric_recipes import (
    LowRankMetricCoreState,
    lookup_recipe,
    seed_low_rank_sigma_from_grad,
)
from blackjax.adaptation.step_size import dual_averaging_adaptation
from blackjax.mcmc.metrics import LowRankInverseMassMatrix

__all__ = ["FisherState", "fisher_engine", "fisher_schedule", "buffer_size", "MAX_RANK"]

# The rank of the low-rank correction: min(d, MAX_RANK) columns of U. nutpie (nuts-rs
# `transform/adapt/low_rank.rs`) caps it only by the subspace its draws and gradients span;
# blackjax's recipe defaults to 10, which on a 20-d Gaussian with a 1e4 condition number left
# half the spectrum uncorrected (45 against 262 ESS per 1,000 gradients post warmup, quick mode,
# `benchmarks/adaptation_bench.py`). 100 columns keep the leapfrog cost O(100 d).
MAX_RANK = 100


def _rank(d: int) -> int:
    """Columns of the low-rank correction for `d` unconstrained dimensions."""
    return min(d, MAX_RANK)


_GAMMA = 1e-5  # nutpie's regularisation of the projected covariances
_CUTOFF = 2.0  # eigenvalues within [1/2, 2] are set to 1 (nutpie's c)


class FisherState(NamedTuple):
    """Warmup state of one chain: dual averaging, the current inverse mass matrix, and the
    ring buffers of draws and log-density gradients `[buffer, d]` with the number of rows
    `written` so far and the rows of the `background` (previous) and `foreground` (current)
    windows, the most recent `background + foreground` rows."""

    ss_state: Any
    step_size: Any
    inverse_mass_matrix: Any
    draws: Any
    grads: Any
    written: Any
    background: Any
    foreground: Any
    switches: Any


def fisher_schedule(num_warmup: int) -> np.ndarray:
    """nutpie's schedule, `int32[num_warmup, 2]`: rows `(adapt the mass matrix?, window end?)`."""
    with jax.ensure_compile_time_eval():
        sched = build_growing_window_schedule(num_warmup)
    return np.asarray(sched, np.int32).reshape(num_warmup, 2)


def buffer_size(num_warmup: int) -> int:
    """Rows of the ring buffers: the largest background + foreground a schedule holds."""
    if num_warmup == 0:
        return 1
    sched = fisher_schedule(num_warmup)
    ends = np.flatnonzero(sched[:, 1])
    if ends.size == 0:
        return 1
    sizes = np.diff(np.concatenate([[-1], ends]))
    pairs = sizes[1:] + sizes[:-1] if sizes.size > 1 else sizes
    return int(max(sizes.max(), pairs.max()))


def _ordered(buffer, written, n):
    """The ring buffer's last `n` rows first (oldest first), the rest after them."""
    rows = buffer.shape[0]
    return jnp.roll(buffer, -((written - n) % rows), axis=0)


def _low_rank_estimate(draws, grads, n):
    """nutpie's low-rank inverse mass matrix from the first `n` rows of `draws` and `grads`,
    through the public `"fisher_low_rank"` recipe of blackjax (gamma 1e-5, cutoff 2) with its
    rank raised to `_rank(d)`:
    its `final` estimates from the first `buffer_idx` rows of its buffers."""
    d = draws.shape[1]
    k = _rank(d)
    recipe = dataclasses.replace(lookup_recipe("fisher_low_rank"), max_rank=k)
    assert (recipe.gamma, recipe.cutoff) == (_GAMMA, _CUTOFF)
    core = recipe.build_core(buffer_size=draws.shape[0])
    state = LowRankMetricCoreState(
        inverse_mass_matrix=LowRankInverseMassMatrix(
            sigma=jnp.ones(d, draws.dtype), U=jnp.zeros((d, k), draws.dtype),
            lam=jnp.ones(k, draws.dtype)),
        mu_star=jnp.zeros(d, draws.dtype), draws_buffer=draws, grads_buffer=grads,
        buffer_idx=n, background_split=0, recompute_counter=0)
    imm = core.final(state).inverse_mass_matrix
    return jax.tree.map(lambda x: x.astype(draws.dtype), imm)


def fisher_engine(target_accept_prob: float):
    """`(init, update, final, seed)` of the Fisher-divergence warmup, with the signatures of
    `_window.window_adaptation`'s: `init(position, step_size, num_warmup)` (the buffers hold
    `buffer_size(num_warmup)` rows),
    `update(state, (adapt?, window end?), position, grad, acceptance_rate)`,
    `final(state) -> (step_size, inverse_mass_matrix)`, and `seed(state, grad)`, which sets the
    inverse mass matrix from the gradient at the initial point."""
    da_init, da_update, da_final = dual_averaging_adaptation(target_accept_prob)

    def init(position, step_size, num_warmup):
        rows = buffer_size(num_warmup)
        flat = jax.flatten_util.ravel_pytree(position)[0]
        d, dtype = flat.shape[0], flat.dtype
        imm = LowRankInverseMassMatrix(sigma=jnp.ones(d, dtype), U=jnp.zeros((d, _rank(d)), dtype),
                                       lam=jnp.ones(_rank(d), dtype))
        zero = jnp.zeros((), jnp.int32)
        return FisherState(da_init(step_size), jnp.asarray(step_size, dtype), imm,
                           jnp.zeros((rows, d), dtype), jnp.zeros((rows, d), dtype),
                           zero, zero, zero, zero)

    def seed(state, grad):
        # nutpie's start M^-1 = 1/|grad| (1 where the gradient vanishes), as blackjax's
        # `seed_low_rank_sigma_from_grad` sets it: sigma = M^-1/2
        imm, dtype = state.inverse_mass_matrix, state.draws.dtype
        core = LowRankMetricCoreState(inverse_mass_matrix=imm, mu_star=None, draws_buffer=None,
                                      grads_buffer=None, buffer_idx=0, background_split=0,
                                      recompute_counter=0)
        sigma = seed_low_rank_sigma_from_grad(core, grad).inverse_mass_matrix.sigma.astype(dtype)
        return state._replace(inverse_mass_matrix=imm._replace(sigma=sigma))

    def estimate(state):
        n = state.background + state.foreground
        draws = _ordered(state.draws, state.written, n)
        grads = _ordered(state.grads, state.written, n)
        new = _low_rank_estimate(draws, grads, n)
        # fewer than 3 draws: keep the current matrix
        return jax.tree.map(lambda a, b: jnp.where(n >= 3, a, b), new, state.inverse_mass_matrix)

    def switch(state):
        imm = estimate(state)
        first = state.switches == 0
        ss = jax.tree.map(lambda a, b: jnp.where(first, a, b),
                          da_init(state.step_size), state.ss_state)
        return state._replace(inverse_mass_matrix=imm, ss_state=ss,
                              step_size=jnp.exp(ss.log_step_size).astype(state.step_size.dtype),
                              background=state.foreground, foreground=jnp.zeros_like(state.foreground),
                              switches=state.switches + 1)

    def update(state, stage, position, grad, acceptance_rate):
        adapt, window_end = stage
        ss = da_update(state.ss_state, acceptance_rate)
        state = state._replace(ss_state=ss,
                               step_size=jnp.exp(ss.log_step_size).astype(state.step_size.dtype))
        flat_x = jax.flatten_util.ravel_pytree(position)[0]
        flat_g = jax.flatten_util.ravel_pytree(grad)[0]
        rows = state.draws.shape[0]
        row = state.written % rows
        adapting = adapt.astype(bool)
        state = state._replace(
            # one row rewritten in place (O(d)), not a select over the whole buffer
            draws=state.draws.at[row].set(jnp.where(adapting, flat_x, state.draws[row])),
            grads=state.grads.at[row].set(jnp.where(adapting, flat_g, state.grads[row])),
            written=state.written + adapting.astype(jnp.int32),
            foreground=jnp.minimum(state.foreground + adapting.astype(jnp.int32),
                                   rows - state.background),
        )
        return jax.lax.cond(window_end.astype(bool), switch, lambda s: s, state)

    def final(state):
        return da_final(state.ss_state).astype(state.step_size.dtype), state.inverse_mass_matrix

    return init, update, final, seed
