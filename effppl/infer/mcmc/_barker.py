"""`BarkerMH`: Metropolis-Hastings with Barker's gradient-based proposal, on blackjax's `barker`
kernel, driven by the same `MCMC` warmup (Stan's window adaptation) as `NUTS` and `HMC`."""

from collections.abc import Callable
from typing import Any

import blackjax
import jax.numpy as jnp

from .._init import InitStrategy
from ._kernels import _UNIFORM, KernelSettingsError, _HMCFamily, _known_options, _untraced

__all__ = ["BarkerMH"]


class BarkerMH(_HMCFamily):
    """Metropolis-Hastings with Barker's proposal: each coordinate moves by a Gaussian increment
    whose sign is flipped towards the gradient with probability `1 / (1 + exp(-z g))`; one
    gradient per transition. As NumPyro's `BarkerMH`, on blackjax's `barker` kernel.

    Step size and mass matrix are tuned during warmup by Stan's window adaptation, the step
    size towards `target_accept_prob` (0.4 by default, as in NumPyro; the proposal's optimal
    acceptance rate is about 0.57 in high dimensions, Livingstone & Zanella 2022).

    **Arguments:**

    - `model`: the model, a Python callable using `effppl.sample` (or NumPyro's `potential_fn=`,
      as for `HMC`).
    - `step_size`: initial step size (unconstrained units); the final one when
      `adapt_step_size=False`.
    - `adapt_step_size`, `adapt_mass_matrix`, `dense_mass`, `init_strategy`: as for `HMC`
      (`dense_mass=True`: a dense inverse mass matrix from the draws' covariance).
    - `target_accept_prob`: the mean acceptance probability targeted by step-size adaptation.

    **Statistics** (`MCMC.get_extra_fields()`): `acceptance_rate` (NumPyro's `accept_prob`; 0
    for a proposal with a non-finite log density), `diverging` (a proposal with a non-finite
    log density, rejected: a Metropolis-Hastings step has no energy error), `n_steps` (1: one
    gradient per transition), `lp`, `step_size`; no `energy` (there is no Hamiltonian).

    **Raises:** `KernelSettingsError` (a `ValueError`) for invalid settings, or for
    `mass_matrix=` other than `"diag"`/`"dense"` (nutpie's Fisher schemes adapt from
    trajectories' gradients; this kernel is not one of them).

    **References:** Livingstone & Zanella (2022), "The Barker proposal: combining robustness and
    efficiency in gradient-based MCMC", JRSS B 84(2); Stan Reference Manual, "HMC algorithm
    parameters" (the warmup); blackjax `blackjax.barker`; NumPyro's `BarkerMH`.

    Example: a normal mean, sampled by Barker's proposal (one gradient per draw, so more draws).

        >>> import jax
        >>> import jax.numpy as jnp
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import MCMC, BarkerMH
        >>> def model(y):
        ...     mu = effppl.sample("mu", dist.Normal(0.0, 10.0))
        ...     with effppl.plate("N", y.shape[0]):
        ...         effppl.sample("y", dist.Normal(mu, 1.0), obs=y)
        >>> mcmc = MCMC(BarkerMH(model), num_warmup=500, num_samples=2000, progress_bar=False)
        >>> mcmc.run(jax.random.key(0), jnp.full(100, 3.0))
        >>> round(float(mcmc.get_samples()["mu"].mean()), 1)
        3.0
    """

    _api = "BarkerMH"
    flat_adapt_state = True  # `MCMCState.adapt_state`: arrays, not dicts, as NumPyro's BarkerMH
    _algorithm = blackjax.barker

    def __init__(self, model: Callable | None = None, potential_fn: Callable | None = None,
                 step_size: float = 1.0, adapt_step_size: bool = True,
                 adapt_mass_matrix: bool = True, dense_mass: Any = False,
                 target_accept_prob: float = 0.4, init_strategy: InitStrategy = _UNIFORM, *,
                 mass_matrix: str | None = None, **numpyro_options):
        if potential_fn is not None:  # (NumPyro's argument order; `_HMCFamily` reads it)
            numpyro_options["potential_fn"] = potential_fn
        _untraced("BarkerMH", dict(step_size=step_size, target_accept_prob=target_accept_prob))
        _known_options("BarkerMH", numpyro_options)
        if mass_matrix not in (None, "diag", "dense"):
            raise KernelSettingsError(
                f"`effppl.infer.BarkerMH(..., mass_matrix={mass_matrix!r})`: only 'diag' or "
                f"'dense' (Stan's window adaptation): nutpie's Fisher schemes are for the "
                f"gradients along HMC trajectories; use NUTS(..., mass_matrix={mass_matrix!r}).")
        super().__init__(model, step_size=step_size, adapt_step_size=adapt_step_size,
                         adapt_mass_matrix=adapt_mass_matrix, dense_mass=dense_mass,
                         target_accept_prob=target_accept_prob, init_strategy=init_strategy,
                         divergence_threshold=1000.0, mass_matrix=mass_matrix,
                         numpyro_options=numpyro_options)

    def init_state(self, position, logdensity, logdensity_grad):
        return blackjax.mcmc.barker.BarkerState(position, logdensity, logdensity_grad)

    def build_kernel(self) -> Callable:
        """blackjax's kernel, given the precision the warmup's inverse mass matrix stands for.

        blackjax's `barker` scales its increments (and the gradient's skew) by `M^{1/2}`, the
        square root of the matrix its metric takes as the mass matrix, so its proposal's
        covariance is `step_size^2 M`; a preconditioner is the posterior's covariance there
        (Livingstone & Zanella 2022, sec. 6), i.e. the warmup's inverse mass matrix, so the
        kernel gets that matrix's inverse as its `inverse_mass_matrix`."""
        kernel = blackjax.mcmc.barker.build_kernel()

        def preconditioned(rng_key, state, logdensity_fn, step_size, inverse_mass_matrix):
            imm = inverse_mass_matrix
            precision = 1.0 / imm if jnp.ndim(imm) == 1 else jnp.linalg.inv(imm)
            state, info = kernel(rng_key, state, logdensity_fn, step_size, precision)
            # a proposal with a non-finite log density is rejected (blackjax compares with a
            # NaN), but its acceptance probability is NaN: 0 here, so the step-size adaptation
            # shrinks the step instead of turning NaN (HMC's kernels do the same)
            rate = info.acceptance_rate
            return state, info._replace(acceptance_rate=jnp.where(jnp.isnan(rate), 0.0, rate))

        return preconditioned

    def kernel_kwargs(self) -> dict:
        return {}

    def stats(self, info, dtype) -> dict:
        return {
            "diverging": ~jnp.isfinite(info.proposal.logdensity),
            "acceptance_rate": jnp.asarray(info.acceptance_rate, dtype),
            "n_steps": jnp.ones((), jnp.int32),
        }

    def empty_stats(self, dtype) -> dict:
        return {
            "diverging": jnp.zeros((), bool),
            "acceptance_rate": jnp.zeros((), dtype),
            "n_steps": jnp.zeros((), jnp.int32),
        }
