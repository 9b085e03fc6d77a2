"""Which guide sites drawn without a reparameterised sampler each log density depends on: the
model and guide run with those sites given their values, tracked by NumPyro's provenance
(`numpyro.ops.provenance`, Wingate et al. 2011). Shared by `TraceGraph_ELBO` and
`TraceEnum_ELBO` (`_enum_guide`; NumPyro's Rao-Blackwellised score surrogates)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from numpyro.ops.provenance import eval_provenance

from ... import handlers
from ...handlers.internal import substitute_exactly

__all__ = ["given_traces", "dependencies"]


def given_traces(rng_key, param_map, model, guide, args, kwargs, given, model_values,
                 provenance=False):
    """`(model trace, guide trace)` of one particle, the guide's sites in `given` taking those
    values (the rest drawn with `rng_key`, as `run_guide` draws them), the model run on
    `model_values(param_map, guide trace)`. With `provenance`, a given value also depends (by
    `0 *`) on its site's distribution's parameters, as NumPyro's: a cost downstream of a site's
    value is then downstream of whatever that site's distribution depends on."""
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

    # `seed` inside the substitution of `given`: every latent site takes its key as in the
    # first run (`run_guide`), so the reparametrized sites after a given one draw the same
    # values; outside it, a given site would take no key and the later sites would be drawn
    # anew, inconsistent with the given values (a biased gradient)
    seeded = substitute_exactly(handlers.seed(substitute_exactly(guide, data=param_map),
                                              k_guide), substitute_fn=give)
    _, guide_tr = handlers.log_density(seeded, args, kwargs, {})
    _, model_tr = handlers.log_density(handlers.seed(model, k_model), args, kwargs,
                                       model_values(param_map, guide_tr))
    return model_tr, guide_tr


def dependencies(rng_key, param_map, model, guide, args, kwargs, drawn, model_values):
    """`(model's, guide's)`: `{site: names of the sites in drawn its log density depends on}`;
    `drawn`: `{name: value}` of guide sites drawn without a reparameterised sampler."""
    def log_probs(**given):
        traces = given_traces(rng_key, param_map, model, guide, args, kwargs, given,
                              model_values, provenance=True)
        return tuple({n: s["log_prob"] for n, s in tr.items()
                      if s["type"] == "sample" and s.get("log_prob") is not None}
                     for tr in traces)

    return eval_provenance(log_probs, **drawn)
