"""The annealed-importance-sampling autoguides (NumPyro's `AutoDAIS`, `AutoSemiDAIS`): a draw from
a base normal moved by K steps of uncorrected underdamped Langevin (HMC) dynamics along a path of
densities from the base to the model's posterior, its density the base's times the ratio of the
momenta's kinetic terms (Differentiable Annealed Importance Sampling).

One step `k` (annealing `beta_k`, step size `eta_k`, mass `m`, damping `gamma`), on the position
`z` and momentum `v` (NumPyro's parametrization, its param names, shapes and constraints):

    z' = z + eta_k v / (2 m)
    v' = v + eta_k [(1 - beta_k) grad log q0(z') + beta_k grad log p(z')]
    z  = z' + eta_k v' / (2 m)
    v  = gamma v' + sqrt(1 - gamma^2) eps_k,       eps_k ~ Normal(0, m)

and the guide's log density gains `log N(v; 0, m) - log N(v'; 0, m)` at each step (a `factor`
site), so that the ELBO is the DAIS bound on the model's evidence.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions import constraints

from .... import handlers
from ....handlers import internal as ppl
from ....handlers import unconstrained_log_density
from ..._init import init_to_uniform
from . import _plates as plates_
from ._continuous import AutoContinuous
from ._errors import AutoGuideError

__all__ = ["AutoDAIS"]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _DAISSettings:
    """The settings both DAIS guides share, checked (NumPyro's rules, each error naming the
    argument): `K` an int >= 1; `0 < eta_init < eta_max`; `0 < gamma_init < 1`; `init_scale >
    0`."""

    def _dais_settings(self, K, eta_init, eta_max, gamma_init, init_scale):
        guide = f"effppl.infer.autoguide.{type(self).__name__}"
        if isinstance(K, bool) or not isinstance(K, int) or K < 1:
            raise AutoGuideError(f"{guide}(K={K!r}) expected an int >= 1 (the number of "
                                 f"annealed HMC steps), as NumPyro's K >= 1.")
        if not _number(eta_max) or eta_max <= 0:
            raise AutoGuideError(f"{guide}(eta_max={eta_max!r}) expected a positive number "
                                 f"(the largest HMC step size).")
        if not _number(eta_init) or not 0 < eta_init < eta_max:
            raise AutoGuideError(f"{guide}(eta_init={eta_init!r}) expected a number with 0 < "
                                 f"eta_init < eta_max = {eta_max!r} (the initial HMC step "
                                 f"size).")
        if not _number(gamma_init) or not 0 < gamma_init < 1:
            raise AutoGuideError(f"{guide}(gamma_init={gamma_init!r}) expected a number in the "
                                 f"open interval (0, 1) (the momentum damping).")
        if not _number(init_scale) or init_scale <= 0:
            raise AutoGuideError(f"{guide}(init_scale={init_scale!r}) expected a positive "
                                 f"number (the base normal's initial scale).")
        self.K = K
        self.eta_init, self.eta_max = float(eta_init), float(eta_max)
        self.gamma_init, self.init_scale = float(gamma_init), float(init_scale)

    def _not_defined(self, api):
        return NotImplementedError(
            f"{type(self).__name__} has no {api} (as NumPyro's): its posterior is the law of "
            f"annealed HMC draws, with no closed form. Use `sample_posterior(key, params, "
            f"sample_shape=(n,))` and summarise the draws.")

    def median(self, params):
        """Not defined (`NotImplementedError`, as NumPyro's): use `sample_posterior`."""
        raise self._not_defined("median")

    def quantiles(self, params, quantiles):
        """Not defined (`NotImplementedError`, as NumPyro's): use `sample_posterior`."""
        raise self._not_defined("quantiles")


def _annealed_hmc(z_0, eps, betas, *, eta0, eta_coeff, eta_max, gamma, inv_mass,
                  momentum_log_prob, base_log_prob, target_log_prob):
    """K steps of uncorrected underdamped Langevin dynamics from `z_0` (the module docstring):
    `(z_K, sum of log N(v_k) - log N(v'_k))`. `eps` `(K, *z.shape)`: the momentum refreshments
    (the last one is the initial momentum, as NumPyro's); `betas` `(K, ...)`: the annealing
    schedule; `base_log_prob`, `target_log_prob`: scalar functions of `z` whose gradients give
    the path's forces. Broadcasting step params (per data point) are the caller's: they arrive
    shaped to multiply `z`."""
    def step(carry, eps_beta):
        eps_k, beta = eps_beta
        z, v_prev, log_factor = carry
        eta = jnp.clip(eta0 + eta_coeff * beta, 0.0, eta_max)
        z_half = z + v_prev * eta * inv_mass
        force = ((1.0 - beta) * jax.grad(base_log_prob)(z_half)
                 + beta * jax.grad(target_log_prob)(z_half))
        v_hat = v_prev + eta * force
        z = z_half + v_hat * eta * inv_mass
        v = gamma * v_hat + jnp.sqrt(1.0 - gamma ** 2) * eps_k
        log_factor = log_factor + momentum_log_prob(v_prev) - momentum_log_prob(v_hat)
        return (z, v, log_factor), None

    zero = jnp.zeros(jnp.shape(momentum_log_prob(eps[-1])), jnp.result_type(z_0))
    (z, _, log_factor), _ = jax.lax.scan(step, (z_0, eps[-1], zero), (eps, betas))
    return z, log_factor


class AutoDAIS(_DAISSettings, AutoContinuous):
    """Differentiable annealed importance sampling over the flat unconstrained latent vector
    (size D): a base normal draw `z_0` moved by `K` steps of uncorrected underdamped Langevin
    (HMC) dynamics that anneal from the base density to the model's posterior, with learnable
    step sizes, damping, annealing schedule, mass matrix and base (NumPyro's `AutoDAIS`, its
    params and semantics; the method is called Uncorrected Hamiltonian Annealing in Geffner and
    Domke). The guide's density of its draw is the base's times the ratio of the momenta's
    kinetic terms (a `factor` site `{prefix}_factor`); the ELBO is the DAIS bound, tighter
    than the base normal's.

    **Arguments:** `model`; `K` (int >= 1, default 4: the number of annealed steps);
    `base_dist`: `"diagonal"` (default) or `"cholesky"` (a full-covariance base normal);
    `eta_init` (default 0.01) and `eta_max` (0.1): the initial and largest step size, `0 <
    eta_init < eta_max`; `gamma_init` (in (0, 1), default 0.9): the initial momentum damping;
    `prefix`; `init_loc_fn` (the base's initial loc); `init_scale` (> 0, default 0.1): the
    base's initial scale; `forward_mode_differentiation` (accepted, as NumPyro's; gradients are
    reverse mode).

    **Params** (D the latent size): `{prefix}_eta0` `()` (in `(0, eta_max)`),
    `{prefix}_eta_coeff` `()` (step `k`'s size is `clip(eta0 + eta_coeff * beta_k, 0,
    eta_max)`), `{prefix}_gamma` `()` (in `(0, 1)`), `{prefix}_beta_increments` `(K,)`
    (positive; `beta = cumsum / sum`), `{prefix}_mass_matrix` `(D,)` (positive),
    `{prefix}_z_0_loc` `(D,)`, and `{prefix}_z_0_scale` `(D,)` (positive) or
    `{prefix}_z_0_scale_tril` `(D, D)` (`scaled_unit_lower_cholesky`). The guide's sample
    sites: `{prefix}_z_0` (the base draw), `{prefix}_momentum` `(K, D)` (masked out of the
    ELBO), the factor `{prefix}_factor`, then one `Delta` per latent site.

    The target's gradient runs the model (hidden by `block`) at the arguments the guide is
    called with (NumPyro's reads the arguments it first ran with), its params at their initial
    values.

    **Raises:** `AutoGuideError` (a `ValueError`) naming the argument for `K` not an int >= 1,
    `base_dist` not `"diagonal"`/`"cholesky"`, `eta_init`, `eta_max`, `gamma_init` or
    `init_scale` out of range; when the guide first runs, `AutoGuideError` for a latent site in
    a subsampled plate (as `AutoContinuous`), and `NotImplementedError` (as NumPyro's) for a
    model with any subsampled plate: use `AutoSemiDAIS`. `median`, `quantiles`,
    `get_base_dist`, `get_transform` and `get_posterior` raise `NotImplementedError`, as
    NumPyro's: use `sample_posterior`.

    **References:** NumPyro's `AutoDAIS`; Geffner and Domke (2021), "MCMC Variational Inference
    via Uncorrected Hamiltonian Annealing"; Zhang, Hsu, Li, Finn and Grosse (2021),
    "Differentiable Annealed Importance Sampling and the Perils of Gradient Noise".
    """

    def __init__(self, model, *, K=4, base_dist="diagonal", eta_init=0.01, eta_max=0.1,
                 gamma_init=0.9, prefix="auto", init_loc_fn=init_to_uniform, init_scale=0.1,
                 forward_mode_differentiation=False):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn)
        if base_dist not in ("diagonal", "cholesky"):
            raise AutoGuideError(f"effppl.infer.autoguide.AutoDAIS(base_dist={base_dist!r:.60})"
                                 f" expected \"diagonal\" or \"cholesky\" (the base normal's "
                                 f"covariance), as NumPyro's.")
        self._dais_settings(K, eta_init, eta_max, gamma_init, init_scale)
        self.base_dist = base_dist
        self.forward_mode_differentiation = bool(forward_mode_differentiation)

    def _check_no_subsampling(self, args, kwargs):
        analysis = ppl.analyze_model(self.model, args, kwargs)
        subsampled = plates_.subsampled_plates(analysis)
        if subsampled:  # NumPyro's NotImplementedError
            raise NotImplementedError(
                f"effppl.infer.autoguide.AutoDAIS cannot be used with data subsampling (as "
                f"NumPyro's): the model's plate `{sorted(subsampled)[0]}` is subsampled. Use "
                f"AutoSemiDAIS, or a plate without subsample_size.")

    def __call__(self, *args, **kwargs):
        self._check_no_subsampling(args, kwargs)
        sites = self._latent_sites(args, kwargs)
        layout = self._layout(sites)
        init = self._init_locs(args, kwargs, sites, self._init_key(args, kwargs, sites))
        flat_init = jnp.concatenate([jnp.ravel(init[n]) for n, _, _ in layout])
        latent = self._dais(flat_init, layout, args, kwargs)
        values, log_dets, _ = self._constrain(args, kwargs, self._unpack(latent, layout), sites)
        return self._emit(values, sites, {n: -log_dets[n] for n in values})

    def _dais(self, flat_init, layout, args, kwargs):
        """The annealed draw of the flat latent vector: the params, the base draw, the momenta,
        the HMC steps and the factor, in NumPyro's order (so the same key gives the same draw).
        """
        p, d, K = self.prefix, flat_init.shape[0], self.K
        eta0 = ppl.param(f"{p}_eta0", jnp.asarray(self.eta_init, flat_init.dtype),
                         constraint=constraints.interval(0.0, self.eta_max))
        eta_coeff = ppl.param(f"{p}_eta_coeff", jnp.zeros((), flat_init.dtype))
        gamma = ppl.param(f"{p}_gamma", jnp.asarray(self.gamma_init, flat_init.dtype),
                          constraint=constraints.interval(0.0, 1.0))
        increments = ppl.param(f"{p}_beta_increments", jnp.ones(K, flat_init.dtype),
                               constraint=constraints.positive)
        betas = jnp.cumsum(increments)
        betas = betas / betas[-1]
        mass = ppl.param(f"{p}_mass_matrix", jnp.ones(d, flat_init.dtype),
                         constraint=constraints.positive)
        loc = ppl.param(f"{p}_z_0_loc", flat_init)
        if self.base_dist == "diagonal":
            scale = ppl.param(f"{p}_z_0_scale", jnp.full_like(flat_init, self.init_scale),
                              constraint=constraints.positive)
            base = dist.Normal(loc, scale).to_event(1)
        else:
            scale_tril = ppl.param(f"{p}_z_0_scale_tril",
                                   jnp.eye(d, dtype=flat_init.dtype) * self.init_scale,
                                   constraint=constraints.scaled_unit_lower_cholesky)
            base = dist.MultivariateNormal(loc, scale_tril=scale_tril)
        z_0 = ppl.sample(f"{p}_z_0", base, infer={"is_auxiliary": True})
        momentum = dist.Normal(0.0, mass).to_event(1)
        eps = ppl.sample(f"{p}_momentum", momentum.expand((K,)).to_event(1).mask(False),
                         infer={"is_auxiliary": True})

        def target(x):
            return handlers.block(lambda: unconstrained_log_density(
                self.model, args, kwargs, self._unpack(x, layout)))()

        z, log_factor = _annealed_hmc(
            z_0, eps, betas, eta0=eta0, eta_coeff=eta_coeff, eta_max=self.eta_max, gamma=gamma,
            inv_mass=0.5 / mass, momentum_log_prob=momentum.log_prob,
            base_log_prob=base.log_prob, target_log_prob=target)
        ppl.factor(f"{p}_factor", log_factor)
        return z

    def _param_shapes(self, size):
        shapes = {"eta0": (), "eta_coeff": (), "gamma": (), "beta_increments": (self.K,),
                  "mass_matrix": (size,), "z_0_loc": (size,)}
        if self.base_dist == "diagonal":
            shapes["z_0_scale"] = (size,)
        else:
            shapes["z_0_scale_tril"] = (size, size)
        return shapes

    def _param_support(self, name):
        p = self.prefix
        return {f"{p}_z_0_scale": constraints.positive,
                f"{p}_mass_matrix": constraints.positive,
                f"{p}_beta_increments": constraints.positive,
                f"{p}_z_0_scale_tril": constraints.lower_cholesky}.get(name)

    def get_base_dist(self):
        """Not defined (`NotImplementedError`, as NumPyro's)."""
        raise self._not_defined("base distribution")

    def get_transform(self, params):
        """Not defined (`NotImplementedError`, as NumPyro's)."""
        raise self._not_defined("transform")

    def get_posterior(self, params):
        """Not defined (`NotImplementedError`, as NumPyro's): use `sample_posterior`."""
        raise self._not_defined("closed-form posterior")
