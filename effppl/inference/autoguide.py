"""Automatic guides (NumPyro's `numpyro.infer.autoguide` names, params and semantics).

An autoguide reads the model's *site analysis* (the one MCMC uses, `effppl.handlers._sites`):
each latent site with its loops, so a site inside a plain `lax.scan` (nested scans, `cond`
branches, `jax.vmap`) gets stacked guide parameters of shape `(T, ...)` with no special case.

The guide draws each site's unconstrained value `u` and maps it to the support with the model's
own `biject_to(fn.support)`, built from the site's *current* distribution: the guide runs the
model (hidden by `block`) with `u` substituted in unconstrained space, exactly as HMC's potential
does, so supports that depend on other latent sites are right for every draw. Each latent site
of the model is then a `Delta` site of the guide whose log density is the guide's density of the
constrained value (`log q(u) - log|det J(u)|`), as NumPyro's `AutoContinuous` emits them.
Only what feeds the values is kept by XLA, so the extra model run costs little at run time.
"""

from __future__ import annotations

import math
import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from jax.scipy.special import ndtri
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

from .. import primitives
from .._errors import EffpplError
from ..primitives import SiteError, prng_key_op
from ._cache import cached, split_args
from ._init import InitStrategy, ModelContext, init_to_median, init_to_uniform
from ._model import initialising

__all__ = ["AutoGuide", "AutoNormal", "AutoDelta", "AutoContinuous", "AutoDiagonalNormal",
           "AutoMultivariateNormal", "AutoLowRankMultivariateNormal",
           "AutoLaplaceApproximation", "AutoGuideError"]


class AutoGuideError(EffpplError, ValueError):
    """An autoguide cannot cover the model (a discrete latent site, a site in a `while_loop`),
    or was asked for something before it has seen the model's arguments."""


def _strategy(init_loc_fn, name):
    if isinstance(init_loc_fn, InitStrategy):
        return init_loc_fn
    if callable(init_loc_fn):  # NumPyro style: the function itself, `init_loc_fn=init_to_median`
        made = init_loc_fn()
        if isinstance(made, InitStrategy):
            return made
    raise AutoGuideError(f"effppl.infer.autoguide.{name}(model, init_loc_fn=...) expected an "
                         f"init strategy (`init_to_uniform()`, `init_to_median()`, "
                         f"`init_to_value(values=...)`), but got {init_loc_fn!r}.")


def _fixed_supports(sites) -> dict | None:
    """`{name: support}` when every site's support is a constraint without parameters (so it
    cannot depend on other sites or data), and the site has one distribution and sits in no
    `cond` branch (whose rows may go unread, see `_Unconstrain`); else None."""
    out = {}
    for name, (site, _, _) in sites.items():
        if len(site.keys) > 1 or site.conditional:
            return None
        fn = jax.tree_util.tree_unflatten(site.key.in_tree, site.key.in_avals)[0]["fn"]
        try:
            support = fn.support
        except Exception:  # noqa: BLE001 (a support computed from the parameters' values)
            return None
        if not isinstance(support, constraints.Constraint) or jax.tree_util.tree_leaves(support):
            return None
        out[name] = support
    return out


