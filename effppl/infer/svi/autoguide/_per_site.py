"""The automatic guides with one param set per latent site (`AutoNormal`, `AutoDelta`): they only
declare their params and their distribution of the unconstrained latent values. What every guide
shares (reading the model's site analysis, mapping draws to the model's supports) is in
`_base.py`; the guides over one flat latent vector are in `_continuous.py` and `_laplace.py`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from jax.scipy.special import ndtri
from numpyro.distributions import constraints

from ....handlers import internal as ppl
from ..._init import init_to_median, init_to_uniform
from ._base import AutoGuide
from ._errors import AutoGuideError
from ._plates import entered, full_shape, full_size
from ._sites import fixed_supports

__all__ = ["AutoNormal", "AutoDelta"]


class AutoNormal(AutoGuide):
    """A mean-field normal guide in unconstrained space: each latent site `z` (stacked along its
    loops) has params `{z}_auto_loc` and `{z}_auto_scale` (softplus-positive, initially
    `init_scale`) of its unconstrained shape.

    **Arguments:** as `AutoGuide`, and `init_scale` (float > 0).

    **References:** Kucukelbir et al. (2017), "Automatic differentiation variational inference";
    NumPyro's `AutoNormal`.
    """

    scale_constraint = constraints.softplus_positive

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, init_scale=0.1,
                 create_plates=None, forward_mode_differentiation=False):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn,
                         create_plates=create_plates,
                         forward_mode_differentiation=forward_mode_differentiation)
        self.init_scale = self._positive("init_scale", init_scale)

    def _params(self, sites, init, plates):
        locs, scales = {}, {}
        for name, latent in sites.items():
            event_ndim = len(latent.shape) - latent.batch_ndim
            loc = full_size(init[name], latent.frames, event_ndim)
            with entered(plates, latent.frames):  # full-size params, read at the plates' indices
                locs[name] = ppl.param(f"{name}_{self.prefix}_loc", loc,
                                              event_dim=event_ndim)
                scales[name] = ppl.param(f"{name}_{self.prefix}_scale",
                                                jnp.full(loc.shape, self.init_scale, latent.dtype),
                                                constraint=self.scale_constraint,
                                                event_dim=event_ndim)
        return locs, scales

    def __call__(self, *args, **kwargs):
        sites = self._latent_sites(args, kwargs)
        init_key = self._init_key(args, kwargs, sites)
        plates = self._plates(args, kwargs, sites)
        # a key from `seed` per site, in the model's order after the plates' (NumPyro's draws
        # at the same key)
        keys = [ppl.raw_key(f"_{self.prefix}_draw") for _ in sites]
        locs, scales = self._params(sites, self._init_locs(args, kwargs, sites, init_key), plates)
        u, log_q = {}, {}
        for key, (name, latent) in zip(keys, sites.items()):
            u[name] = locs[name] + scales[name] * jax.random.normal(key, latent.shape,
                                                                    latent.dtype)
            log_q[name] = jnp.sum(dist.Normal(locs[name], scales[name]).log_prob(u[name]))
        values, log_dets, _ = self._constrain(args, kwargs, u, sites, plates)
        supports = fixed_supports(sites) or {}
        bases = {n: dist.Normal(locs[n], scales[n]) for n in values
                 if _is_real(supports.get(n))}
        return self._emit(values, sites, {n: log_q[n] - log_dets[n] for n in values}, bases)

    def _param_support(self, name):
        return constraints.positive if name.endswith(f"_{self.prefix}_scale") else None

    def _expected_params(self, sites):
        p = self.prefix
        out = {}
        for name, latent in sites.items():
            shape = full_shape(latent.shape, latent.frames, len(latent.shape) - latent.batch_ndim)
            out.update({f"{name}_{p}_loc": shape, f"{name}_{p}_scale": shape})
        return out

    def _locs_scales(self, api, params, args=(), kwargs=None):
        """The guide's `loc` and `scale` of each latent site of the model (its prototype, as
        NumPyro's), checked (`_checked_sites`)."""
        sites = self._checked_sites(api, params, args, kwargs)
        p = self.prefix
        return ({n: params[f"{n}_{p}_loc"] for n in sites},
                {n: params[f"{n}_{p}_scale"] for n in sites})

    def _locs(self, api, params):
        sites = self._checked_sites(api, params, only=f"_{self.prefix}_loc")
        return {n: params[f"{n}_{self.prefix}_loc"] for n in sites}

    def median(self, params) -> dict:
        """The posterior median of each latent site (the constrained image of `loc`), and the
        model's deterministic sites there (as NumPyro's): dict site -> array (full size along
        subsampled plates; then without deterministic sites).

        **Raises:** `MissingParamError` (a `KeyError`) naming a param missing from `params`
        (e.g. `z_auto_loc`); `ParamTypeError` (a `TypeError`) naming a value that is no array
        of numbers; `AutoGuideError` naming a param of the wrong shape, or when the guide has
        not run yet (`SVI.init`, or `trace(seed(guide, key)).get_trace(*args)`)."""
        return self._postprocess(self._locs("median", params), params)

    def quantiles(self, params, quantiles) -> dict:
        """Marginal quantiles: dict site -> array `(len(quantiles), *site_shape)` (full size
        along subsampled plates), and the model's deterministic sites at them. **Raises:** as
        `median`; `AutoGuideError` naming a `*_auto_scale` that is not positive."""
        locs, scales = self._locs_scales("quantiles", params)
        q = jnp.asarray(quantiles)
        u = {n: locs[n] + scales[n] * ndtri(q).reshape((-1,) + (1,) * jnp.ndim(locs[n]))
             for n in locs}
        return self._postprocess(u, params, batch_ndim=1, api="quantiles")

    def sample_posterior(self, rng_key, params, *args, sample_shape=(), **kwargs) -> dict:
        """Draws of the model's latent sites from the guide at `params`, and the model's
        deterministic sites at them (as NumPyro's): dict name -> array `(*sample_shape,
        *site_shape)` (sites in loops: `(*sample_shape, T, ...)`; full size along subsampled
        plates, as NumPyro's). New `*args, **kwargs` are not used, as NumPyro's: the guide's
        prototype fixes the latent sites and the model's arguments (they set it up when the
        guide has none yet). **Raises:** as `median`."""
        locs, scales = self._locs_scales("sample_posterior", params, args, kwargs)
        sample_shape = tuple(sample_shape)
        n = math.prod(sample_shape)
        keys = jax.random.split(rng_key, len(locs))
        u = {name: locs[name] + scales[name] * jax.random.normal(
                key, (max(n, 1), *jnp.shape(locs[name])), jnp.result_type(locs[name]))
             for key, name in zip(keys, locs)}
        out = self._postprocess(u, params, 1, self._args("sample_posterior", args, kwargs),
                                "sample_posterior")
        return jax.tree.map(lambda x: x[:n].reshape(sample_shape + x.shape[1:]), out)


