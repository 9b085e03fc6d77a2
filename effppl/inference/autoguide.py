"""Automatic guides (NumPyro's `numpyro.infer.autoguide` names, params and semantics), exported
as `effppl.infer.autoguide`. What they share (reading the model's site analysis, mapping draws to
the model's supports) is in `_autoguide.py`; each class here only declares its params and its
distribution of the unconstrained latent values.
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from jax.scipy.special import ndtri
from numpyro.distributions import constraints
from numpyro.distributions.util import cholesky_of_inverse

from .. import primitives
from ..primitives import prng_key_op
from ._autoguide import AutoGuide, AutoGuideError, MissingParamError, ParamTypeError
from ._guide_plates import entered, full_shape, full_size
from ._init import init_to_median, init_to_uniform

__all__ = ["AutoGuide", "AutoNormal", "AutoDelta", "AutoContinuous", "AutoDiagonalNormal",
           "AutoMultivariateNormal", "AutoLowRankMultivariateNormal",
           "AutoLaplaceApproximation", "AutoGuideError", "MissingParamError",
           "ParamTypeError"]


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
                 create_plates=None):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn,
                         create_plates=create_plates)
        self.init_scale = self._positive("init_scale", init_scale)

    def _params(self, sites, init, plates):
        locs, scales = {}, {}
        for name, latent in sites.items():
            event_ndim = len(latent.shape) - latent.batch_ndim
            loc = full_size(init[name], latent.frames, event_ndim)
            with entered(plates, latent.frames):  # full-size params, read at the plates' indices
                locs[name] = primitives.param(f"{name}_{self.prefix}_loc", loc,
                                              event_dim=event_ndim)
                scales[name] = primitives.param(f"{name}_{self.prefix}_scale",
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
        keys = [prng_key_op(name=f"_{self.prefix}_draw") for _ in sites]
        locs, scales = self._params(sites, self._init_locs(args, kwargs, sites, init_key), plates)
        u, log_q = {}, {}
        for key, (name, latent) in zip(keys, sites.items()):
            u[name] = locs[name] + scales[name] * jax.random.normal(key, latent.shape,
                                                                    latent.dtype)
            log_q[name] = jnp.sum(dist.Normal(locs[name], scales[name]).log_prob(u[name]))
        values, log_dets, _ = self._constrain(args, kwargs, u, sites, plates)
        return self._emit(values, sites, {n: log_q[n] - log_dets[n] for n in values})

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

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_median, create_plates=None):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn,
                         create_plates=create_plates)

    def __call__(self, *args, **kwargs):
        sites = self._latent_sites(args, kwargs)
        init_key = self._init_key(args, kwargs, sites)
        plates = self._plates(args, kwargs, sites)
        values, _, fns = self._constrain(args, kwargs,
                                         self._init_locs(args, kwargs, sites, init_key),
                                         plates=plates)
        locs = {}
        for name, value in values.items():
            if fns[name] is None:
                raise AutoGuideError(f"effppl.infer.autoguide.AutoDelta: site `{name}` has "
                                     f"different distributions in different `cond` branches, "
                                     f"so it has no one support for its param; use AutoNormal.")
            latent = sites[name]
            event_ndim = jnp.ndim(value) - latent.batch_ndim
            with entered(plates, latent.frames):  # a full-size param, read at the indices
                locs[name] = primitives.param(
                    f"{name}_{self.prefix}_loc", full_size(value, latent.frames, event_ndim),
                    constraint=fns[name].support, event_dim=event_ndim)
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

    def __call__(self, *args, **kwargs):
        sites = self._latent_sites(args, kwargs)
        layout = self._layout(sites)
        init = self._init_locs(args, kwargs, sites, self._init_key(args, kwargs, sites))
        flat_init = jnp.concatenate([jnp.ravel(init[n]) for n, _, _ in layout])
        latent = primitives.sample(f"_{self.prefix}_latent", self._base(flat_init))
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
        loc = primitives.param(f"{self.prefix}_loc", flat_init)
        scale = primitives.param(f"{self.prefix}_scale", jnp.full_like(flat_init, self.init_scale),
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
        loc = primitives.param(f"{self.prefix}_loc", flat_init)
        scale_tril = primitives.param(f"{self.prefix}_scale_tril",
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
        loc = primitives.param(f"{self.prefix}_loc", flat_init)
        factor = primitives.param(f"{self.prefix}_cov_factor", jnp.zeros((d, rank),
                                                                          flat_init.dtype))
        scale = primitives.param(f"{self.prefix}_scale", jnp.full_like(flat_init, self.init_scale),
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


class AutoLaplaceApproximation(AutoContinuous):
    """MAP in unconstrained space (param `auto_loc`), then a Laplace approximation:
    `get_posterior` is the normal with covariance the inverse Hessian of the negative log joint
    (unconstrained, Jacobian included) at `auto_loc`. `create_plates` is accepted and unused,
    as in NumPyro (no local latent site in a subsampled plate). **References:** NumPyro's
    `AutoLaplaceApproximation`; MacKay (2003), ch. 27."""

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, create_plates=None,
                 hessian_fn=None):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn,
                         create_plates=create_plates)
        self.hessian_fn = hessian_fn

    def _base(self, flat_init):
        loc = primitives.param(f"{self.prefix}_loc", flat_init)
        return dist.Delta(loc, event_dim=1)

    def _param_shapes(self, size):
        return {"loc": (size,)}

    def _laplace(self, params, api):
        """`(posterior, positive_definite)`: `MultivariateNormal(loc, scale_tril)` with
        `scale_tril` the Cholesky factor of the inverse Hessian of the potential energy at `loc`
        (the model at the guide's prototype's arguments, as NumPyro's), 0 where the Hessian is
        not positive definite; `positive_definite` is None when `loc` is traced."""
        from effppl.handlers import potential_energy

        args, kwargs = self._args(api)
        layout = self._layout_now()
        hessian_fn = self.hessian_fn or (lambda f, x: jax.hessian(f)(x))

        def build(structure):
            def precision(loc, dynamic):
                a, kw = structure.rebuild(dynamic)
                return hessian_fn(
                    lambda x: potential_energy(self.model, a, kw, self._unpack(x, layout)), loc)
            return precision

        fn, dynamic = self._compiled("laplace_hessian", build, args, kwargs)
        loc = params[f"{self.prefix}_loc"]
        scale_tril = cholesky_of_inverse(fn(loc, dynamic))
        ok = None if isinstance(scale_tril, jax.core.Tracer) else \
            not bool(jnp.any(jnp.isnan(scale_tril)))
        scale_tril = jnp.where(jnp.isnan(scale_tril), 0.0, scale_tril)
        return dist.MultivariateNormal(loc, scale_tril=scale_tril, validate_args=False), ok

    def _warn_singular(self, api):
        warnings.warn(f"effppl.infer.autoguide.AutoLaplaceApproximation.{api}: the Hessian of the "
                      f"potential energy at `{self.prefix}_loc` is not positive definite (not a "
                      f"MAP point?), so the posterior is the point `{self.prefix}_loc` (scale_tril "
                      f"0), as in NumPyro. Fit longer, or use AutoNormal.", UserWarning,
                      stacklevel=3)

    def get_posterior(self, params):
        """`MultivariateNormal(loc, scale_tril)` with `scale_tril` the Cholesky factor of the
        inverse Hessian of the potential energy at `loc` (the model at the arguments the guide
        first ran with). As NumPyro's: where the Hessian is not positive definite, `scale_tril`
        is 0 (the draws are `loc`), with a `UserWarning`."""
        posterior, ok = self._laplace(params, "get_posterior")
        if ok is False:
            self._warn_singular("get_posterior")
        return posterior

    def _marginals(self, params):
        posterior, ok = self._laplace(params, "quantiles")
        if ok is False:  # NumPyro's quantiles build a Normal of scale 0 there: a ValueError
            raise AutoGuideError(
                f"`AutoLaplaceApproximation.quantiles(params, quantiles)`: the Hessian of the "
                f"potential energy (the negative log joint, unconstrained) at the MAP point "
                f"`{self.prefix}_loc` is not positive definite, so the Laplace approximation has "
                f"no spread there and no quantiles (NumPyro's raise too). Fit longer (is "
                f"`{self.prefix}_loc` a MAP point?), give `hessian_fn` a small diagonal "
                f"(`lambda f, x: jax.hessian(f)(x) + 1e-3 * jnp.eye(x.shape[0])`), or use "
                f"AutoNormal.")
        return posterior.mean, jnp.linalg.norm(posterior.scale_tril, axis=-1)

    def quantiles(self, params, quantiles) -> dict:
        """Marginal quantiles of the Laplace approximation, as `AutoContinuous.quantiles`.

        **Raises:** as `median`; `AutoGuideError` where the Hessian at `auto_loc` is not
        positive definite (NumPyro's `quantiles` raise there; `get_posterior` and
        `sample_posterior` warn and give the point `auto_loc`)."""
        return super().quantiles(params, quantiles)

    def sample_posterior(self, rng_key, params, *args, sample_shape=(), **kwargs) -> dict:
        """Draws from the Laplace approximation (`get_posterior`), mapped to the supports, and
        the model's deterministic sites at them (as NumPyro's: new `*args, **kwargs` are not
        used; the guide's prototype fixes the latent sites and the model's arguments). Where the
        Hessian at `auto_loc` is not positive definite, the draws are `auto_loc`, with a
        `UserWarning` (NumPyro's). **Raises:** as `median`."""
        self._args("sample_posterior", args, kwargs)  # a prototype from them, if none yet
        layout = self._checked_layout("sample_posterior", params)
        sample_shape = tuple(sample_shape)
        posterior, ok = self._laplace(params, "sample_posterior")
        if ok is False:
            self._warn_singular("sample_posterior")
        flat = posterior.sample(rng_key, (math.prod(sample_shape),))
        out = self._postprocess(self._unpack(flat, layout), params, batch_ndim=1,
                                api="sample_posterior")
        return jax.tree.map(lambda x: x.reshape(sample_shape + x.shape[1:]), out)
