"""`SA`: sample adaptive MCMC (Zhu 2019), a gradient-free sampler, as NumPyro's `SA`.

The chain carries a population of `K` points and their log densities. A transition draws one
point `z` from a Gaussian fitted to the population (its mean and its diagonal or full
covariance), then drops one of the `K + 1` points: point `j` with probability proportional to
`q_j(z_j) / p(z_j)`, where `q_j` is the Gaussian fitted to the population with `z_j` replaced
by `z`, and `p` the target density. The chain's position is a point of the population drawn
uniformly (NumPyro returns one such point per transition rather than the whole population).

The first `K` transitions of the warmup fill the population with points around the initial
point (a standard normal step each, as NumPyro's initial population), one log density each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.flatten_util import ravel_pytree
from jax.scipy.special import logsumexp

from .._init import InitStrategy
from ._barker import BarkerMH
from ._kernels import _UNIFORM, KernelSettingsError, _HMCFamily, _untraced

__all__ = ["SA", "SAState", "SAInfo"]


class SAState(NamedTuple):
    """The chain's state: `position`, `logdensity`, `logdensity_grad` (zeros: the sampler takes
    no gradient), the population `zs` (`[K, d]`, flat unconstrained points), their log
    densities `lps` (`[K]`) and `count`, the number of points filled so far (int32)."""

    position: Any
    logdensity: Any
    logdensity_grad: Any
    zs: Any
    lps: Any
    count: Any


class SAInfo(NamedTuple):
    """A transition's statistics: `acceptance_rate` (the probability that the new point is kept
    in the population), `is_divergent` (its log density fell by more than the divergence
    threshold, or is not finite)."""

    acceptance_rate: Any
    is_divergent: Any


def _fit(zs, dense: bool):
    """The Gaussian fitted to the rows of `zs` (`[K, d]`): its mean and its scale (standard
    deviations, or the Cholesky factor of the covariance; both with divisor `K`)."""
    loc = zs.mean(0)
    centred = zs - loc
    if not dense:
        return loc, jnp.sqrt(jnp.mean(centred ** 2, 0))
    cov = centred.T @ centred / zs.shape[0]
    chol = jnp.linalg.cholesky(cov)
    # a singular population (fewer distinct points than dimensions): the diagonal instead
    diag = jnp.diag(jnp.sqrt(jnp.diagonal(cov)))
    return loc, jnp.where(jnp.all(jnp.isfinite(chol)), chol, diag)


def _log_q(z, loc, scale):
    """The log density at `z` of the Gaussian `(loc, scale)` of `_fit` (NumPyro's
    distributions)."""
    if scale.ndim == 1:
        return dist.Normal(loc, scale).log_prob(z).sum(-1)
    return dist.MultivariateNormal(loc, scale_tril=scale).log_prob(z)


def sa_kernel(dense: bool, divergence_threshold: float) -> Callable:
    """The transition `(rng_key, state, logdensity_fn, step_size, inverse_mass_matrix) ->
    (SAState, SAInfo)` (the step size and mass matrix are not used: the population is the
    adaptation)."""
    def kernel(rng_key, state, logdensity_fn, step_size=None, inverse_mass_matrix=None):
        del step_size, inverse_mass_matrix
        zs, lps, count = state.zs, state.lps, state.count
        size, _ = zs.shape
        filling = count < size
        key_proposal, key_drop, key_pick = jax.random.split(rng_key, 3)
        eps = jax.random.normal(key_proposal, zs.shape[1:], zs.dtype)
        loc, scale = _fit(zs, dense)
        proposal = loc + (scale @ eps if dense else scale * eps)
        z = jnp.where(filling, state.position + eps, proposal)
        lp = logdensity_fn(z)
        lp = jnp.where(jnp.isnan(lp), -jnp.inf, lp)

        # the K + 1 ways to drop a point: with point j dropped, the population is zs with
        # row j replaced by z (the last way keeps zs), fitted anew
        candidates = jnp.concatenate([zs, z[None]])
        cand_lps = jnp.concatenate([lps, lp[None]])

        def log_weight(j):
            population = jnp.where((jnp.arange(size) == j)[:, None], z, zs)
            return _log_q(candidates[j], *_fit(population, dense)) - cand_lps[j]

        log_w = jax.vmap(log_weight)(jnp.arange(size + 1))
        log_w = jnp.where(jnp.isfinite(log_w), log_w, -jnp.inf)
        dropped = jax.random.categorical(key_drop, log_w)
        kept = jnp.where((jnp.arange(size) == dropped)[:, None], z, zs)
        kept_lps = jnp.where(jnp.arange(size) == dropped, lp, lps)
        accept = 1.0 - jnp.exp(log_w[-1] - logsumexp(log_w))

        at = jnp.minimum(count, size - 1)
        zs = jnp.where(filling, zs.at[at].set(z), kept)
        lps = jnp.where(filling, lps.at[at].set(lp), kept_lps)
        pick = jax.random.randint(key_pick, (), 0, size)
        position = jnp.where(filling, state.position, zs[pick])
        logdensity = jnp.where(filling, state.logdensity, lps[pick])
        new = SAState(position, logdensity, state.logdensity_grad, zs, lps,
                      count + filling.astype(count.dtype))
        info = SAInfo(jnp.where(filling, 1.0, jnp.nan_to_num(accept)).astype(lp.dtype),
                      (state.logdensity - lp > divergence_threshold) | ~jnp.isfinite(lp))
        return new, info

    return kernel


class SA(_HMCFamily):
    """Sample adaptive MCMC (Zhu 2019): a gradient-free sampler whose proposal is a Gaussian
    fitted to a population of `adapt_state_size` points carried by the chain (module
    docstring). As NumPyro's `SA`: one log density per transition, no gradient (a model may
    hold loops JAX cannot differentiate in reverse mode, e.g. a `lax.while_loop` whose count
    depends on a latent site); it needs many warmup transitions (NumPyro's tests use 100,000).

    **Arguments:**

    - `model`: the model, a Python callable using `effppl.sample` (or NumPyro's
      `potential_fn=`, as for `HMC`).
    - `adapt_state_size`: the population's size `K` (an int > 1); defaults to twice the
      number of unconstrained coordinates.
    - `dense_mass`: True (default) fits a full covariance to the population, False a diagonal.
    - `init_strategy`: as for `NUTS` (the initial point; the population is filled around it).

    **Statistics** (`MCMC.get_extra_fields()`): `acceptance_rate` (NumPyro's `accept_prob`:
    the probability that the proposal stays in the population; 1 while the population is being
    filled), `diverging` (the proposal's log density is not finite, or fell by more than
    1000), `n_steps` (1), `lp`.

    Sharp bit: a `run()` after `warmup()` (from `post_warmup_state`) keeps the population
    (`MCMCState.kernel_state`).

    **Raises:** `KernelSettingsError` (a `ValueError`) for `adapt_state_size` that is not an
    int > 1, `dense_mass` that is not a bool, or both or neither of `model` and
    `potential_fn`.

    **References:** Zhu (2019), "Sample Adaptive MCMC", NeurIPS 32; NumPyro's `SA`.

    Example: a coin's bias from 70 heads in 100 flips (the exact posterior mean is 71/102).

        >>> import jax, jax.numpy as jnp
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import MCMC, SA
        >>> def coin(heads):
        ...     p = effppl.sample("p", dist.Beta(1.0, 1.0))
        ...     effppl.sample("heads", dist.Binomial(100, p), obs=heads)
        >>> mcmc = MCMC(SA(coin), num_warmup=2000, num_samples=8000, progress_bar=False)
        >>> mcmc.run(jax.random.key(0), 70)
        >>> round(float(mcmc.get_samples()["p"].mean()), 2)
        0.7
    """

    _api = "SA"

    def __init__(self, model: Callable | None = None, potential_fn: Callable | None = None,
                 adapt_state_size: int | None = None, dense_mass: bool = True,
                 init_strategy: InitStrategy = _UNIFORM):
        api = self._api
        if (model is None) == (potential_fn is None):
            raise KernelSettingsError(f"`effppl.infer.{api}`: Only one of `model` or "
                                      f"`potential_fn` must be specified.")
        if adapt_state_size is not None and (
                isinstance(adapt_state_size, bool)
                or not isinstance(adapt_state_size, (int, np.integer)) or adapt_state_size < 2):
            raise KernelSettingsError(f"`effppl.infer.{api}(..., adapt_state_size=...)`: "
                                      f"adapt_state_size should be an int greater than 1, but "
                                      f"got {adapt_state_size!r:.40}.")
        if not isinstance(dense_mass, (bool, np.bool_)):
            raise KernelSettingsError(f"`effppl.infer.{api}(..., dense_mass=...)` expected a "
                                      f"bool, but got {dense_mass!r:.40}.")
        _untraced(api, {"adapt_state_size": adapt_state_size})
        options: dict = {"forward_mode_differentiation": True}  # (the initial point's check)
        if potential_fn is not None:
            options["potential_fn"] = potential_fn
        super().__init__(model, step_size=1.0, adapt_step_size=False, adapt_mass_matrix=False,
                         dense_mass=False, target_accept_prob=0.8, init_strategy=init_strategy,
                         divergence_threshold=1000.0, numpyro_options=options)
        self.adapt_state_size = None if adapt_state_size is None else int(adapt_state_size)
        self.sa_dense_mass = bool(dense_mass)

    def settings(self) -> tuple:
        return (*super().settings(), self.adapt_state_size, self.sa_dense_mass)

    def init_state(self, position, logdensity, logdensity_grad):
        flat = ravel_pytree(position)[0]
        size = self.adapt_state_size or 2 * flat.shape[0]
        return SAState(position, logdensity, jax.tree.map(jnp.zeros_like, logdensity_grad),
                       jnp.zeros((size,) + flat.shape, flat.dtype),
                       jnp.full((size,), -jnp.inf, jnp.result_type(logdensity)),
                       jnp.zeros((), jnp.int32))

    def build_kernel(self) -> Callable:
        return sa_kernel(self.sa_dense_mass, self.divergence_threshold)

    def kernel_kwargs(self) -> dict:
        return {}

    def stats(self, info, dtype) -> dict:
        return {
            "diverging": jnp.asarray(info.is_divergent, bool),
            "acceptance_rate": jnp.asarray(info.acceptance_rate, dtype),
            "n_steps": jnp.ones((), jnp.int32),
        }

    empty_stats = BarkerMH.empty_stats  # (the same statistics: one log density a transition)