class AutoGuide:
    """Base class of the autoguides: the model's latent sites, their initial values, and the map
    from unconstrained values to the model's supports.

    **Arguments:** `model`; `prefix` (str, names of the params: `{site}_{prefix}_loc`, ...);
    `init_loc_fn`: an init strategy (`effppl.infer.init_to_uniform()`, ...), giving the initial
    unconstrained locations.
    """

    def __init__(self, model, *, prefix: str = "auto", init_loc_fn=init_to_uniform,
                 create_plates=None):
        if create_plates is not None:
            raise AutoGuideError("effppl's autoguides do not take `create_plates` (no "
                                 "subsampling plates); leave it None.")
        self.model = model
        self.prefix = prefix
        self.init_loc_fn = _strategy(init_loc_fn, type(self).__name__)
        self._prototype_args = None
        self._latent_names = None  # the latent sites when SVI set the guide up (NumPyro)
        self.__name__ = type(self).__name__

    def _key(self):
        settings = {k: v for k, v in vars(self).items() if k not in ("_prototype_args", "model")}
        if jax.tree_util.tree_leaves(self.init_loc_fn.dynamic()):  # values baked into its code
            settings["init_loc_fn"] = id(self.init_loc_fn)
        return type(self), self.model, tuple(sorted(settings.items()))

    def __eq__(self, other):
        """Equal guides (same type, model, settings and latent sites) share compiled functions,
        so a new `SVI(model, AutoNormal(model), ...)` on new data compiles nothing."""
        return isinstance(other, AutoGuide) and self._key() == other._key()

    def __hash__(self):
        return hash((type(self), self.model, self.prefix))

    # -- the model's sites -------------------------------------------------------------------

    def _setup_prototype(self, *args, **kwargs):
        """Keep the model's (concrete) arguments for `median`, `quantiles`, `get_posterior` and
        `sample_posterior`, and which sites are latent: later calls (`Predictive(model,
        guide=...)` with `y=None`) guide those sites only, as NumPyro's prototype trace does.
        Called by `SVI.init`."""
        self._prototype_args = None
        self._latent_names = tuple(self._latent_sites(args, kwargs))
        self._prototype_args = (args, kwargs)

    def _latent_sites(self, args, kwargs) -> dict:
        """`{name: (Site, unconstrained stacked shape, dtype)}` of the model's latent sites."""
        from effppl.handlers._basic import _analyzed
        from effppl.handlers._sites import unconstrained_type

        out = {}
        for name, site in _analyzed(self.model, args, kwargs).items():
            if site.type != "sample" or site.is_observed:
                continue
            if self._prototype_args is not None and name not in self._latent_names:
                continue  # e.g. `y=None` for predictions: `y` was observed when SVI ran
            if not site.bounded:
                raise AutoGuideError(
                    f"effppl.infer.autoguide.{type(self).__name__}: latent site `{name}` sits "
                    f"inside a `while_loop` (no static number of occurrences to give guide "
                    f"parameters for). Use `lax.scan`/`fori_loop` with a static length.")
            try:
                shape, dtype = unconstrained_type(site)
            except SiteError as err:
                raise AutoGuideError(
                    f"effppl.infer.autoguide.{type(self).__name__} covers continuous latent "
                    f"sites only: {err}") from None
            out[name] = (site, tuple(site.loops) + tuple(shape), dtype)
        if not out:
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}: the model has "
                                 f"no latent sample site to guide.")
        return out

    def _init_locs(self, args, kwargs, sites) -> dict:
        """Initial unconstrained values (stacked for sites in loops), from `init_loc_fn`. Runs
        the model hidden by `block`, with a key from the enclosing `seed`; when SVI substitutes
        the params this is dead code, which XLA removes."""
        from effppl import handlers

        key = jax.random.wrap_key_data(prng_key_op(name=f"_{self.prefix}_init"))

        def propose():
            with initialising():
                ctx = ModelContext(model=self.model, args=args, kwargs=kwargs,
                                   latent=tuple(sites))
                return self.init_loc_fn.propose(key, ctx, self.init_loc_fn.dynamic())

        locs = handlers.block(propose)()
        return {n: jnp.asarray(locs[n], sites[n][2]).reshape(sites[n][1]) for n in sites}

    def _constrain(self, args, kwargs, unconstrained: dict, sites: dict | None = None):
        """`(values, log_dets, fns)`: the model's latent values at the unconstrained values
        `unconstrained` (each site mapped with the support of its current distribution), each
        site's `sum log|det J|`, and its (stacked) distribution. The model runs hidden by
        `block`; when `sites` (`_latent_sites`) show that no support depends on anything (a
        parameter-free constraint such as `real`, `positive`, `simplex`, one distribution per
        site), the values are mapped directly instead, and `fns` is None."""
        from effppl import handlers
        from effppl.handlers._density import _Unconstrain

        supports = _fixed_supports(sites) if sites is not None else None
        if supports is not None:
            values, log_dets = {}, {}
            for name, u in unconstrained.items():
                t = biject_to(supports[name])
                values[name] = t(u)
                log_dets[name] = jnp.sum(t.log_abs_det_jacobian(u, values[name]))
            return values, log_dets, None

        def run():
            tracer = handlers.trace(_Unconstrain(self.model, unconstrained, "autoguide"))
            (_, _, log_dets), tr = tracer._run(*args, **kwargs)
            return ({n: tr[n]["value"] for n in unconstrained}, log_dets,
                    {n: tr[n]["fn"] for n in unconstrained})

        return handlers.block(run)()

    def _emit(self, values, log_densities):
        """The guide's sample sites: one `Delta` per latent site of the model, carrying the
        guide's log density of that value."""
        out = {}
        for name, value in values.items():
            out[name] = primitives.sample(
                name, dist.Delta(value, log_density=log_densities[name], event_dim=jnp.ndim(value)))
        return out

    # -- after fitting -----------------------------------------------------------------------

    def _args(self, api, args=(), kwargs=None):
        if args or kwargs:
            return tuple(args), dict(kwargs or {})
        if self._prototype_args is None:
            raise AutoGuideError(f"`{type(self).__name__}.{api}` needs the model's arguments: "
                                 f"run `SVI.init`/`SVI.run` with this guide first (or pass them).")
        return self._prototype_args

    def _compiled(self, what, build, args, kwargs):
        structure, dynamic = split_args(f"effppl.infer.autoguide.{type(self).__name__}", args,
                                        kwargs)
        fn = cached(("autoguide", what, self, structure), lambda: jax.jit(build(structure)))
        return fn, dynamic

    def _postprocess(self, unconstrained: dict, batch_ndim: int = 0) -> dict:
        """Constrained values of the model's latent sites at `unconstrained` (with `batch_ndim`
        leading batch axes)."""
        args, kwargs = self._args("median")

        def build(structure):
            def constrain(u, dynamic):
                a, kw = structure.rebuild(dynamic)
                one = lambda v: self._constrain(a, kw, v)[0]  # noqa: E731
                for _ in range(batch_ndim):
                    one = jax.vmap(one)
                return one(u)
            return constrain

        fn, dynamic = self._compiled(("postprocess", batch_ndim), build, args, kwargs)
        return fn(unconstrained, dynamic)

    def sample_posterior(self, rng_key, params, *args, sample_shape=(), **kwargs) -> dict:
        """Draws of the model's latent sites from the guide at `params`: dict name -> array
        `(*sample_shape, *site_shape)` (sites in loops: `(*sample_shape, T, ...)`). The model's
        arguments default to those `SVI.init` saw."""
        from effppl import handlers

        args, kwargs = self._args("sample_posterior", args, kwargs)
        sample_shape = tuple(sample_shape)
        n = math.prod(sample_shape)

        def build(structure):
            def draw(keys, params, dynamic):
                a, kw = structure.rebuild(dynamic)

                def one(key):
                    guide = handlers.seed(handlers.substitute(self, data=params), key)
                    tr = handlers.trace(guide).get_trace(*a, **kw)
                    return {name: s["value"] for name, s in tr.items()
                            if s["type"] == "sample" and not name.startswith("_")}
                return jax.vmap(one)(keys)
            return draw

        fn, dynamic = self._compiled("sample_posterior", build, args, kwargs)
        key = jax.random.key_data(rng_key) if jax.dtypes.issubdtype(
            getattr(rng_key, "dtype", None), jax.dtypes.prng_key) else rng_key
        out = fn(jax.random.split(key, max(n, 1)), params, dynamic)
        return jax.tree.map(lambda x: x[:n].reshape(sample_shape + x.shape[1:]), out)


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
        if not init_scale > 0:
            raise AutoGuideError(f"effppl.infer.autoguide.AutoNormal(init_scale={init_scale!r}) "
                                 f"expected a positive number.")
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn,
                         create_plates=create_plates)
        self.init_scale = float(init_scale)

    def _params(self, sites, init):
        locs, scales = {}, {}
        for name, (_, shape, dtype) in sites.items():
            locs[name] = primitives.param(f"{name}_{self.prefix}_loc", init[name])
            scales[name] = primitives.param(f"{name}_{self.prefix}_scale",
                                            jnp.full(shape, self.init_scale, dtype),
                                            constraint=self.scale_constraint)
        return locs, scales

    def __call__(self, *args, **kwargs):
        sites = self._latent_sites(args, kwargs)
        locs, scales = self._params(sites, self._init_locs(args, kwargs, sites))
        keys = jax.random.split(prng_key_op(name=f"_{self.prefix}_draw"), len(sites))
        u, log_q = {}, {}
        for key, (name, (_, shape, dtype)) in zip(keys, sites.items()):
            u[name] = locs[name] + scales[name] * jax.random.normal(key, shape, dtype)
            log_q[name] = jnp.sum(dist.Normal(locs[name], scales[name]).log_prob(u[name]))
        values, log_dets, _ = self._constrain(args, kwargs, u, sites)
        return self._emit(values, {n: log_q[n] - log_dets[n] for n in values})

    def _locs_scales(self, params):
        names = [k[:-len(f"_{self.prefix}_loc")] for k in params
                 if k.endswith(f"_{self.prefix}_loc")]
        return ({n: params[f"{n}_{self.prefix}_loc"] for n in names},
                {n: params[f"{n}_{self.prefix}_scale"] for n in names})

    def median(self, params) -> dict:
        """The posterior median of each latent site (the constrained image of `loc`)."""
        return self._postprocess(self._locs_scales(params)[0])

    def quantiles(self, params, quantiles) -> dict:
        """Marginal quantiles: dict site -> array `(len(quantiles), *site_shape)`."""
        locs, scales = self._locs_scales(params)
        q = jnp.asarray(quantiles)
        u = {n: locs[n] + scales[n] * ndtri(q).reshape((-1,) + (1,) * jnp.ndim(locs[n]))
             for n in locs}
        return self._postprocess(u, batch_ndim=1)


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
        values, _, fns = self._constrain(args, kwargs, self._init_locs(args, kwargs, sites))
        out = {}
        for name, value in values.items():
            if fns[name] is None:
                raise AutoGuideError(f"effppl.infer.autoguide.AutoDelta: site `{name}` has "
                                     f"different distributions in different `cond` branches, "
                                     f"so it has no one support for its param; use AutoNormal.")
            loc = primitives.param(f"{name}_{self.prefix}_loc", value,
                                   constraint=fns[name].support)
            out[name] = primitives.sample(name, dist.Delta(loc, event_dim=jnp.ndim(loc)))
        return out

    def median(self, params) -> dict:
        """The point estimates (dict site -> constrained value)."""
        suffix = f"_{self.prefix}_loc"
        return {k[:-len(suffix)]: v for k, v in params.items() if k.endswith(suffix)}


