"""`HMCECS`: HMC (or NUTS) with energy-conserving subsampling (NumPyro's `HMCECS`).

effppl's sampler moves a flat vector of real coordinates. Here each subsampled plate's indices
become coordinates of it: the model runs under a wrapper that draws, for plate `p` with
subsample size `m`, a real *carrier* site `p_subsample_index` of `m` elements (element `j`
holds index `floor(N * frac(u_j))`, so that an initial point drawn uniformly gives uniform
indices; its log density is 0) and gives the plate those indices. A transition proposes a
block of new indices (drawn uniformly with replacement), accepts them by the Metropolis ratio
of the estimated log density, then takes one transition of the inner kernel on the other
coordinates with the indices held. Without a proxy the estimate is the naive subsampled log
density (the plate's scale `N / m`); with `taylor_proxy`, the observed sites inside
subsampled plates are masked out of the model's log density and the bias-corrected difference
estimator of their log likelihood (`_ecs.py`) is added.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ...handlers import reparam, seed, substitute, trace
from ...handlers.internal import sample
from .._compile._cache import cached
from .._model import model_name
from ._ecs import (
    ECSError,
    block_update,
    check_reference,
    estimate,
    plate_log_liks,
    subsample_plates,
    taylor_proxy,
)
from ._hmc_gibbs import HMCGibbs, _ByIdentity, inner_checked, per_element, step_on
from ._kernels import HMC, NUTS, KernelSettingsError

__all__ = ["HMCECS", "CARRIER"]

CARRIER = "_subsample_index"
"""The suffix of a subsampled plate's carrier site (`N` -> `N_subsample_index`)."""


class _SubsampleIndices(dist.Distribution):
    """A carrier of `subsample_size` indices of a plate of `size`: a real vector whose element
    `u` stands for index `floor(size * frac(u))`; log density 0 (the indices' uniform law is a
    constant); `sample` draws uniform indices, each at the middle of its interval."""

    support = constraints.real_vector  # pyright: ignore[reportAssignmentType]
    pytree_aux_fields = ("size", "subsample_size")

    def __init__(self, size: int, subsample_size: int):
        self.size, self.subsample_size = size, subsample_size
        super().__init__((), (subsample_size,), validate_args=False)

    def index(self, value):
        i = jnp.floor(jnp.mod(value, 1.0) * self.size).astype(jnp.int32)
        return jnp.clip(i, 0, self.size - 1)

    def log_prob(self, value):
        return jnp.zeros(jnp.shape(value)[:-1], jnp.result_type(value))

    def sample(self, key, sample_shape=()):
        i = jax.random.randint(key, tuple(sample_shape) + self.event_shape, 0, self.size)
        return self.carrier(i)

    def carrier(self, index):
        return (index.astype(jnp.result_type(float)) + 0.5) / self.size


def _masked(plates: dict) -> Callable:
    """A `reparam` config masking out the observed sites inside a subsampled plate of
    `plates` (their likelihood is the estimator's)."""
    def config(msg):
        inside = any(f.name in plates for f in msg["cond_indep_stack"])
        if not msg["is_observed"] or not inside:
            return None
        return lambda name, fn, obs: (fn.mask(False), obs)

    return config


def _with_carriers(model: Callable, plates: dict, masked: bool) -> Callable:
    """`model` with its subsampled plates' indices drawn as carrier sites (and, `masked`, the
    observed sites inside them masked out), one wrapper per model, plates and mode."""
    def build():
        def ecs_model(*args, **kwargs):
            indices = {}
            for name, (size, m) in plates.items():
                carrier = _SubsampleIndices(size, m)
                indices[name] = carrier.index(sample(name + CARRIER, carrier))
            inner = substitute(model, data=indices)
            if masked:
                inner = reparam(inner, config=_masked(plates))
            return inner(*args, **kwargs)

        ecs_model.__name__ = getattr(model, "__name__", "model")
        ecs_model.__qualname__ = getattr(model, "__qualname__", ecs_model.__name__)
        return ecs_model, model

    key = ("hmcecs", id(model), tuple(plates.items()), masked)
    return cached(key, build, valid=lambda stored: stored[1] is model)[0]


