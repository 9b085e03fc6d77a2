"""`MixedHMC`: Zhou's mixed Hamiltonian Monte Carlo (NumPyro's `MixedHMC`), on the discrete
sites' carriers of `DiscreteHMCGibbs` and blackjax's leapfrog integrator.

A transition draws a momentum for the continuous coordinates and, for each discrete element,
an exponential kinetic energy and a uniform arrival time. It then alternates, for
`num_discrete_updates` rounds, leapfrog integration of the continuous coordinates (for the
time until the next arrival, the trajectory length split by the arrivals) with a proposal for
the element that arrives (NumPyro's four discrete proposals). The proposal is taken when the
element's kinetic energy plus the proposal's log acceptance ratio stays positive, and that
energy is updated. The whole trajectory is accepted by the Metropolis test on the continuous
energy error, less the changes of the log density that the discrete moves made.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from blackjax.mcmc.hmc import HMCInfo
from blackjax.mcmc.integrators import IntegratorState, velocity_verlet
from blackjax.mcmc.metrics import default_metric

from ._discrete_gibbs import DiscreteHMCGibbs, layout
from ._kernels import HMC, KernelSettingsError

__all__ = ["MixedHMC"]


class MixedHMC(DiscreteHMCGibbs):
    """Mixed Hamiltonian Monte Carlo for models with discrete and continuous latent sites: the
    discrete sites' updates happen inside the HMC trajectory, each paid for by an auxiliary
    kinetic energy, and the whole trajectory is accepted or rejected at once. As NumPyro's
    `MixedHMC` (one discrete element updated at each arrival).

    The discrete sites are those `DiscreteHMCGibbs` updates (finite support, not marked for
    enumeration), and the draws and what the user sees are the same.

    **Arguments:**

    - `inner_kernel`: an `HMC` kernel of the model (NUTS is refused, as in NumPyro); its
      `trajectory_length` (or `num_steps * step_size`) is the length of each trajectory, split
      among the discrete updates; each piece takes `ceil(piece / step_size)` leapfrog steps.
    - `num_discrete_updates`: discrete updates per transition (an int >= 1); None (the
      default) updates each discrete element once on average.
    - `random_walk`, `modified`: the discrete proposal, as in `DiscreteHMCGibbs`.

    The warmup tunes the step size from the acceptance probability of the whole trajectory, and
    the mass matrix of the continuous coordinates. `n_steps` counts leapfrog steps (the discrete
    proposals' log densities and the gradient after an accepted one are not counted, as in
    NumPyro).

    **Raises:** `KernelSettingsError` for an inner kernel that is not `HMC` of a model, or an
    invalid `num_discrete_updates`; the errors of `DiscreteHMCGibbs` otherwise.

    **References:** Zhou (2020), "Mixed Hamiltonian Monte Carlo for mixed discrete and
    continuous variables", NeurIPS; Liu (1996) (the modified proposal); NumPyro's `MixedHMC`.

    Example: a two-component mixture, as for `DiscreteHMCGibbs`.

        >>> import jax, jax.numpy as jnp
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import HMC, MCMC, MixedHMC
        >>> def model():
        ...     c = effppl.sample("c", dist.Bernoulli(0.3))
        ...     effppl.sample("x", dist.Normal(jnp.array([-1.0, 1.0])[c], 1.0))
        >>> kernel = MixedHMC(HMC(model, trajectory_length=1.2), num_discrete_updates=5)
        >>> mcmc = MCMC(kernel, num_warmup=500, num_samples=4000, progress_bar=False)
        >>> mcmc.run(jax.random.key(0))
        >>> draws = mcmc.get_samples()
        >>> sorted(draws), round(float(draws["c"].mean()), 1)
        (['c', 'x'], 0.3)
    """

    _api = "MixedHMC"

    def __init__(self, inner_kernel: HMC, *, num_discrete_updates: int | None = None,
                 random_walk: bool = False, modified: bool = False):
        if type(inner_kernel) is not HMC:
            raise KernelSettingsError(
                f"`effppl.infer.MixedHMC(inner_kernel, ...)` expected an effppl.infer `HMC` "
                f"kernel (the algorithm splits one fixed-length trajectory; NUTS is not "
                f"supported, as in NumPyro), but got {inner_kernel!r:.80}. For NUTS, "
                f"`DiscreteHMCGibbs(NUTS(model))` updates the discrete sites between "
                f"transitions.")
        if num_discrete_updates is not None and (
                not isinstance(num_discrete_updates, (int, np.integer))
                or isinstance(num_discrete_updates, bool) or num_discrete_updates < 1):
            raise KernelSettingsError(
                f"`effppl.infer.MixedHMC(..., num_discrete_updates=...)` expected an int >= 1 "
                f"or None, but got {num_discrete_updates!r:.60}.")
        super().__init__(inner_kernel, random_walk=random_walk, modified=modified)
        self.num_discrete_updates = (None if num_discrete_updates is None
                                     else int(num_discrete_updates))
        self._trajectory = (inner_kernel.trajectory_length, inner_kernel.num_steps)

    def settings(self) -> tuple:
        return (*super().settings(), self.num_discrete_updates)

    def bind(self, kernel: Callable, model) -> Callable:
        """The mixed HMC transition of one chunk (see the module's docstring); `kernel` is not
        used: the trajectory is integrated here with blackjax's velocity Verlet."""
        del kernel
        discrete = layout(self._api, self._site_carriers, model, self.inner_kernel.model)
        coords, hmc_index = jnp.asarray(discrete.coords), discrete.continuous
        num_discrete = discrete.coords.size
        updates = self.num_discrete_updates or num_discrete
        propose, target = self._propose, self.target_accept_prob
        length, num_steps = self._trajectory
        threshold = self.divergence_threshold

        def transition(rng_key, state, logdensity, step_size, inverse_mass_matrix, **kwargs):
            del kwargs  # (the inner HMC's number of steps: the pieces' come from the length)
            key_ke, key_time, key_momentum, key_updates, key_accept = jax.random.split(
                rng_key, 5)
            dtype = state.position.dtype
            imm = inverse_mass_matrix
            imm = imm[hmc_index] if jnp.ndim(imm) == 1 else imm[np.ix_(hmc_index, hmc_index)]
            metric = default_metric(imm)
            discrete_energy = jax.random.exponential(key_ke, (num_discrete,), dtype)
            arrival = jax.random.uniform(key_time, (num_discrete,), dtype)
            total = (updates - 1) // num_discrete + jnp.sort(arrival)[(updates - 1)
                                                                      % num_discrete]
            trajectory = length if length is not None else num_steps * step_size
            unit = trajectory / total
            momentum = metric.sample_momentum(key_momentum, state.position[hmc_index])
            energy = -state.logdensity + metric.kinetic_energy(momentum)

            def on(flat):
                return lambda position: logdensity(flat.at[hmc_index].set(position))

            def round_(i, carry):
                flat, momentum, lp, grad, kinetic, delta_lp, arrival, steps = carry
                idx = jnp.argmin(arrival)
                piece = arrival[idx] * unit
                arrival = (arrival - arrival[idx]).at[idx].set(1.0)
                n = jnp.maximum(jnp.ceil(piece / step_size), 1).astype(jnp.int32)
                step = velocity_verlet(on(flat), metric.kinetic_energy)
                moved = jax.lax.fori_loop(0, n, lambda _, s: step(s, step_size),
                                          IntegratorState(flat[hmc_index], momentum, lp, grad))
                flat = flat.at[hmc_index].set(moved.position)
                new, lp_new, log_ratio = propose(
                    jax.random.fold_in(key_updates, i), flat, moved.logdensity, coords[idx],
                    discrete.sizes[idx], logdensity, discrete.max_size)
                left = kinetic[idx] + log_ratio
                take = left > 0
                flat = jnp.where(take, new, flat)
                lp = jnp.where(take, lp_new, moved.logdensity)
                grad = jnp.where(take, jax.grad(on(flat))(flat[hmc_index]), moved.logdensity_grad)
                kinetic = kinetic.at[idx].set(jnp.where(take, left, kinetic[idx]))
                delta_lp = delta_lp + (lp - moved.logdensity)
                return flat, moved.momentum, lp, grad, kinetic, delta_lp, arrival, steps + n

            flat, momentum, lp, grad, _, delta_lp, _, steps = jax.lax.fori_loop(
                0, updates, round_,
                (state.position, momentum, state.logdensity,
                 state.logdensity_grad[hmc_index], discrete_energy, jnp.zeros((), dtype),
                 arrival, jnp.zeros((), jnp.int32)))
            energy_new = -lp + metric.kinetic_energy(momentum)
            error = energy_new - energy + delta_lp  # (the discrete moves' changes excluded)
            error = jnp.where(jnp.isnan(error), jnp.inf, error)
            accept_prob = jnp.minimum(1.0, jnp.exp(-error))
            accepted = jax.random.uniform(key_accept, (), dtype) < accept_prob
            full_grad = jnp.zeros_like(flat).at[hmc_index].set(grad)
            proposal = state._replace(position=flat, logdensity=lp, logdensity_grad=full_grad)
            out = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposal, state)
            if not hmc_index.size:  # (no continuous site: nothing for the step size to tune)
                accept_prob = jnp.asarray(target, dtype)
            info = HMCInfo(momentum=momentum, acceptance_rate=accept_prob,
                           is_accepted=accepted, is_divergent=error > threshold,
                           energy=energy_new,
                           proposal=IntegratorState(flat, momentum, lp, full_grad),
                           num_integration_steps=steps)
            return out, info

        return transition
