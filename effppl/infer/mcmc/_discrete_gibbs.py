"""`DiscreteHMCGibbs`: Metropolis-within-Gibbs updates of discrete latent sites, then HMC (or
NUTS) on the continuous ones (NumPyro's `DiscreteHMCGibbs`).

effppl's sampler moves a flat vector of real coordinates, and its log density sums discrete
sites out by enumeration. Here each discrete latent site not marked for enumeration becomes a
chain coordinate instead: the model runs under a `reparam` that draws, for site `x`, a real
*carrier* site `x_gibbs_index` (the index of `x`'s value in its support, as a float; its
density is `x`'s at that value) and makes `x` a deterministic
site holding the value (an integer, as the model reads it). A transition updates the carrier
coordinates one element at a time, in a random order, with the log density of the whole
vector (a Gibbs step on the joint of the carriers and the other unconstrained coordinates),
then takes one transition of the inner kernel on the other coordinates alone. The carriers
are hidden from `get_samples`, `print_summary` and `to_arviz`, which show the discrete sites.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ...handlers import reparam
from ...handlers.internal import SiteError, sample
from .._compile._cache import cached
from .._model import model_name
from ._hmc_gibbs import HMCGibbs, inner_checked, per_element, step_on
from ._kernels import HMC, NUTS, KernelSettingsError

__all__ = ["DiscreteHMCGibbs", "CARRIER", "Discrete", "layout", "proposal"]

CARRIER = "_gibbs_index"
"""The suffix of a discrete site's carrier site (`x` -> `x_gibbs_index`)."""


class _SupportIndex(dist.Distribution):
    """The carrier's distribution: a real value `i` whose density is `base`'s at `values[i]`
    (`i` rounded and clipped to `0 .. len(values) - 1`: an initial point off the support counts
    as its nearest end; the Gibbs updates set only indices of the support); `sample` draws
    `base`'s index."""

    support = constraints.real  # pyright: ignore[reportAssignmentType]
    pytree_data_fields = ("base_dist", "values")

    def __init__(self, base_dist, values):
        self.base_dist, self.values = base_dist, values
        super().__init__(base_dist.batch_shape, (), validate_args=False)

    def index(self, value):
        return jnp.clip(jnp.round(value), 0, self.values.shape[0] - 1).astype(jnp.int32)

    def value_of(self, index):
        return self.values[self.index(index)]

    def log_prob(self, value):
        return self.base_dist.log_prob(self.value_of(value))

    def sample(self, key, sample_shape=()):
        drawn = self.base_dist.sample(key, sample_shape)
        return (drawn - self.values[0]).astype(jnp.result_type(float))


class _Carriers:
    """The `reparam` config of a model under `DiscreteHMCGibbs`: a carrier for each latent site
    with a finite support not marked `infer={"enumerate": "parallel"}`. Records each carrier's
    support size (`sizes`, a Python int: static) while the model is traced."""

    def __init__(self, api: str):
        self.api, self.sizes = api, {}

    def __call__(self, msg):
        fn = msg["fn"]
        if msg["is_observed"] or not getattr(fn, "has_enumerate_support", False) \
                or msg["infer"].get("enumerate") == "parallel":
            return None
        return self._carry

    def _carry(self, name, fn, obs):
        api = f"effppl.infer.{self.api}"
        if fn.event_shape:
            raise SiteError(
                f"{api}: site `{name}` (distribution {type(fn).__name__}) has event shape "
                f"{fn.event_shape}, whose support is enumerated by whole events; its "
                f"Gibbs updates change one scalar element at a time. Draw it in a plate instead "
                f"of `.to_event(...)`, or mark the site `infer={{'enumerate': 'parallel'}}` to "
                f"sum it out.")
        try:
            support = fn.enumerate_support(expand=False)
        except (NotImplementedError, ValueError) as err:
            raise SiteError(
                f"{api}: the support of site `{name}` ({type(fn).__name__}) cannot be "
                f"enumerated ({err}); its elements need one support, the same for each.") from None
        except jax.errors.ConcretizationTypeError:
            raise SiteError(
                f"{api}: the support of site `{name}` ({type(fn).__name__}) depends on values "
                f"computed while the model is traced (e.g. a `Binomial` whose `total_count` is "
                f"an array, or a latent site): its size must be known when the chain's program "
                f"is built. Give such a count as a Python int (a constant, or a model "
                f"argument), or mark the site `infer={{'enumerate': 'parallel'}}`.") from None
        values = jnp.reshape(support, (support.shape[0], -1))[:, 0]
        self.sizes[name + CARRIER] = int(values.shape[0])
        carrier = _SupportIndex(fn, values)
        return None, carrier.value_of(sample(name + CARRIER, carrier))


