"""The autoguides over one flat vector of all latent sites' unconstrained values (NumPyro's
`AutoContinuous` family): the base `AutoContinuous` and its normal guides with diagonal, full
and low-rank-plus-diagonal covariance."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpyro.distributions as dist
from jax.scipy.special import ndtri
from numpyro.distributions import constraints

from ....handlers import internal as ppl
from ..._init import init_to_uniform
from ._base import AutoGuide
from ._errors import AutoGuideError

__all__ = ["AutoContinuous", "AutoDiagonalNormal", "AutoMultivariateNormal",
           "AutoLowRankMultivariateNormal"]


class AutoContinuous(AutoGuide):
    """Guides over the flat vector of all latent sites' unconstrained values (site by site, in
    the model's order, each stacked along its loops and raveled): `_auto_latent` is drawn from
    `get_base_dist`-like distribution built by `_base`, then each site is mapped to its support.
    """

    def _layout(self, sites):
        local = [name for name, latent in sites.items() if latent.subsampled]
        if local:  # NumPyro's AutoContinuous raises too
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__} does not support "
                                 f"local latent variables: site `{local[0]}` sits in a "
                                 f"subsampled plate. Use AutoNormal or AutoDelta.")
        return [(name, latent.shape, math.prod(latent.shape)) for name, latent in sites.items()]

    def _unpack(self, flat, layout):
        out, start = {}, 0
        for name, shape, size in layout:
            out[name] = flat[..., start:start + size].reshape(flat.shape[:-1] + shape)
            start += size
        return out

    def _base(self, flat_init):
        """The distribution of the flat unconstrained latent vector (its guide's own)."""
        raise NotImplementedError

    def _latent_dist(self, flat_init, layout):
        """The distribution of `_{prefix}_latent` for the latent `layout` (`_layout`): `_base`,
        unless a guide's params are shaped by the layout (the batched guides)."""
        return self._base(flat_init)

    def get_posterior(self, params):
        """The guide's distribution of the flat unconstrained latent vector at `params`."""
        raise NotImplementedError

    def __call__(self, *args, **kwargs):
        sites = self._latent_sites(args, kwargs)
        layout = self._layout(sites)
        init = self._init_locs(args, kwargs, sites, self._init_key(args, kwargs, sites))
        flat_init = jnp.concatenate([jnp.ravel(init[n]) for n, _, _ in layout])
        latent = ppl.sample(f"_{self.prefix}_latent", self._latent_dist(flat_init, layout))
        values, log_dets, _ = self._constrain(args, kwargs, self._unpack(latent, layout), sites)
        return self._emit(values, sites, {n: -log_dets[n] for n in values})

    def _loc(self, params):
        return params[f"{self.prefix}_loc"]

    def _marginals(self, params):
        """`(mean, sd)` of the marginals of `get_posterior(params)` (flat, unconstrained)."""
        posterior = self.get_posterior(params)
        return posterior.mean, jnp.sqrt(jnp.diagonal(posterior.covariance_matrix, axis1=-2,
                                                      axis2=-1))

    def _param_shapes(self, size) -> dict:
        """`{param suffix: shape}` of the guide's params for a flat latent of `size` (None: any
        length on that axis)."""
        return {"loc": (size,)}

    def _layout_now(self):
        args, kwargs = self._args("median")
        return self._layout(self._latent_sites(args, kwargs))

    def _expected_params(self, sites):
        size = sum(n for _, _, n in self._layout(sites))
        return {f"{self.prefix}_{k}": shape for k, shape in self._param_shapes(size).items()}

    def _checked_layout(self, api, params, only=None):
        """The latent layout of the guide's prototype, once `params` hold its params (`only`:
        as `_checked_sites`)."""
        return self._layout(self._checked_sites(api, params, only=only))

    def median(self, params) -> dict:
        """The posterior median of each latent site (the constrained image of `loc`), and the
        model's deterministic sites there (as NumPyro's).

        **Raises:** `MissingParamError` (a `KeyError`) naming a param missing from `params`;
        `ParamTypeError` (a `TypeError`) naming a value that is no array of numbers;
        `AutoGuideError` naming a param of the wrong shape, or when the guide has not run yet
        (`SVI.init`, or `trace(seed(guide, key)).get_trace(*args)`)."""
        layout = self._checked_layout("median", params, only=f"{self.prefix}_loc")
        return self._postprocess(self._unpack(self._loc(params), layout), params)

    def quantiles(self, params, quantiles) -> dict:
        """Marginal quantiles (normal marginals of `get_posterior`): dict site -> array
        `(len(quantiles), *site_shape)` (a scalar `quantiles`: `site_shape`, as NumPyro's), and
        the model's deterministic sites at them. **Raises:** as `median`; `AutoGuideError`
        naming a scale param outside its support."""
        layout = self._checked_layout("quantiles", params)
        mean, sd = self._marginals(params)
        q = ndtri(jnp.asarray(quantiles))[..., None]  # a scalar: one value per site, as NumPyro's
        flat = mean + sd * q
        return self._postprocess(self._unpack(flat, layout), params, batch_ndim=jnp.ndim(q) - 1,
                                 api="quantiles")


class AutoDiagonalNormal(AutoContinuous):
    """A normal guide with diagonal covariance over the flat unconstrained latent vector: params
    `auto_loc`, `auto_scale` (softplus-positive). **References:** NumPyro's
    `AutoDiagonalNormal`."""

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, init_scale=0.1):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn)
        self.init_scale = self._positive("init_scale", init_scale)

    def _marginals(self, params):
        posterior = self.get_posterior(params)
        return posterior.loc, posterior.scale

    def _base(self, flat_init):
        loc = ppl.param(f"{self.prefix}_loc", flat_init)
        scale = ppl.param(f"{self.prefix}_scale", jnp.full_like(flat_init, self.init_scale),
                                 constraint=constraints.softplus_positive)
        return dist.Normal(loc, scale).to_event(1)

    def _param_support(self, name):
        return constraints.positive if name == f"{self.prefix}_scale" else None

    def _param_shapes(self, size):
        return {"loc": (size,), "scale": (size,)}

    def get_posterior(self, params):
        """The guide's distribution of the flat unconstrained latent vector: `Normal(loc,
        scale)`."""
        return dist.Normal(params[f"{self.prefix}_loc"], params[f"{self.prefix}_scale"])