class AutoContinuous(AutoGuide):
    """Guides over the flat vector of all latent sites' unconstrained values (site by site, in
    the model's order, each stacked along its loops and raveled): `_auto_latent` is drawn from
    `get_base_dist`-like distribution built by `_base`, then each site is mapped to its support.
    """

    def _layout(self, sites):
        return [(name, shape, math.prod(shape)) for name, (_, shape, _) in sites.items()]

    def _unpack(self, flat, layout):
        out, start = {}, 0
        for name, shape, size in layout:
            out[name] = flat[..., start:start + size].reshape(flat.shape[:-1] + shape)
            start += size
        return out

    def __call__(self, *args, **kwargs):
        sites = self._latent_sites(args, kwargs)
        layout = self._layout(sites)
        init = self._init_locs(args, kwargs, sites)
        flat_init = jnp.concatenate([jnp.ravel(init[n]) for n, _, _ in layout])
        latent = primitives.sample(f"_{self.prefix}_latent", self._base(flat_init))
        values, log_dets, _ = self._constrain(args, kwargs, self._unpack(latent, layout), sites)
        return self._emit(values, {n: -log_dets[n] for n in values})

    def _loc(self, params):
        return params[f"{self.prefix}_loc"]

    def _layout_now(self):
        args, kwargs = self._args("median")
        return self._layout(self._latent_sites(args, kwargs))

    def median(self, params) -> dict:
        """The posterior median of each latent site (the constrained image of `loc`)."""
        return self._postprocess(self._unpack(self._loc(params), self._layout_now()))

    def quantiles(self, params, quantiles) -> dict:
        """Marginal quantiles (normal marginals of `get_posterior`): dict site -> array
        `(len(quantiles), *site_shape)`."""
        posterior = self.get_posterior(params)
        sd = jnp.sqrt(jnp.diagonal(posterior.covariance_matrix, axis1=-2, axis2=-1)) \
            if not isinstance(posterior, dist.Normal) else posterior.scale
        q = ndtri(jnp.asarray(quantiles))[:, None]
        flat = posterior.mean + sd * q
        return self._postprocess(self._unpack(flat, self._layout_now()), batch_ndim=1)


