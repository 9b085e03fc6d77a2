"""Log densities: `log_density` (constrained), and the unconstrained-space `potential_energy`,
`constrain_fn`, `unconstrain_fn` used by HMC (NumPyro's `numpyro.infer.util` signatures)."""

from __future__ import annotations

import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions.transforms import biject_to

from ..primitives import sample_op
from ._basic import _analyzed, site_row, substitute
from ._handler import Handler, forward, run_outermost
from ._trace import trace


class _LogJoint(Handler):
    """Accumulates `sum(log_prob(value))` over sample sites, with mask and scale applied."""

    def params(self, *args, **kwargs):
        return jnp.zeros((), jnp.result_type(float))

    def clauses(self):
        def sample(total, msg, *, resume, name, **static):
            value = forward(msg, name=name, **static)
            if static["intervened"]:
                return resume(total, value)
            lp = msg["fn"].log_prob(value)
            if msg["mask"] is not None:
                lp = jnp.where(msg["mask"], lp, 0.0)
            if msg["scale"] is not None:
                lp = lp * msg["scale"]
            return resume(total + jnp.sum(lp).astype(total.dtype), value)
        return {sample_op: sample}

    def ret(self, total, result):
        return result, total


class _Unconstrain(Handler):
    """Gives latent sites `params` in unconstrained space: value `t(u)` with `t =
    biject_to(fn.support)` built from the site's *current* distribution (so a support depending on
    other latents uses their current values), and adds `log|det J_t(u)|` as the factor site
    `_{name}_log_det` (as NumPyro does)."""

    def __init__(self, fn, params):
        super().__init__(fn)
        self.values = dict(params)

    def params(self, *args, **kwargs):
        self._sites = _analyzed(self.fn, args, kwargs)
        return {name: jnp.int32(0) for name in self.values}

    def clauses(self):
        def sample(counts, msg, *, resume, name, **static):
            if name not in self.values or msg["value"] is not None:
                return resume(counts, forward(msg, name=name, **static))
            fn = msg["fn"]
            t = biject_to(fn.support)
            u_shape = t.inverse_shape(fn.shape())
            u, advance = site_row("potential_energy (unconstrained values)", name,
                                  self.values[name], u_shape, counts[name], self._sites.get(name))
            if advance:
                counts = dict(counts, **{name: counts[name] + 1})
            value = t(u)
            log_det = jnp.sum(t.log_abs_det_jacobian(u, value))
            sample_op({"fn": dist.Unit(log_det), "value": jnp.zeros((0,)), "scale": msg["scale"],
                       "mask": None, "rng_key": None},
                      name=f"_{name}_log_det", is_observed=True, intervened=False,
                      infer=(("is_auxiliary", True),))
            return resume(counts, forward(dict(msg, value=value), name=name, **static))
        return {sample_op: sample}


def log_density(model, model_args=(), model_kwargs=None, params=None):
    """The log joint density of `model` at constrained values `params`, and its trace.

    **Arguments:** `model`; `model_args` (tuple), `model_kwargs` (dict): its arguments;
    `params`: dict site name -> constrained value (stacked rows for sites inside loops).

    **Returns:** `(log_joint, trace)`: a scalar (float of JAX's default float dtype), and the trace
    (`effppl.handlers.trace`'s dict).

    **Raises:** `SiteError` naming a latent site with no value, or a shape mismatch.

    **References:** NumPyro's `numpyro.infer.util.log_density`.
    """
    given = substitute(model, data=params or {})
    given.entry_point = "log_density"
    joint = _LogJoint(given)
    (_, log_joint), tr = trace(joint)._run(*model_args, **(model_kwargs or {}))
    return log_joint, tr


def unconstrained_log_density(model, model_args, model_kwargs, params):
    """The log density in unconstrained space, `log p(t(u)) + log|det J_t(u)|` (a scalar)."""
    joint = _LogJoint(_Unconstrain(model, params))
    return run_outermost(joint.handled, *model_args, **(model_kwargs or {}))[1]


def potential_energy(model, model_args, model_kwargs, params):
    """HMC's potential: minus the log density in unconstrained space.

    **Arguments:** `params`: dict latent site name -> unconstrained array (stacked along loop
    axes for sites inside loops).

    **Returns:** a scalar. **References:** Stan Reference Manual, "Variable transforms";
    NumPyro's `numpyro.infer.util.potential_energy`.
    """
    return -unconstrained_log_density(model, model_args, model_kwargs, params)


def constrain_fn(model, model_args, model_kwargs, params, return_deterministic=False):
    """Map unconstrained `params` to constrained values, transforming each site with the support
    given by the current values of the others. Returns a dict (plus deterministic sites when
    `return_deterministic`)."""
    tr = trace(_Unconstrain(model, params)).get_trace(*model_args, **(model_kwargs or {}))
    return {name: site["value"] for name, site in tr.items()
            if name in params or (return_deterministic and site["type"] == "deterministic")}


def unconstrain_fn(model, model_args, model_kwargs, params):
    """Map constrained `params` to unconstrained space (inverse of `constrain_fn`)."""
    given = substitute(model, data=params)
    given.entry_point = "unconstrain_fn"
    tracer = trace(given)
    tracer.record_unconstrained = True
    tr = tracer.get_trace(*model_args, **(model_kwargs or {}))
    return {name: tr[name]["unconstrained"] for name in params}