class AutoMultivariateNormal(AutoContinuous):
    """A full-covariance normal guide over the flat unconstrained latent vector: params
    `auto_loc`, `auto_scale_tril` (`scaled_unit_lower_cholesky`). **References:** NumPyro's
    `AutoMultivariateNormal`."""

    scale_tril_constraint = constraints.scaled_unit_lower_cholesky

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, init_scale=0.1):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn)
        self.init_scale = self._positive("init_scale", init_scale)

    def _base(self, flat_init):
        loc = ppl.param(f"{self.prefix}_loc", flat_init)
        scale_tril = ppl.param(f"{self.prefix}_scale_tril",
                                      jnp.eye(flat_init.shape[0], dtype=flat_init.dtype)
                                      * self.init_scale, constraint=self.scale_tril_constraint)
        return dist.MultivariateNormal(loc, scale_tril=scale_tril)

    def _param_support(self, name):
        return constraints.lower_cholesky if name == f"{self.prefix}_scale_tril" else None

    def _param_shapes(self, size):
        return {"loc": (size,), "scale_tril": (size, size)}

    def get_posterior(self, params):
        """`MultivariateNormal(loc, scale_tril=scale_tril)` of the flat unconstrained latent."""
        return dist.MultivariateNormal(params[f"{self.prefix}_loc"],
                                       scale_tril=params[f"{self.prefix}_scale_tril"])


class AutoLowRankMultivariateNormal(AutoContinuous):
    """A normal guide with low-rank-plus-diagonal covariance `S (W W^T + I) S`, `S =
    diag(scale)`, over the flat unconstrained latent vector (NumPyro's parametrization): params
    `auto_loc`, `auto_cov_factor` (`W`, `(D, rank)`, rank `round(sqrt(D))` by default),
    `auto_scale`. **References:** NumPyro's `AutoLowRankMultivariateNormal`."""

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, init_scale=0.1,
                 rank=None):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn)
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
            raise AutoGuideError(f"effppl.infer.autoguide.AutoLowRankMultivariateNormal(rank="
                                 f"{rank!r}) expected an int >= 1, or None for about sqrt(D).")
        self.init_scale, self.rank = self._positive("init_scale", init_scale), rank

    def _base(self, flat_init):
        d = flat_init.shape[0]
        rank = int(round(d ** 0.5)) if self.rank is None else int(self.rank)
        loc = ppl.param(f"{self.prefix}_loc", flat_init)
        factor = ppl.param(f"{self.prefix}_cov_factor", jnp.zeros((d, rank),
                                                                          flat_init.dtype))
        scale = ppl.param(f"{self.prefix}_scale", jnp.full_like(flat_init, self.init_scale),
                                 constraint=constraints.softplus_positive)
        return self._posterior(loc, factor, scale)

    @staticmethod
    def _posterior(loc, cov_factor, scale):
        return dist.LowRankMultivariateNormal(loc, cov_factor * scale[..., None], scale ** 2)

    def _param_shapes(self, size):
        return {"loc": (size,), "cov_factor": (size, None), "scale": (size,)}

    def get_posterior(self, params):
        """`LowRankMultivariateNormal(loc, cov_factor * scale[:, None], scale**2)` of the flat
        latent (covariance `S (W W^T + I) S`)."""
        p = self.prefix
        return self._posterior(params[f"{p}_loc"], params[f"{p}_cov_factor"],
                               params[f"{p}_scale"])
