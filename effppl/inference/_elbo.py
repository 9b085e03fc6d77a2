"""Evidence lower bounds, built from effppl's handlers: `seed` + `substitute` run the
guide, `log_density` scores it, its latent values are substituted into the model, `log_density`
scores the model. Gradients come from `jax.grad` of the eliminated program.

NumPyro's names and semantics: `loss(rng_key, param_map, model, guide, *args, **kwargs)` is the
negative ELBO at the constrained parameter values `param_map`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from numpyro.distributions.kl import kl_divergence

from .._errors import EffpplError

__all__ = ["Trace_ELBO", "TraceMeanField_ELBO", "RenyiELBO", "ELBOError"]


class ELBOError(EffpplError, ValueError):
    """Invalid ELBO settings."""


def _raw_key(rng_key):
    if jax.dtypes.issubdtype(getattr(rng_key, "dtype", None), jax.dtypes.prng_key):
        return jax.random.key_data(rng_key)
    return rng_key


def _scaled_sum(site):
    lp = site["log_prob"]
    return jnp.sum(lp if site.get("scale") is None else lp * site["scale"])


def _latent(tr):
    return {n: s for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}


def run_guide_and_model(rng_key, param_map, model, guide, args, kwargs, model_trace=True):
    """One particle: `(log p(x, z), log q(z), model trace, guide trace)` with `z ~ q`, both
    log densities at the constrained params `param_map` (masks and scales applied). Without
    `model_trace` the model's sites are not recorded (its trace is None): a model whose sites sit
    in loops then carries no buffers of their values through them."""
    from effppl import handlers
    from effppl.handlers._density import _LogJoint
    from effppl.handlers._handler import run_outermost

    k_guide, k_model = jax.random.split(rng_key)
    guide = handlers.seed(handlers.substitute(guide, data=param_map), k_guide)
    log_q, guide_tr = handlers.log_density(guide, args, kwargs, {})
    values = {**param_map, **{n: s["value"] for n, s in _latent(guide_tr).items()}}
    model = handlers.seed(model, k_model)
    if model_trace:
        log_p, model_tr = handlers.log_density(model, args, kwargs, values)
        return log_p, log_q, model_tr, guide_tr
    given = handlers.substitute(model, data=values)
    given.entry_point = "log_density"
    _, log_p = run_outermost(_LogJoint(given).handled, *args, **kwargs)
    return log_p, log_q, None, guide_tr


def _score_surrogate(elbo, guide_tr):
    """`elbo` plus a zero-valued term whose gradient is the score-function estimator of the guide
    sites that cannot be reparameterised (discrete ones), as in NumPyro's `Trace_ELBO`."""
    score = sum((_scaled_sum(s) for s in _latent(guide_tr).values()
                 if s["fn"] is not None and not s["fn"].has_rsample), start=0.0)
    if isinstance(score, float):
        return elbo
    return elbo + jax.lax.stop_gradient(elbo) * (score - jax.lax.stop_gradient(score))


class _ELBO:
    """Shared by the ELBOs: `num_particles` draws of `z ~ q`, vectorised (`jax.vmap`) or in a
    sequential `lax.map`; subclasses give one particle's ELBO and how particles combine."""

    def __init__(self, num_particles: int = 1, vectorize_particles: bool = True):
        if not isinstance(num_particles, int) or num_particles < 1:
            raise ELBOError(f"effppl.infer.{type(self).__name__}(num_particles={num_particles!r}) "
                            f"expected a positive int.")
        self.num_particles = num_particles
        self.vectorize_particles = bool(vectorize_particles)

    def _key(self):
        return type(self), tuple(sorted(vars(self).items()))

    def __eq__(self, other):  # equal settings share SVI's compiled update (a structural key)
        return isinstance(other, _ELBO) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def particles(self, rng_key, param_map, model, guide, args, kwargs):
        def one(key):
            return self.particle(key, param_map, model, guide, args, kwargs)

        if self.num_particles == 1:  # the key itself, as NumPyro: no split, no batch axis
            return one(_raw_key(rng_key))[None]
        keys = jax.random.split(_raw_key(rng_key), self.num_particles)
        return jax.vmap(one)(keys) if self.vectorize_particles else jax.lax.map(one, keys)

    def loss(self, rng_key, param_map, model, guide, *args, **kwargs):
        """The loss (a scalar, to minimise) at the constrained params `param_map`."""
        return self.combine(self.particles(rng_key, param_map, model, guide, args, kwargs))

    def combine(self, elbos):
        return -jnp.mean(elbos)