class AutoDiagonalNormal(AutoContinuous):
    """A normal guide with diagonal covariance over the flat unconstrained latent vector: params
    `auto_loc`, `auto_scale` (softplus-positive). **References:** NumPyro's
    `AutoDiagonalNormal`."""

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, init_scale=0.1):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn)
        self.init_scale = float(init_scale)

    def _base(self, flat_init):
        loc = primitives.param(f"{self.prefix}_loc", flat_init)
        scale = primitives.param(f"{self.prefix}_scale", jnp.full_like(flat_init, self.init_scale),
                                 constraint=constraints.softplus_positive)
        return dist.Normal(loc, scale).to_event(1)

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
        self.init_scale = float(init_scale)

    def _base(self, flat_init):
        loc = primitives.param(f"{self.prefix}_loc", flat_init)
        scale_tril = primitives.param(f"{self.prefix}_scale_tril",
                                      jnp.eye(flat_init.shape[0], dtype=flat_init.dtype)
                                      * self.init_scale, constraint=self.scale_tril_constraint)
        return dist.MultivariateNormal(loc, scale_tril=scale_tril)

    def get_posterior(self, params):
        """`MultivariateNormal(loc, scale_tril=scale_tril)` of the flat unconstrained latent."""
        return dist.MultivariateNormal(params[f"{self.prefix}_loc"],
                                       scale_tril=params[f"{self.prefix}_scale_tril"])