def _with_carriers(model, api: str) -> tuple:
    """`(model under the carriers' reparam, its _Carriers)`, one per model object (the compiled
    programs are cached by the model), as `MCMC`'s automatic enumeration keeps its wrappers."""
    def build():
        carriers = _Carriers(api)
        return reparam(model, config=carriers), carriers, model

    return cached(("discrete-gibbs", api, id(model)), build,
                  valid=lambda stored: stored[2] is model)[:2]


def _log(x):
    return jnp.where(jnp.isnan(x), -jnp.inf, x)


def _gibbs(modified):
    """A proposal for element `coord` from its full conditional (over the candidates
    `0 .. size - 1`), its log acceptance ratio 0; `modified`: Liu's (1996) Metropolised Gibbs
    sampler, proposing from the conditional without the current value, with the log of
    `(1 - P(current)) / (1 - P(proposal))`."""
    def propose(key, flat, lp, coord, size, logdensity, max_size):
        del lp  # (every candidate's log density is computed)
        candidates = jnp.arange(max_size)
        lps = jax.vmap(lambda c: logdensity(flat.at[coord].set(c.astype(flat.dtype))))(
            candidates)
        lps = jnp.where(candidates < size, _log(lps), -jnp.inf)
        if not modified:
            new = jax.random.categorical(key, lps)
            return flat.at[coord].set(new.astype(flat.dtype)), lps[new], jnp.zeros_like(lps[0])
        current = jnp.round(flat[coord]).astype(candidates.dtype)
        others = jnp.where(candidates == current, -jnp.inf, lps)
        new = jax.random.categorical(key, others)
        without_new = jnp.where(candidates == new, -jnp.inf, lps)
        log_ratio = jax.nn.logsumexp(others) - jax.nn.logsumexp(without_new)
        return (flat.at[coord].set(new.astype(flat.dtype)), lps[new],
                jnp.where(jnp.isfinite(lps[new]), log_ratio, -jnp.inf))

    return propose


def _random_walk(modified):
    """A proposal for element `coord` drawn uniformly from its support (`modified`: from its
    other values), with the log density ratio `lp(proposal) - lp(current)` as its log
    acceptance ratio (`lp`: the current log density)."""
    def propose(key, flat, lp, coord, size, logdensity, max_size):
        del max_size
        if modified:
            i = jax.random.randint(key, (), 0, jnp.maximum(size - 1, 1))
            current = jnp.round(flat[coord]).astype(i.dtype)
            new = jnp.where(i >= current, i + 1, i)
        else:
            new = jax.random.randint(key, (), 0, size)
        proposed = flat.at[coord].set(new.astype(flat.dtype))
        lp_new = _log(logdensity(proposed))
        return proposed, lp_new, lp_new - lp

    return propose


def proposal(random_walk: bool, modified: bool) -> Callable:
    """`propose(key, flat, lp, coord, size, logdensity, max_size) -> (flat, lp, log ratio)`:
    NumPyro's four discrete proposals for one element of the flat vector (`lp`: the log density
    at `flat`; `size`: the element's support size, `max_size` a static bound of it)."""
    return (_random_walk if random_walk else _gibbs)(modified)