class Trace_ELBO(_ELBO):
    """The ELBO `E_q[log p(x, z) - log q(z)]`, averaged over `num_particles` draws of the guide.

    Guide sites that cannot be reparameterised get NumPyro's score-function surrogate.

    **Arguments:** `num_particles` (int), `vectorize_particles` (bool: `jax.vmap` over particles,
    else a sequential `lax.map`).

    **References:** Ranganath et al. (2014), "Black box variational inference"; Kingma & Welling
    (2014); NumPyro's `Trace_ELBO`.
    """

    def particle(self, rng_key, param_map, model, guide, args, kwargs):
        log_p, log_q, _, guide_tr = run_guide_and_model(rng_key, param_map, model, guide, args,
                                                        kwargs, model_trace=False)
        return _score_surrogate(log_p - log_q, guide_tr)


class TraceMeanField_ELBO(Trace_ELBO):
    """The ELBO with the analytic KL divergence `KL(q(z_i) || p(z_i | ...))` in place of the Monte
    Carlo term `log p(z_i) - log q(z_i)` for each latent site whose guide and model distributions
    have one in `numpyro.distributions.kl` (Monte Carlo elsewhere), as NumPyro's
    `TraceMeanField_ELBO`. Valid when the guide is mean-field over those sites (their model
    distributions do not depend on other latents through the guide's dependencies). Sites under a
    `mask` should not use it (the KL term is not masked).
    """

    def particle(self, rng_key, param_map, model, guide, args, kwargs):
        log_p, log_q, model_tr, guide_tr = run_guide_and_model(rng_key, param_map, model, guide,
                                                               args, kwargs)
        elbo = log_p - log_q
        for name, g in _latent(guide_tr).items():
            m = model_tr.get(name)
            if m is None or m["type"] != "sample" or g["fn"] is None or m["fn"] is None:
                continue
            try:
                kl = kl_divergence(g["fn"], m["fn"])
            except NotImplementedError:
                continue
            if m.get("scale") is not None:
                kl = kl * m["scale"]
            elbo = elbo - (_scaled_sum(m) - _scaled_sum(g)) - jnp.sum(kl)
        return _score_surrogate(elbo, guide_tr)


class RenyiELBO(_ELBO):
    """Rényi's alpha-divergence bound `1/(1-alpha) log mean_k exp((1-alpha) w_k)`, `w_k` the
    particles' `log p - log q` (alpha = 0: the importance-weighted bound of Burda et al.).

    **Arguments:** `alpha` (float, not 1: alpha -> 1 is `Trace_ELBO`), `num_particles` (int, at
    least 2 for the bound to differ from `Trace_ELBO`), `vectorize_particles`.

    **Raises:** `ELBOError` for alpha = 1.

    **References:** Li & Turner (2016), "Rényi divergence variational inference"; NumPyro's
    `RenyiELBO`.
    """

    def __init__(self, alpha: float = 0.0, num_particles: int = 2, vectorize_particles=True):
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise ELBOError(f"effppl.infer.RenyiELBO(alpha={alpha!r}) expected a number (not 1).")
        if alpha == 1:
            raise ELBOError("effppl.infer.RenyiELBO(alpha=1) is the usual ELBO: use "
                            "effppl.infer.Trace_ELBO instead.")
        super().__init__(num_particles, vectorize_particles)
        self.alpha = float(alpha)

    def particle(self, rng_key, param_map, model, guide, args, kwargs):
        log_p, log_q, _, _ = run_guide_and_model(rng_key, param_map, model, guide, args, kwargs,
                                                 model_trace=False)
        return log_p - log_q

    def combine(self, elbos):
        scaled = (1.0 - self.alpha) * elbos
        bound = jax.nn.logsumexp(scaled) - jnp.log(self.num_particles)
        return -bound / (1.0 - self.alpha)
