"""Compiled warmup and sampling chunks: blackjax kernels and blackjax's window adaptation.

One `Sampler` per (model, argument structure, kernel settings), cached. Its functions are
`jax.jit(jax.vmap(...))` over chains and take the model data as an argument, so the MCMC driver
calls them chunk after chunk (for the progress bar) and run after run without recompiling.

**Window adaptation.** `blackjax.window_adaptation(...).run` runs the whole warmup in one call.
To report progress in chunks we run the very same step it scans — blackjax's kernel followed by
the update of blackjax's staged-adaptation engine (`_make_engine`, the engine behind
`window_adaptation`, with the `welford_diag`/`welford_dense` metric recipe) on Stan's schedule
(`build_schedule`) — chunk by chunk. `tests/inference` checks that the result equals
`blackjax.window_adaptation(...).run` for the same key, so a change inside blackjax is caught.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from blackjax.adaptation.metric_recipes import lookup_recipe
from blackjax.adaptation.staged_adaptation import _make_engine, build_schedule

from ._cache import cached

__all__ = ["Sampler", "sampler_for", "warmup_schedule", "adaptation_engine"]


def adaptation_engine(dense_mass: bool, target_accept_prob: float):
    """`(init, update, final)` of blackjax's window adaptation (Stan's), diagonal or dense."""
    recipe = lookup_recipe("welford_dense" if dense_mass else "welford_diag")
    core = recipe.build_core(imm_shrinkage_to_previous=0.0, initial_inverse_mass_matrix=None)
    return _make_engine(core, target_acceptance_rate=target_accept_prob)


@functools.lru_cache(maxsize=32)
def warmup_schedule(num_warmup: int) -> np.ndarray:
    """Stan's warmup schedule, `int32[num_warmup, 2]` rows `(slow?, ends a slow window?)`."""
    sched = np.asarray(build_schedule(num_warmup), dtype=np.int32).reshape(num_warmup, 2)
    sched.setflags(write=False)
    return sched


class Sampler:
    """Compiled, chain-vectorised functions of one model + argument structure + kernel settings.

    - `start(params, potential_energy, grad)` -> `(state, adapt_state)`
    - `warmup(state, adapt_state, keys, steps, schedule, dynamic)` ->
      `(state, adapt_state, step_size, inverse_mass_matrix, num_divergent)`
    - `sample(state, step_size, inverse_mass_matrix, keys, steps, dynamic)` ->
      `(state, values, stats)`

    `keys` holds every key of the phase per chain (`[chain, num_warmup]`, or
    `[chain, num_draws, thinning]`); `steps` (`int32[chunk]`) selects the chunk, so one executable
    serves every chunk of the same length.
    """

    def __init__(self, fns, kernel):
        self.fns = fns
        self.kernel = kernel
        self._kernel = kernel.build_kernel()
        self._kwargs = kernel.kernel_kwargs()
        self._adapt_init, self._adapt_update, self._adapt_final = adaptation_engine(
            kernel.dense_mass, kernel.target_accept_prob
        )
        self.start = jax.jit(jax.vmap(self._start))
        self.warmup = jax.jit(jax.vmap(self._warmup, in_axes=(0, 0, 0, None, None, None)))
        self.sample = jax.jit(jax.vmap(self._sample, in_axes=(0, 0, 0, 0, None, None)))

    def _tuned(self, astate):
        """Step size and inverse mass matrix in force, honouring `adapt_*=False`."""
        step_size, imm = astate.step_size, astate.inverse_mass_matrix
        if not self.kernel.adapt_step_size:
            step_size = jnp.asarray(self.kernel.step_size, jnp.result_type(float))
        if not self.kernel.adapt_mass_matrix:
            imm = jnp.eye(imm.shape[0], dtype=imm.dtype) if imm.ndim == 2 else jnp.ones_like(imm)
        return step_size, imm

    def _final(self, astate):
        step_size, imm = self._adapt_final(astate)
        return self._tuned(astate._replace(step_size=step_size, inverse_mass_matrix=imm))

    def _start(self, params, potential_energy, grad):
        state = self.kernel.init_state(params, -potential_energy, jax.tree.map(jnp.negative, grad))
        return state, self._adapt_init(params, self.kernel.step_size)

    def _warmup(self, state, astate, keys, steps, schedule, dynamic):
        logdensity = self.fns.logdensity_fn(dynamic)

        def one_step(carry, i):
            state, astate = carry
            step_size, imm = self._tuned(astate)
            state, info = self._kernel(keys[i], state, logdensity, step_size, imm, **self._kwargs)
            stage = schedule[i]
            astate = self._adapt_update(
                astate, (stage[0], stage[1]), state.position, state.logdensity_grad,
                info.acceptance_rate, i,
            )
            return (state, astate), info.is_divergent

        (state, astate), divergent = jax.lax.scan(one_step, (state, astate), steps)
        step_size, imm = self._final(astate)
        return state, astate, step_size, imm, jnp.sum(divergent, dtype=jnp.int32)

    def _sample(self, state, step_size, imm, keys, steps, dynamic):
        logdensity = self.fns.logdensity_fn(dynamic)

        def transition(state, key):
            state, info = self._kernel(key, state, logdensity, step_size, imm, **self._kwargs)
            return state, self.kernel.stats(info)

        def one_draw(state, i):
            # `thinning` transitions; the statistics of the last one are kept.
            state, stats = jax.lax.scan(transition, state, keys[i])
            stats = jax.tree.map(lambda x: x[-1], stats)
            stats["lp"] = state.logdensity
            stats["step_size"] = jnp.asarray(step_size)
            return state, (self.fns.constrain(state.position, dynamic), stats)

        state, (values, stats) = jax.lax.scan(one_draw, state, steps)
        return state, values, stats


def sampler_for(fns, kernel) -> Sampler:
    """The cached `Sampler` of `fns` (model + argument structure) and `kernel`'s settings."""
    key = ("sampler", fns.model, fns.structure, kernel.settings())
    return cached(key, lambda: Sampler(fns, kernel))