class HMCECS(HMCGibbs):
    """HMC with energy-conserving subsampling (Dang et al. 2019): HMC-within-Gibbs on a model
    whose plates are subsampled (`plate(name, N, subsample_size=m)`), the subsample indices
    being part of the chain. As NumPyro's `HMCECS`.

    Each transition proposes new indices for one of `num_blocks` blocks of each subsampled
    plate (drawn uniformly, with replacement), accepts them by the Metropolis ratio of the
    estimated log density (Tran et al. 2017's block pseudo-marginal update), then takes one
    transition of `inner_kernel` on the latent sites with the indices held. The log likelihood
    of a subsampled plate is estimated by its subsample: with `proxy=None` naively (the plate's
    scale `N / m`; the HMC trajectory is then biased, as Betancourt 2015 warns), with
    `proxy=HMCECS.taylor_proxy(reference_params)` by the bias-corrected difference estimator
    (Quiroz et al. 2019), whose control variate is a Taylor expansion of each element's log
    likelihood around `reference_params` (ideally a MAP estimate).

    **Arguments:**

    - `inner_kernel`: a `NUTS` or `HMC` kernel of the model (its settings, adaptation and
      `init_strategy` serve the whole chain; its `mass_matrix` `"diag"` or `"dense"`).
    - `num_blocks`: the number of blocks each subsample is divided into (a positive int);
      one block is proposed anew per transition. Defaults to 1 (a whole new subsample).
    - `proxy`: None, or `HMCECS.taylor_proxy(reference_params, degree=2)` (NumPyro's proxy
      constructor protocol: see `taylor_proxy`).

    `get_samples()` holds the model's latent and deterministic sites (not the indices).
    `get_extra_fields()["potential_energy"]` (also NumPyro's
    `"hmc_state.potential_energy"`) is the estimated potential.

    **Raises:** `KernelSettingsError` for an `inner_kernel` that is not `NUTS` or `HMC` of a
    model, a `num_blocks` that is not a positive int, or a `proxy` that is not callable; when
    the chains run, an `ECSError` (also a `RuntimeError`, NumPyro's type) for a model without
    subsampled plates, for data holding NaN or inf, and, with a proxy, for discrete latent
    sites, a latent site inside a subsampled plate, an observed site inside two subsampled
    plates, or `reference_params` that miss a latent site or give one a value of the wrong
    shape, not finite or outside its support.

    **References:** Dang, Quiroz, Kohn, Tran & Villani (2019), "Hamiltonian Monte Carlo with
    energy conserving subsampling", JMLR 20; Quiroz, Kohn, Villani & Tran (2019), "Speeding up
    MCMC by efficient data subsampling", JASA 114; Tran, Kohn, Quiroz & Villani (2017), "The
    block pseudo-marginal sampler"; Bardenet, Doucet & Holmes (2017), "On Markov chain Monte
    Carlo methods for tall data"; Betancourt (2015), "The fundamental incompatibility of
    scalable Hamiltonian Monte Carlo and naive data subsampling"; NumPyro's `HMCECS`.

    Example: a normal mean from 10,000 points, 100 at a time.

        >>> import jax, jax.numpy as jnp
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import HMCECS, MCMC, NUTS
        >>> def model(data):
        ...     x = effppl.sample("x", dist.Normal(0.0, 1.0))
        ...     with effppl.plate("N", data.shape[0], subsample_size=100):
        ...         batch = effppl.subsample(data, event_dim=0)
        ...         effppl.sample("obs", dist.Normal(x, 1.0), obs=batch)
        >>> data = jax.random.normal(jax.random.key(0), (10000,)) + 1.0
        >>> proxy = HMCECS.taylor_proxy({"x": jnp.array(1.0)})
        >>> kernel = HMCECS(NUTS(model), num_blocks=10, proxy=proxy)
        >>> mcmc = MCMC(kernel, num_warmup=300, num_samples=300, progress_bar=False)
        >>> mcmc.run(jax.random.key(0), data)
        >>> round(float(mcmc.get_samples()["x"].mean()), 1)
        1.0
    """

    _api = "HMCECS"
    runs_user_code = True  # the proxy's reference values: the program is not stored on disk
    estimated_log_density = True  # (the draws' log density is the subsample's estimate)

    def __init__(self, inner_kernel: HMC | NUTS, *, num_blocks: int = 1,
                 proxy: Callable | None = None):
        api = self._api
        inner_checked(api, inner_kernel)
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, (int, np.integer)) \
                or num_blocks < 1:
            raise KernelSettingsError(f"`effppl.infer.{api}(..., num_blocks=...)` expected a "
                                      f"positive int, but got {num_blocks!r:.60}.")
        if proxy is not None and not callable(proxy):
            raise KernelSettingsError(
                f"`effppl.infer.{api}(..., proxy=...)` expected None or a proxy constructor "
                f"(`HMCECS.taylor_proxy(reference_params)`), but got {proxy!r:.60}.")
        self.__dict__.update(inner_kernel.__dict__)  # the inner kernel's settings
        self.inner_kernel = inner_kernel
        self.num_blocks, self.proxy = int(num_blocks), proxy
        self._plates: dict = {}
        self._prototype: dict = {}

    taylor_proxy = staticmethod(taylor_proxy)

    def settings(self) -> tuple:
        proxy = None if self.proxy is None else _ByIdentity(self.proxy)
        return (*self.inner_kernel.settings(), self._api, self.num_blocks, proxy,
                tuple(self._plates.items()))

    def user_code_key(self, fns, position, dynamic) -> str | None:
        return self._api  # (the proxy is in `settings()`: a new one builds a new sampler)

    def check_draws(self, model: str, samples: dict) -> None:
        return None

    def carriers_of(self, names) -> dict:
        """`{carrier site: plate}` among `names` (hidden from the draws)."""
        return {n: n[:-len(CARRIER)] for n in names if n.endswith(CARRIER)
                and n[:-len(CARRIER)] in self._plates}

    def setup_model(self, args: tuple, kwargs: dict) -> None:
        """Find the model's subsampled plates (a prototype trace at the call's arguments, as
        NumPyro's `init`) and set `self.model` to the model with their carriers.
        **Raises:** `ECSError` for a model without subsampled plates, or with discrete latent
        sites when a proxy is given."""
        inner = self.inner_kernel.model
        tr = trace(seed(inner, rng_seed=0)).get_trace(*args, **kwargs)
        plates = subsample_plates(tr)
        if not plates:
            raise ECSError(f"`effppl.infer.{self._api}`: Cannot detect any subsample statements "
                           f"in model `{model_name(inner)}` (a `plate(name, size, "
                           f"subsample_size=m)` with m < size).")
        clash = [p + CARRIER for p in plates if p + CARRIER in tr]
        if clash:
            raise ECSError(f"`effppl.infer.{self._api}`: model `{model_name(inner)}` has a site "
                           f"named {clash[0]!r}, the name of the carrier of a plate's indices.")
        bad = sorted({kind for x in jax.tree.leaves((args, kwargs))
                      if isinstance(x, (jax.Array, np.ndarray))
                      and jnp.issubdtype(jnp.result_type(x), jnp.inexact)
                      for kind, test in (("NaN", jnp.isnan), ("inf", jnp.isinf))
                      if bool(jnp.any(test(x)))})
        if bad:
            raise ECSError(f"`effppl.infer.{self._api}`: the data of model `{model_name(inner)}` "
                           f"hold {' and '.join(bad)} (in its array arguments): a subsample "
                           f"holding such a value has a non-finite log density, and one "
                           f"without it hides it. Drop those values before sampling.")
        if self.proxy is not None:
            discrete = [n for n, s in tr.items() if s["type"] == "sample"
                        and not s["is_observed"] and s["fn"].support.is_discrete]
            if discrete:
                raise ECSError(f"`effppl.infer.{self._api}`: Currently, the proxy does not "
                               f"support models with discrete latent sites ({discrete}).")
            local = [(n, f.name) for n, s in tr.items() if s["type"] == "sample"
                     and not s["is_observed"] for f in s["cond_indep_stack"] if f.name in plates]
            if local:
                raise ECSError(f"`effppl.infer.{self._api}`: latent site `{local[0][0]}` sits "
                               f"inside the subsampled plate `{local[0][1]}`: the Taylor proxy "
                               f"expands the log likelihood around one value of every latent "
                               f"site, so local latent sites are not supported with a proxy "
                               f"(use proxy=None, or make the site global).")
            reference = getattr(self.proxy, "reference_params", None)
            if reference is not None:
                check_reference(reference, tr)
        self._plates, self._prototype = plates, tr
        self.model = _with_carriers(inner, plates, self.proxy is not None)

    def bind(self, kernel: Callable, model) -> Callable:
        """The transition of one chunk: the block update of the indices, then `kernel` on the
        other coordinates (see the module's docstring)."""
        plates = self._plates
        code = {p + CARRIER: k + 1 for k, p in enumerate(plates)}
        of = per_element(model.position, lambda n: code.get(n, 0))
        coords = {p: np.flatnonzero(of == k + 1) for k, p in enumerate(plates)}
        hmc_index = np.flatnonzero(of == 0)
        target_accept = self.target_accept_prob
        carriers = {p: _SubsampleIndices(*plates[p]) for p in plates}
        latent = [n for n in model.position if n not in code]
        num_blocks, proxy = self.num_blocks, self.proxy
        estimated = proxy is not None
        if proxy is not None:
            args, kwargs = model.args()
            proxy_fn, gibbs_init, _ = proxy(self._prototype, plates, self.inner_kernel.model,
                                            args, kwargs, num_blocks=num_blocks)

        def indices_of(flat):
            return {p: carriers[p].index(flat[coords[p]]) for p in plates}

        def target(logdensity, proxy_state):
            if not estimated:
                return logdensity

            def ecs_logdensity(flat):
                values = model.constrain(flat)
                log_liks = plate_log_liks(self.inner_kernel.model, args, kwargs,
                                          {n: values[n] for n in latent}, indices_of(flat))
                unconstrained = model.unravel(flat)
                total, sub = proxy_fn({n: unconstrained[n] for n in latent}, list(log_liks),
                                      proxy_state)
                return logdensity(flat) + sum(
                    estimate(log_liks[p], total[p], sub[p], plates[p][0]) for p in log_liks)

            return ecs_logdensity

        def transition(rng_key, state, logdensity, step_size, inverse_mass_matrix, **kwargs_):
            key_block, key_accept, key_hmc = jax.random.split(rng_key, 3)
            flat = state.position
            now = indices_of(flat)
            new_flat = flat
            for k, p in enumerate(plates):
                new = block_update(jax.random.fold_in(key_block, k), now[p], plates[p][0],
                                   num_blocks)
                new_flat = new_flat.at[coords[p]].set(carriers[p].carrier(new).astype(flat.dtype))
            state_now = gibbs_init(None, now) if estimated else None
            state_new = gibbs_init(None, indices_of(new_flat)) if estimated else None
            lp = target(logdensity, state_now)(flat)
            lp_new = target(logdensity, state_new)(new_flat)
            log_ratio = jnp.where(jnp.isnan(lp_new), -jnp.inf, lp_new - lp)
            accept = jnp.log(jax.random.uniform(key_accept)) < log_ratio
            flat = jnp.where(accept, new_flat, flat)
            proxy_state = jax.tree.map(lambda a, b: jnp.where(accept, a, b), state_new,
                                       state_now) if estimated else None
            state, info = step_on(kernel, key_hmc, state, flat, hmc_index,
                                  target(logdensity, proxy_state), step_size,
                                  inverse_mass_matrix, kwargs_)
            if not hmc_index.size:  # (no continuous site: nothing for the step size to tune)
                info = info._replace(acceptance_rate=jnp.asarray(
                    target_accept, jnp.result_type(info.acceptance_rate)))
            return state, info

        return transition
