"""The base of the automatic guides (`autoguide.py`): the model's latent sites, their initial
values, and the map from unconstrained values to the model's supports.

An autoguide reads the model's *site analysis* (the one MCMC uses, `effppl.handlers._sites`):
each latent site with its loops, so a site inside a plain `lax.scan` (nested scans, `cond`
branches, `jax.vmap`) gets stacked guide parameters of shape `(T, ...)` with no special case.

The guide draws each site's unconstrained value `u` and maps it to the support with the model's
own `biject_to(fn.support)`, built from the site's *current* distribution: the guide runs the
model (hidden by `block`) with `u` substituted in unconstrained space, exactly as HMC's potential
does, so supports that depend on other latent sites are right for every draw. Each latent site
of the model is then a `Delta` site of the guide whose log density is the guide's density of the
constrained value (`log q(u) - log|det J(u)|`), as NumPyro's `AutoContinuous` emits them.
When every support is a constraint without parameters (`real`, `positive`, `simplex`, ...) and
no site sits in a `cond` branch, nothing can depend on other sites, and the values are mapped
directly, with no model run inside the guide (`_fixed_supports`).

The guide's *prototype* (the model's latent sites and concrete arguments, read by `median`,
`quantiles`, `sample_posterior`) is set up when the guide first runs, as NumPyro's: by `SVI.init`,
or by a run at arguments the outermost handler was given (`trace(seed(guide, key)).get_trace(
*args)`). Later runs guide those sites only (`Predictive` with `y=None` leaves `y` to the model).

Initial values come from `init_loc_fn` inside the guide body (hidden by `block`). In a first run
their key is the first `seed` gives, as NumPyro's guide draws it when it sets up its prototype,
and `init_to_uniform` draws as NumPyro does, so SVI.init's params equal NumPyro's at the same key;
in later runs (SVI substitutes the params) that code is dead and XLA drops it.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

from .. import primitives
from .._errors import EffpplError
from ..effects.internal import describe_non_array
from ..primitives import SiteError, prng_key_op
from . import _guide_plates as plates_
from ._cache import cached, split_cache_key
from ._init import InitStrategy, ModelContext, _InitToUniform, init_to_uniform
from ._model import initialising

__all__ = ["AutoGuide", "AutoGuideError", "MissingParamError", "ParamTypeError"]


class AutoGuideError(EffpplError, ValueError):
    """An autoguide cannot cover the model (a discrete latent site, a site in a `while_loop`),
    was asked for something before it has seen the model's arguments, or was given params of the
    wrong shapes."""


class MissingParamError(AutoGuideError, KeyError):
    """The params given to an autoguide's `median`, `quantiles`, `sample_posterior` (or
    `NeuTraReparam`) lack one of the guide's params: a `KeyError`, as NumPyro's lookup raises."""

    __str__ = BaseException.__str__  # the message as written (KeyError's would quote it)


class ParamTypeError(AutoGuideError, TypeError):
    """A value in the params given to an autoguide's `median`, `quantiles`, `sample_posterior`
    (or `NeuTraReparam`) is not an array of numbers (a string, an object): a `TypeError`, as
    JAX's would be, naming the param and what it is."""


_first = threading.local()


@contextlib.contextmanager
def first_run():
    """The autoguides run in this block run for the first time (`_init_key`): `SVI.init`'s run
    of its guide, whose prototype it set up before."""
    outer = getattr(_first, "run", False)
    _first.run = True
    try:
        yield
    finally:
        _first.run = outer


def uniform_chain(rng_key, types: dict, radius: float) -> dict:
    """`{site: Uniform(-radius, radius) draws}` of the unconstrained `types` (`{site: (shape,
    dtype)}`, in the model's order), as NumPyro's `find_valid_initial_params` draws its first
    point: a key split off for each site in turn, a draw in the default float type."""
    key, sub = jax.random.split(rng_key)
    out = {}
    for name, (shape, dtype) in types.items():
        out[name] = jax.random.uniform(sub, shape, minval=-radius, maxval=radius).astype(dtype)
        key, sub = jax.random.split(key)
    return out


