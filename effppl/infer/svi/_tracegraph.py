"""`TraceGraph_ELBO`: the ELBO whose gradient for guide sites without a reparametrized sampler
(discrete sites, `has_rsample=False`) is the score-function estimator Rao-Blackwellized over the
model's dependency graph, as NumPyro's: each such site's score is weighted by the costs that
depend on it only (found by NumPyro's provenance tracking of the traced program,
`numpyro.ops.provenance`), summed over the plates it does not share with them.
"""

from __future__ import annotations

from collections import defaultdict

import jax
import jax.numpy as jnp
from numpyro.ops.provenance import eval_provenance

from ... import handlers
from ._elbo import (
    _ELBO,
    _latent,
    _model_values,
    check_model_guide_match,
    run_guide,
)

__all__ = ["TraceGraph_ELBO"]


def _scaled(site):
    """A sample site's elementwise log density, scaled (`handlers.scale`, subsampling)."""
    lp = site["log_prob"]
    return lp if site.get("scale") is None else lp * site["scale"]


class _FrameSums:
    """Sums of cost terms by the plates they sit in (NumPyro's `MultiFrameTensor`): `sum_to`
    sums each term over the plates a target site does not sit in."""

    def __init__(self):
        self.terms: dict = {}

    def add(self, frames, value):
        key = frozenset(frames)
        self.terms[key] = self.terms[key] + value if key in self.terms else value

    def sum_to(self, target_frames):
        total = None
        for frames, value in self.terms.items():
            for f in frames:
                if f not in target_frames and jnp.shape(value)[f.dim] != 1:
                    value = value.sum(f.dim, keepdims=True)
            while jnp.shape(value) and jnp.shape(value)[0] == 1:
                value = value.squeeze(0)
            total = value if total is None else total + value
        return jnp.zeros(()) if total is None else total


def _traces(rng_key, param_map, model, guide, args, kwargs, given, provenance=False):
    """`(model trace, guide trace)` of one particle, the guide's sites in `given` taking those
    values (the rest drawn with `rng_key`, as `run_guide` draws them), the model run on the
    guide's values. With `provenance`, a given value also depends (by `0 *`) on its site's
    distribution's parameters, as NumPyro's: a cost downstream of a site's value is then
    downstream of whatever that site's distribution depends on (the stochastic graph)."""
    k_model, k_guide = jax.random.split(rng_key)

    def give(msg):
        if msg["type"] != "sample" or msg["name"] not in given:
            return None
        value = jnp.asarray(given[msg["name"]])
        if not provenance:
            return value
        params = [x for x in jax.tree.leaves(msg["fn"])
                  if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
        depends = sum((jnp.sum(x) for x in params), start=jnp.zeros(()))
        return value + (0 * depends).astype(value.dtype)

    seeded = handlers.seed(handlers.substitute(handlers.substitute(guide, data=param_map),
                                               substitute_fn=give), k_guide)
    _, guide_tr = handlers.log_density(seeded, args, kwargs, {})
    _, model_tr = handlers.log_density(handlers.seed(model, k_model), args, kwargs,
                                       _model_values(param_map, guide_tr))
    return model_tr, guide_tr


def _log_probs(model_tr, guide_tr):
    return ({n: _scaled(s) for n, s in model_tr.items() if _scored(s)},
            {n: _scaled(s) for n, s in guide_tr.items() if _scored(s)})


def _scored(site):
    return site["type"] == "sample" and site.get("log_prob") is not None


class TraceGraph_ELBO(_ELBO):
    """The ELBO `E_q[log p(x, z) - log q(z)]` (the same loss as `Trace_ELBO`), whose gradient
    for guide sites without a reparametrized sampler weights each site's score `grad log q(z_i)`
    by the downstream cost of `z_i` only: the model's and guide's log densities that depend on
    it, summed over the plates `z_i` does not sit in (NumPyro's `TraceGraph_ELBO`). Lower
    variance than `Trace_ELBO`'s score surrogate, which weights every score by the whole ELBO.

    **Arguments:** `num_particles` (int), `vectorize_particles` (bool).

    **References:** Schulman et al. (2015), "Gradient Estimation Using Stochastic Computation
    Graphs"; Wingate et al. (2011) (provenance tracking); NumPyro's `TraceGraph_ELBO`.
    """

    can_infer_discrete = True

    def particle(self, rng_key, param_map, model, guide, args, kwargs):
        _, guide_tr, _, _ = run_guide(rng_key, param_map, guide, args, kwargs)
        check_model_guide_match(model, guide_tr, args, kwargs)
        nonreparam = {n: s["value"] for n, s in _latent(guide_tr).items()
                      if s["fn"] is not None and not s["fn"].has_rsample}
        # no gradient through a value drawn without a reparametrized sampler (NumPyro's): the
        # guide runs again with those values given (the same key draws the others as before);
        # their parameters' gradient is the score term below
        given = {n: jax.lax.stop_gradient(v) for n, v in nonreparam.items()}
        model_tr, guide_tr = _traces(rng_key, param_map, model, guide, args, kwargs, given)
        elbo = jnp.zeros(())
        for site in model_tr.values():
            if _scored(site):
                elbo = elbo + jnp.sum(_scaled(site))
        for name, site in guide_tr.items():
            if _scored(site):
                lq = jnp.sum(_scaled(site))
                elbo = elbo - (jax.lax.stop_gradient(lq) if name in nonreparam else lq)
        if not nonreparam:
            return elbo
        # which non-reparametrizable guide sites each log density depends on
        model_deps, guide_deps = eval_provenance(
            lambda **given: _log_probs(*_traces(rng_key, param_map, model, guide, args, kwargs,
                                                given, provenance=True)), **nonreparam)
        downstream = defaultdict(_FrameSums)
        for tr, deps, sign in ((model_tr, model_deps, 1.0), (guide_tr, guide_deps, -1.0)):
            for name, site in tr.items():
                if not _scored(site):
                    continue
                for key in deps.get(name, ()):
                    downstream[key].add(site["cond_indep_stack"], sign * _scaled(site))
        for name, cost in downstream.items():
            site = guide_tr[name]
            surrogate = jnp.sum(_scaled(site) * jax.lax.stop_gradient(
                cost.sum_to(site["cond_indep_stack"])))
            elbo = elbo + surrogate - jax.lax.stop_gradient(surrogate)
        return elbo