class AutoLowRankMultivariateNormal(AutoContinuous):
    """A normal guide with low-rank-plus-diagonal covariance `W W^T + diag(scale^2)` over the flat
    unconstrained latent vector: params `auto_loc`, `auto_cov_factor` (`(D, rank)`, rank
    `round(sqrt(D))` by default), `auto_scale`. **References:** NumPyro's
    `AutoLowRankMultivariateNormal`."""

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, init_scale=0.1,
                 rank=None):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn)
        self.init_scale, self.rank = float(init_scale), rank

    def _base(self, flat_init):
        d = flat_init.shape[0]
        rank = int(round(d ** 0.5)) if self.rank is None else int(self.rank)
        loc = primitives.param(f"{self.prefix}_loc", flat_init)
        factor = primitives.param(f"{self.prefix}_cov_factor", jnp.zeros((d, rank),
                                                                          flat_init.dtype))
        scale = primitives.param(f"{self.prefix}_scale", jnp.full_like(flat_init, self.init_scale),
                                 constraint=constraints.softplus_positive)
        return dist.LowRankMultivariateNormal(loc, factor, scale ** 2)

    def get_posterior(self, params):
        """`LowRankMultivariateNormal(loc, cov_factor, scale**2)` of the flat latent."""
        p = self.prefix
        return dist.LowRankMultivariateNormal(params[f"{p}_loc"], params[f"{p}_cov_factor"],
                                              params[f"{p}_scale"] ** 2)


class AutoLaplaceApproximation(AutoContinuous):
    """MAP in unconstrained space (param `auto_loc`), then a Laplace approximation:
    `get_posterior` is the normal with covariance the inverse Hessian of the negative log joint
    (unconstrained, Jacobian included) at `auto_loc`. **References:** NumPyro's
    `AutoLaplaceApproximation`; MacKay (2003), ch. 27."""

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, create_plates=None,
                 hessian_fn=None):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn,
                         create_plates=create_plates)
        self.hessian_fn = hessian_fn

    def _base(self, flat_init):
        loc = primitives.param(f"{self.prefix}_loc", flat_init)
        return dist.Delta(loc, event_dim=1)

    def get_posterior(self, params):
        """`MultivariateNormal(loc, scale_tril)` with `scale_tril` the Cholesky factor of the
        inverse Hessian of the potential energy at `loc`."""
        from effppl.handlers import potential_energy

        args, kwargs = self._args("get_posterior")
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
        cov = jnp.linalg.inv(fn(loc, dynamic))
        return dist.MultivariateNormal(loc, scale_tril=jnp.linalg.cholesky(cov))

    def sample_posterior(self, rng_key, params, *args, sample_shape=(), **kwargs) -> dict:
        """Draws from the Laplace approximation (`get_posterior`), mapped to the supports."""
        if args or kwargs:
            self._setup_prototype(*args, **kwargs)
        sample_shape = tuple(sample_shape)
        flat = self.get_posterior(params).sample(rng_key, (math.prod(sample_shape),))
        out = self._postprocess(self._unpack(flat, self._layout_now()), batch_ndim=1)
        return jax.tree.map(lambda x: x.reshape(sample_shape + x.shape[1:]), out)