class Discrete(NamedTuple):
    """The discrete coordinates of a chain's flat vector (`layout`): `coords` (their indices,
    NumPy), `sizes` (their support sizes, int32), `max_size` (static), `continuous` (the other
    indices, NumPy)."""

    coords: np.ndarray
    sizes: Any
    max_size: int
    continuous: np.ndarray


def layout(api: str, carriers: _Carriers, model, inner_model) -> Discrete:
    """The `Discrete` layout of `model` (a `ChunkModel`) under the carriers of `carriers`.
    **Raises:** `KernelSettingsError` for a model with no carrier (no discrete site to update)."""
    sizes = carriers.sizes
    if not any(n in sizes for n in model.position):
        raise KernelSettingsError(
            f"`effppl.infer.{api}`: model `{model_name(inner_model)}` has no discrete latent "
            f"site to update (one with a finite support, not marked "
            f"`infer={{'enumerate': 'parallel'}}`); its latent sites are "
            f"{sorted(model.position)}. Use `NUTS` itself.")
    size_of = per_element(model.position, lambda n: sizes.get(n, 0))
    coords = np.flatnonzero(size_of > 0)
    return Discrete(coords, jnp.asarray(size_of[coords], jnp.int32), int(size_of.max()),
                    np.flatnonzero(size_of == 0))