class AutoDelta(AutoGuide):
    """A point-mass guide (MAP): each latent site `z` has the param `{z}_auto_loc`, constrained
    to the support of `z`'s distribution at the initial point (NumPyro's "prototype" support),
    of the site's stacked shape.

    **References:** NumPyro's `AutoDelta`.
    """

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_median, create_plates=None,
                 forward_mode_differentiation=False):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn,
                         create_plates=create_plates,
                         forward_mode_differentiation=forward_mode_differentiation)

    def __call__(self, *args, **kwargs):
        sites = self._latent_sites(args, kwargs)
        init_key = self._init_key(args, kwargs, sites)
        plates = self._plates(args, kwargs, sites)
        values, _, fns = self._constrain(args, kwargs,
                                         self._init_locs(args, kwargs, sites, init_key),
                                         plates=plates)
        assert fns is not None  # `_constrain` without `sites` runs the model: its distributions
        locs = {}
        for name, value in values.items():
            fn = fns[name]
            if fn is None:
                raise AutoGuideError(f"effppl.infer.autoguide.AutoDelta: site `{name}` has "
                                     f"different distributions in different `cond` branches, "
                                     f"so it has no one support for its param; use AutoNormal.")
            latent = sites[name]
            event_ndim = jnp.ndim(value) - latent.batch_ndim
            with entered(plates, latent.frames):  # a full-size param, read at the indices
                locs[name] = ppl.param(
                    f"{name}_{self.prefix}_loc", full_size(value, latent.frames, event_ndim),
                    constraint=fn.support, event_dim=event_ndim)
        return self._emit(locs, sites)

    def _expected_params(self, sites):
        out = {}
        for name, latent in sites.items():
            shape = tuple(latent.site.loops) + tuple(latent.site.aval.shape)  # constrained
            out[f"{name}_{self.prefix}_loc"] = full_shape(shape, latent.frames,
                                                          len(shape) - latent.batch_ndim)
        return out

    def _locs(self, api, params, args=(), kwargs=None):
        sites = self._checked_sites(api, params, args, kwargs)
        return {n: params[f"{n}_{self.prefix}_loc"] for n in sites}

    def median(self, params) -> dict:
        """The point estimates: dict site -> constrained value (full size along subsampled
        plates), the model's latent sites only (as NumPyro's).

        **Raises:** `MissingParamError` (a `KeyError`) naming a param missing from `params`;
        `ParamTypeError` (a `TypeError`) naming a value that is no array of numbers;
        `AutoGuideError` naming a param of the wrong shape, or when the guide has not run yet
        (`SVI.init`, or `trace(seed(guide, key)).get_trace(*args)`)."""
        return self._locs("median", params)

    def sample_posterior(self, rng_key, params, *args, sample_shape=(), **kwargs) -> dict:
        """The point estimates (`median`) repeated `sample_shape` times, and the model's
        deterministic sites at them (as NumPyro's): dict name -> array `(*sample_shape,
        *site_shape)`. The deterministic sites are computed at new `*args, **kwargs` when given
        (as NumPyro's AutoDelta; the latent sites stay the prototype's). **Raises:** as
        `median`."""
        sample_shape = tuple(sample_shape)
        locs = self._locs("sample_posterior", params, args, kwargs)
        model_args = (tuple(args), dict(kwargs)) if args or kwargs else \
            self._args("sample_posterior")  # the deterministic sites at new ones, as NumPyro's
        out = self._postprocess(locs, params, 0, model_args, "sample_posterior",
                                constrained=True)
        return {k: jnp.broadcast_to(v, sample_shape + jnp.shape(v)) for k, v in out.items()}


def _is_real(support) -> bool:
    """Whether `support` is `real`, or `real` with event dims (the map to it is the identity)."""
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support is constraints.real