class _Latent(NamedTuple):
    """A latent site of the model as an autoguide sees it."""

    site: object         # handlers._sites.Site
    shape: tuple         # unconstrained shape, stacked over the loops around the site
    dtype: object
    frames: tuple        # the plates around it (`_guide_plates.Frame`), innermost first
    batch_ndim: int      # leading dims that are not event dims: loops, then the batch shape

    @property
    def subsampled(self) -> bool:
        return any(frame.subsampled for frame in self.frames)


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
    for name, latent in sites.items():
        site = latent.site
        if len(site.keys) > 1 or site.conditional:
            return None
        fn = site.message.fn
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
    unconstrained locations; `create_plates`: None, or a function of the model's arguments
    returning the `effppl.plate` (or a list of plates) the guide enters for the model's plate of
    that name, e.g. one whose indices the caller substitutes (NumPyro's). The guides that read
    plates (`AutoNormal`, `AutoDelta`) make the others from the model's plates.

    **Subsampling.** A latent site inside a subsampled `effppl.plate(name, size,
    subsample_size=n)` has params of full size `size` along the plate's dim; the guide enters the
    plate, so it draws the indices (which the model then replays), reads its params at them, and
    scales the site's log density by `size / n`, as NumPyro's guides do.
    """

    def __init__(self, model, *, prefix: str = "auto", init_loc_fn=init_to_uniform,
                 create_plates=None):
        if create_plates is not None and not callable(create_plates):
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}(model, "
                                 f"create_plates=...) expected a function of the model's "
                                 f"arguments returning plates, or None, but got "
                                 f"{create_plates!r:.60}.")
        if not callable(model):
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}(model, ...) "
                                 f"expected a callable model, but got {type(model).__name__} "
                                 f"{model!r:.60}.")
        self.model = model
        self.prefix = prefix
        self.create_plates = create_plates
        self.init_loc_fn = _strategy(init_loc_fn, type(self).__name__)
        self._prototype_args = None
        self._latent_names = None  # the latent sites when the guide was set up (NumPyro)
        self.__name__ = type(self).__name__

    def quantiles(self, params, quantiles) -> dict:
        """Marginal quantiles of the guide's posterior; a guide without a spread (`AutoDelta`)
        has none. **Raises:** `NotImplementedError` here, as NumPyro's base class."""
        raise NotImplementedError(f"{type(self).__name__} has no quantiles: its posterior is a "
                                  f"point (use `median`), or it does not define them.")

    def _positive(self, name, value):
        """`value` as a float; an `AutoGuideError` naming the setting `name` unless it is a
        positive real number."""
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        if not ok:
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}({name}="
                                 f"{value!r}) expected a positive number.")
        return float(value)

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
        Called by `SVI.init`, and when the guide first runs (`_init_key`)."""
        self._prototype_args = None
        self._latent_names = tuple(self._latent_sites(args, kwargs))
        self._prototype_args = (args, kwargs)

    def _latent_sites(self, args, kwargs, analysis=None) -> dict:
        """`{name: _Latent}`: the model's latent sites, each with its unconstrained stacked
        shape and the plates around it.

        **Raises:** `AutoGuideError` for a discrete latent site, one in a `while_loop`, one in a
        subsampled plate that is created inside a loop, or whose `cond` branches have
        unconstrained values of different shapes; for a plate with two dims or sizes."""
        from effppl.handlers._basic import _analyzed
        from effppl.handlers._trace import is_enumerated

        if analysis is None:
            analysis = _analyzed(self.model, args, kwargs)
        subsampled = plates_.subsampled_plates(analysis)
        out = {}
        for name, site in analysis.items():
            if site.type != "sample" or site.is_observed:
                continue
            if is_enumerated(dict(site.key.static).get("infer", ())):
                continue  # summed out of the model by `TraceEnum_ELBO`: nothing to guide
            if self._prototype_args is not None and name not in self._latent_names:
                continue  # e.g. `y=None` for predictions: `y` was observed when SVI ran
            out[name] = self._latent(name, site, subsampled)
        if not out:
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}: the model has "
                                 f"no latent sample site to guide.")
        return out

    def _latent(self, name, site, subsampled: dict) -> _Latent:
        """Latent site `name` (`subsampled`: `plates_.subsampled_plates` of the model)."""
        from effppl.handlers._sites import unconstrained_type

        guide = f"effppl.infer.autoguide.{type(self).__name__}"
        if not site.bounded:
            raise AutoGuideError(
                f"{guide}: latent site `{name}` sits inside a `while_loop` (no static number of "
                f"occurrences to give guide parameters for). Use `lax.scan`/`fori_loop` with a "
                f"static length.")
        try:
            shape, dtype = unconstrained_type(site)
        except SiteError as err:
            raise AutoGuideError(f"{guide} covers continuous latent sites only: {err}") from None
        shape = tuple(site.loops) + tuple(shape)
        frames = plates_.site_frames(site, {p: size for p, (size, _) in subsampled.items()})
        fn = site.message.fn
        batch = tuple(site.loops) + tuple(fn.batch_shape)
        latent = _Latent(site, shape, dtype, frames, len(batch))
        if not latent.subsampled:
            return latent
        looped = [f.name for f in frames if subsampled.get(f.name, (0, False))[1]]
        if looped:
            raise AutoGuideError(
                f"{guide}: latent site `{name}` sits in the subsampled plate `{looped[0]}`, "
                f"which is created inside a loop, so it draws new indices at every iteration. "
                f"Create the plate once, outside the loop (entering it inside is fine).")
        if shape[:len(batch)] != batch:
            raise AutoGuideError(
                f"{guide}: latent site `{name}` sits in a subsampled plate, and its `cond` "
                f"branches have unconstrained values of different shapes, so its params have no "
                f"plate dim to subsample along. Give it one distribution family.")
        return latent

    def _init_key(self, args, kwargs, sites):
        """The raw key of the initial values when this run is the guide's first (it has no
        prototype yet, or it runs in `first_run()`, as `SVI.init` runs it), drawn from `seed`
        then, before anything else, as NumPyro's guide draws it when it sets up its prototype;
        None otherwise. A first run at arguments the outermost handler was called with (e.g.
        `trace(seed(guide, key)).get_trace(*args)`) sets up the prototype (`latent` sites
        `sites`), as NumPyro's guides do."""
        from effppl.handlers._handler import concrete_arguments

        first = self._prototype_args is None or getattr(_first, "run", False)
        if self._prototype_args is None:
            concrete = concrete_arguments(args, kwargs)
            if concrete is not None:
                self._latent_names = tuple(sites)
                self._prototype_args = concrete
        return prng_key_op(name=f"_{self.prefix}_init") if first else None

    def _init_locs(self, args, kwargs, sites, key=None) -> dict:
        """Initial unconstrained values (stacked for sites in loops), from `init_loc_fn` with
        the raw `key` (`_init_key`; None: a fixed key, in a run whose initial values are not
        its first's, dead code once SVI substitutes the params, which XLA removes). Runs the
        model hidden by `block`. `init_to_uniform` draws as NumPyro's `find_valid_initial_params`
        draws its first point, so the initial params equal NumPyro's at the same key."""
        from effppl import handlers

        key = jax.random.PRNGKey(0) if key is None else key
        if isinstance(self.init_loc_fn, _InitToUniform):
            return uniform_chain(key, {n: (latent.shape, latent.dtype)
                                       for n, latent in sites.items()}, self.init_loc_fn.radius)
        key = jax.random.wrap_key_data(key)

        def propose():
            with initialising():
                ctx = ModelContext(model=self.model, args=args, kwargs=kwargs,
                                   latent=tuple(sites))
                return self.init_loc_fn.propose(key, ctx, self.init_loc_fn.dynamic())

        locs = handlers.block(propose)()
        return {n: jnp.asarray(locs[n], sites[n].dtype).reshape(sites[n].shape) for n in sites}

    def _plates(self, args, kwargs, sites) -> dict:
        """`{name: effppl.plate}`: the guide's plates for the plates around `sites`
        (`_guide_plates.create_plates`); made before anything else the guide draws, so their
        indices take the first keys of `seed`, as NumPyro's."""
        frames = plates_.check_frames({n: latent.frames for n, latent in sites.items()},
                                      type(self).__name__)
        return plates_.create_plates(self.create_plates, frames, args, kwargs,
                                     type(self).__name__)

    def _constrain(self, args, kwargs, unconstrained: dict, sites: dict | None = None,
                   plates: dict | None = None):
        """`(values, log_dets, fns)`: the model's latent values at the unconstrained values
        `unconstrained` (each site mapped with the support of its current distribution), each
        site's `sum log|det J|`, and its (stacked) distribution. The model runs hidden by
        `block`, its subsampled plates given the indices of the guide's `plates`; when `sites`
        (`_latent_sites`) show that no support depends on anything (a parameter-free
        constraint such as `real`, `positive`, `simplex`, one distribution per site), the values
        are mapped directly instead, and `fns` is None."""
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

        model = self.model
        indices = {n: p.indices for n, p in (plates or {}).items() if p.subsample_size < p.size}
        if indices:
            model = handlers.substitute(model, data=indices)

        def run():
            tracer = handlers.trace(_Unconstrain(model, unconstrained, "autoguide", per_site=True))
            (_, _, log_dets), tr = tracer._run(*args, **kwargs)
            return ({n: tr[n]["value"] for n in unconstrained}, log_dets,
                    {n: tr[n]["fn"] for n in unconstrained})

        return handlers.block(run)()

    def _emit(self, values, sites, log_densities=None):
        """The guide's sample sites: one `Delta` per latent site of the model, carrying the
        guide's log density of that value (none: 0), scaled like the site's subsampled plates
        scale the model's."""
        from effppl import handlers

        out = {}
        for name, value in values.items():
            fn = dist.Delta(value, log_density=0.0 if log_densities is None
                            else log_densities[name], event_dim=jnp.ndim(value))
            scale = plates_.subsample_scale(sites[name].frames)
            with handlers.scale(scale=scale) if scale is not None else contextlib.nullcontext():
                out[name] = primitives.sample(name, fn)
        return out

    # -- after fitting -----------------------------------------------------------------------

    def _expected_params(self, sites) -> dict:
        """`{param name: shape}` of the guide's params for the latent `sites` (`_latent_sites`);
        None in a shape: any length. (None known here: a subclass declares its own.)"""
        return {}

    def _checked_sites(self, api, params, args=(), kwargs=None, where=None,
                       only: str | None = None) -> dict:
        """The model's latent sites (`_latent_sites` at the guide's prototype's arguments, as
        NumPyro's; with no prototype, at those given, `_args`), once `params` hold the guide's params
        (with `only`, those whose name ends with it: what NumPyro's method reads, e.g. `median`
        the locs). `api`: the method asked (`"median"`); `where`: the call, for messages
        (default `{guide}.{api}(params)`).

        **Raises:** `MissingParamError` (a `KeyError`) naming a param `params` lack;
        `ParamTypeError` (a `TypeError`) naming a param whose value is not an array of numbers;
        `AutoGuideError` for `params` that are not a dict, or a param of the wrong shape."""
        guide = where or f"{type(self).__name__}.{api}(params)"
        if not isinstance(params, Mapping):
            raise AutoGuideError(f"`{guide}` expected the guide's fitted params (a dict, "
                                 f"`SVIRunResult.params`), but got {type(params).__name__}.")
        for name, value in params.items():
            problems = [describe_non_array(x) for x in jax.tree_util.tree_leaves(value)]
            problem = next((p for p in problems if p is not None), None)
            if problem is not None:
                raise ParamTypeError(
                    f"`{guide}`: param `{name}` must be an array of numbers, but is {problem}. "
                    f"Pass the params SVI fitted for this guide (`SVIRunResult.params`, "
                    f"`svi.get_params(state)`).")
        args, kwargs = self._args(api, args, kwargs)
        sites = self._latent_sites(args, kwargs)
        for name, shape in self._expected_params(sites).items():
            if only is not None and not name.endswith(only):
                continue
            described = str(tuple("*" if n is None else n for n in shape)).replace("'*'", "r")
            if name not in params:
                raise MissingParamError(
                    f"`{guide}`: params lack `{name}` (shape {described}), one of the "
                    f"guide's params for the model's latent sites "
                    f"({', '.join(f'`{n}`' for n in sites)}). Pass the params SVI fitted for this "
                    f"guide (`SVIRunResult.params`, `svi.get_params(state)`).")
            got = jnp.shape(params[name])
            if len(got) != len(shape) or any(n is not None and g != n
                                             for g, n in zip(got, shape)):
                raise AutoGuideError(
                    f"`{guide}`: param `{name}` has shape {got}, but the guide's param "
                    f"for the model's latent sites has shape {described}. Pass the params SVI "
                    f"fitted for this guide, with the model arguments it was fitted at.")
            self._check_support(guide, name, params[name])
        return sites

    def _param_support(self, name: str):
        """The constraint the guide's param `name` must satisfy where a distribution reads it
        (a scale: positive), or None. Subclasses name theirs."""
        return None

    def _check_support(self, guide, name, value):
        """`AutoGuideError` naming param `name` when its value (concrete: a traced value is
        not checked) is outside its support, where NumPyro's distribution would raise a
        `ValueError` (an invalid scale) instead of giving a silently wrong number."""
        constraint = self._param_support(name)
        if constraint is None or isinstance(value, jax.core.Tracer):
            return
        if not bool(np.all(np.asarray(constraint(jnp.asarray(value))))):
            raise AutoGuideError(
                f"`{guide}`: param `{name}` is outside its support ({constraint}), so the "
                f"guide's distribution is not defined there: {np.asarray(value)!r:.120}. Pass "
                f"the params SVI fitted for this guide (constrained, as `svi.get_params` "
                f"returns them).")

    def _deterministic(self, args, kwargs, values: dict, params: dict, analysis: dict) -> dict:
        """The model's deterministic sites at the latent `values` (constrained) and the model's
        params in `params`, as NumPyro's autoguides return them: the model runs with `values`
        substituted, under `seed(0)` for the indices of subsampled plates (NumPyro's
        `postprocess_fn`). Empty when the model has no deterministic site."""
        from effppl import handlers

        if not any(site.type == "deterministic" for site in analysis.values()):
            return {}
        model_params = {n: v for n, v in params.items()
                        if n in analysis and analysis[n].type == "param"}
        model = handlers.substitute(self.model, data={**values, **model_params})
        tr = handlers.trace(handlers.seed(model, 0)).get_trace(*args, **kwargs)
        return {n: site["value"] for n, site in tr.items() if site["type"] == "deterministic"}

    def _args(self, api, args=(), kwargs=None):
        """The model's arguments for `api`: those of the guide's prototype (as NumPyro's guides,
        whose `sample_posterior` does not use new ones); with none yet, `args`/`kwargs` set it up
        (as the guide's first run would).

        **Raises:** `AutoGuideError` when there is neither."""
        if self._prototype_args is None and (args or kwargs):
            self._setup_prototype(*args, **(kwargs or {}))
        if self._prototype_args is not None:
            return self._prototype_args
        raise AutoGuideError(f"`{type(self).__name__}.{api}` needs the model's arguments, which "
                             f"the guide learns when it first runs (`SVI.init`/`SVI.run`, or "
                             f"`trace(seed(guide, key)).get_trace(*args)`): run it once first.")

    def _compiled(self, what, build, args, kwargs):
        structure, dynamic = split_cache_key(f"effppl.infer.autoguide.{type(self).__name__}",
                                             args, kwargs)
        fn = cached(("autoguide", what, self, structure), lambda: jax.jit(build(structure)))
        return fn, dynamic

    def _postprocess(self, values: dict, params: dict, batch_ndim: int = 0,
                     model_args=None, api="median", constrained=False) -> dict:
        """The model's latent sites at the unconstrained `values` (or, with `constrained`, at
        `values` as they are), constrained, with `batch_ndim` leading batch axes (full size along
        subsampled plates), and its deterministic sites there (`_deterministic`; not when a
        latent site sits in a subsampled plate, whose full-size values the model, which
        subsamples, cannot take). The model runs at `model_args` (`(args, kwargs)`), by default
        the guide's prototype's (`_args`).

        **Raises:** `AutoGuideError` for a latent site in a subsampled plate when some support
        depends on other values (the model, run to find it, has subsample sizes)."""
        from effppl.handlers._basic import _analyzed

        args, kwargs = model_args if model_args is not None else self._args(api)

        def build(structure):
            def postprocess(values, params, dynamic):
                a, kw = structure.rebuild(dynamic)
                analysis = _analyzed(self.model, a, kw)
                sites = self._latent_sites(a, kw, analysis)
                local = [n for n, latent in sites.items() if latent.subsampled]
                if local and not constrained and _fixed_supports(sites) is None:
                    raise AutoGuideError(
                        f"effppl.infer.autoguide.{type(self).__name__}: site `{local[0]}` "
                        f"sits in a subsampled plate and the model has a support that depends "
                        f"on other values, so its full-size values cannot be mapped to their "
                        f"supports.")

                def one(v):
                    if not constrained:
                        v = self._constrain(a, kw, v, sites)[0]
                    if local:
                        return v
                    return {**v, **self._deterministic(a, kw, v, params, analysis)}
                for _ in range(batch_ndim):
                    one = jax.vmap(one)
                return one(values)
            return postprocess

        fn, dynamic = self._compiled(("postprocess", batch_ndim, constrained), build, args,
                                     kwargs)
        return fn(values, dict(params), dynamic)

    def sample_posterior(self, rng_key, params, *args, sample_shape=(), **kwargs) -> dict:
        """Draws of the model's latent sites from the guide at `params`, and the model's
        deterministic sites at them (as NumPyro's): dict name -> array `(*sample_shape,
        *site_shape)` (sites in loops: `(*sample_shape, T, ...)`). New `*args, **kwargs` are
        not used, as NumPyro's: the guide's prototype fixes the latent sites and the model's
        arguments (they set it up when the guide has none yet).

        **Raises:** `MissingParamError` (a `KeyError`) naming a guide's param missing from
        `params`; `ParamTypeError` (a `TypeError`) naming a value that is no array of numbers;
        `AutoGuideError` naming a param of the wrong shape."""
        from effppl import handlers
        from effppl.handlers._basic import _analyzed

        self._checked_sites("sample_posterior", params, args, kwargs)
        args, kwargs = self._args("sample_posterior", args, kwargs)
        sample_shape = tuple(sample_shape)
        n = math.prod(sample_shape)

        def build(structure):
            def draw(keys, params, dynamic):
                a, kw = structure.rebuild(dynamic)
                analysis = _analyzed(self.model, a, kw)

                def one(key):
                    guide = handlers.seed(handlers.substitute(self, data=params), key)
                    tr = handlers.trace(guide).get_trace(*a, **kw)
                    values = {name: s["value"] for name, s in tr.items()
                              if s["type"] == "sample" and not name.startswith("_")}
                    return {**values, **self._deterministic(a, kw, values, params, analysis)}
                return jax.vmap(one)(keys)
            return draw

        fn, dynamic = self._compiled("sample_posterior", build, args, kwargs)
        key = jax.random.key_data(rng_key) if jnp.issubdtype(
            getattr(rng_key, "dtype", None), jax.dtypes.prng_key) else rng_key
        out = fn(jax.random.split(key, max(n, 1)), params, dynamic)
        return jax.tree.map(lambda x: x[:n].reshape(sample_shape + x.shape[1:]), out)