class DiscreteHMCGibbs(HMCGibbs):
    """Gibbs (or Metropolis) updates of a model's discrete latent sites, then one transition of
    `inner_kernel` (`NUTS` or `HMC`) on its continuous ones. As NumPyro's `DiscreteHMCGibbs`.

    Every latent site with a finite support (`Bernoulli`, `Categorical`, `Binomial`,
    `DiscreteUniform`, ...) is updated by Gibbs steps, unless marked
    `infer={"enumerate": "parallel"}`, which sums it out exactly as under `NUTS`. A transition
    visits each element of those sites once, in a random order; each element's update sees the
    current values of all the others. `get_samples()` holds the discrete sites' values (integers,
    as the model reads them) beside the continuous sites.

    **Arguments:**

    - `inner_kernel`: a `NUTS` or `HMC` kernel of the model (its settings, adaptation and
      `init_strategy` serve the whole chain; its `mass_matrix` `"diag"` or `"dense"`).
    - `random_walk`: False (default) draws each element from its full conditional (one log
      density per value of its support); True proposes a value uniformly from the support and
      accepts it by the Metropolis ratio (one log density per element).
    - `modified`: propose only values other than the current one (Liu's Metropolised Gibbs
      sampler with `random_walk=False`; then accepted with probability
      `(1 - P(current)) / (1 - P(proposal))`). Defaults to False.

    The warmup tunes the inner kernel's step size and mass matrix on the continuous sites; the
    discrete sites are updated in warmup too. A model with no continuous latent site runs the
    discrete updates alone (the inner kernel's statistics are those of an empty position, its
    `acceptance_rate` the target one, so that the step size's adaptation keeps still).

    The chains start the discrete sites where `init_strategy` puts their carriers (the
    default: near the start of the support); as in NumPyro, `init_to_value` does not set them
    (its values for the discrete sites are not read). `MCMC.last_state.position` holds the
    carriers (`x_gibbs_index`: the index of `x`'s value in its support, a float) beside the
    continuous sites' unconstrained values.

    **Raises:** `KernelSettingsError` for an `inner_kernel` that is not `NUTS` or `HMC` of a
    model (or uses another `mass_matrix`, or `find_heuristic_step_size=True`), for
    `random_walk`/`modified` that are not bools, and when the chains run, for a model without a
    discrete latent site to update; `SiteError` naming the site for a discrete site with an
    event shape (`.to_event(1)`), a support that differs between its elements, or a support
    whose size is computed while the model is traced (a `Binomial` with an array
    `total_count`: give a Python int). A discrete site without a finite support (`Poisson`) is
    the `MCMCError` `NUTS` gives.

    **References:** Liu (1996), "Peskun's theorem and a modified discrete-state Gibbs sampler",
    Biometrika 83(3); Geman & Geman (1984) (Gibbs sampling); NumPyro's `DiscreteHMCGibbs`.

    Example: a two-component mixture's label `c` by Gibbs steps and the value `x` by NUTS
    (Gibbs steps mix slowly between well-separated components: here they overlap).

        >>> import jax, jax.numpy as jnp
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import MCMC, NUTS, DiscreteHMCGibbs
        >>> def model():
        ...     c = effppl.sample("c", dist.Bernoulli(0.3))
        ...     effppl.sample("x", dist.Normal(jnp.array([-1.0, 1.0])[c], 1.0))
        >>> kernel = DiscreteHMCGibbs(NUTS(model))
        >>> mcmc = MCMC(kernel, num_warmup=500, num_samples=4000, progress_bar=False)
        >>> mcmc.run(jax.random.key(0))
        >>> draws = mcmc.get_samples()
        >>> sorted(draws), draws["c"].dtype
        (['c', 'x'], dtype('int32'))
        >>> round(float(draws["c"].mean()), 1)
        0.3
    """

    _api = "DiscreteHMCGibbs"
    runs_user_code = False

    def __init__(self, inner_kernel: HMC | NUTS, *, random_walk: bool = False,
                 modified: bool = False):
        api = self._api
        inner_checked(api, inner_kernel)
        for name, value in (("random_walk", random_walk), ("modified", modified)):
            if not isinstance(value, (bool, np.bool_)):
                raise KernelSettingsError(
                    f"`effppl.infer.{api}(..., {name}=...)` expected a bool, but got "
                    f"{value!r:.60}.")
        self.__dict__.update(inner_kernel.__dict__)  # the inner kernel's settings
        self.inner_kernel = inner_kernel
        self.random_walk, self.modified = bool(random_walk), bool(modified)
        self.model, self._site_carriers = _with_carriers(inner_kernel.model, self._api)
        self._propose = proposal(self.random_walk, self.modified)

    def settings(self) -> tuple:
        return (*self.inner_kernel.settings(), self._api, self.random_walk, self.modified)

    def user_code_key(self, fns, position, dynamic) -> str | None:
        return None

    def check_draws(self, model: str, samples: dict) -> None:
        return None

    def carriers_of(self, names) -> dict:
        """`{carrier site: discrete site}` among `names` (site names of the draws)."""
        names = set(names)
        return {n: n[:-len(CARRIER)] for n in names
                if n.endswith(CARRIER) and n[:-len(CARRIER)] in names}

    def bind(self, kernel: Callable, model) -> Callable:
        """The transition of one chunk: the discrete updates, then `kernel` on the other
        coordinates (see the module's docstring)."""
        discrete = layout(self._api, self._site_carriers, model, self.inner_kernel.model)
        coords, hmc_index = discrete.coords, discrete.continuous
        propose, target = self._propose, self.target_accept_prob

        def transition(rng_key, state, logdensity, step_size, inverse_mass_matrix, **kwargs):
            key_order, key_gibbs, key_hmc = jax.random.split(rng_key, 3)
            order = jax.random.permutation(key_order, coords.size)

            def update(i, carry):
                flat, lp = carry
                j = order[i]
                key_propose, key_accept = jax.random.split(jax.random.fold_in(key_gibbs, i))
                new, lp_new, log_ratio = propose(key_propose, flat, lp, jnp.asarray(coords)[j],
                                                 discrete.sizes[j], logdensity,
                                                 discrete.max_size)
                accept = jnp.log(jax.random.uniform(key_accept)) < log_ratio
                return jnp.where(accept, new, flat), jnp.where(accept, lp_new, lp)

            flat, _ = jax.lax.fori_loop(0, coords.size, update,
                                        (state.position, state.logdensity))

            state, info = step_on(kernel, key_hmc, state, flat, hmc_index, logdensity,
                                  step_size, inverse_mass_matrix, kwargs)
            if not hmc_index.size:  # (no continuous site: nothing for the step size to tune)
                info = info._replace(acceptance_rate=jnp.asarray(
                    target, jnp.result_type(info.acceptance_rate)))
            return state, info

        return transition
