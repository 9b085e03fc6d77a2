"""What an autoguide gives after fitting: `median`, `quantiles` and `sample_posterior` map the
guide's params to the model's latent sites (constrained) and deterministic sites, at the
arguments of the guide's prototype, as NumPyro's; the params given are checked first (names,
shapes, supports), so a wrong dict is an error naming the param, not a wrong number.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .... import handlers
from ....effects.internal import describe_non_array
from ....handlers.internal import analyze_model, substitute_exactly
from ..._compile._cache import cached, split_cache_key
from ._errors import AutoGuideError, MissingParamError, ParamTypeError
from ._sites import fixed_supports

__all__ = ["GuidePostprocess"]


class GuidePostprocess:
    """The methods of `AutoGuide` used after fitting (a mixin of `AutoGuide`, whose model,
    latent sites (`_latent_sites`), prototype arguments (`_args`) and map to the supports
    (`_constrain`) they read). A subclass declares its params (`_expected_params`,
    `_param_support`) and may give `median`, `quantiles`, its own `sample_posterior`.
    """

    # What `AutoGuide` gives the mixin (declared here for readers and type checkers):
    model: Callable
    prefix: str
    _args: Callable[..., tuple]
    _latent_sites: Callable[..., dict]
    _constrain: Callable[..., tuple]

    def quantiles(self, params, quantiles) -> dict:
        """Marginal quantiles of the guide's posterior; a guide without a spread (`AutoDelta`)
        has none. **Raises:** `NotImplementedError` here, as NumPyro's base class."""
        raise NotImplementedError(f"{type(self).__name__} has no quantiles: its posterior is a "
                                  f"point (use `median`), or it does not define them.")

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
        if not any(site.type == "deterministic" for site in analysis.values()):
            return {}
        model_params = {n: v for n, v in params.items()
                        if n in analysis and analysis[n].type == "param"}
        model = substitute_exactly(self.model, data={**values, **model_params})
        tr = handlers.trace(handlers.seed(model, 0)).get_trace(*args, **kwargs)
        return {n: site["value"] for n, site in tr.items() if site["type"] == "deterministic"}

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
        args, kwargs = model_args if model_args is not None else self._args(api)

        def build(structure):
            def postprocess(values, params, dynamic):
                a, kw = structure.rebuild(dynamic)
                analysis = analyze_model(self.model, a, kw)
                sites = self._latent_sites(a, kw, analysis)
                local = [n for n, latent in sites.items() if latent.subsampled]
                if local and not constrained and fixed_supports(sites) is None:
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
        self._checked_sites("sample_posterior", params, args, kwargs)
        args, kwargs = self._args("sample_posterior", args, kwargs)
        sample_shape = tuple(sample_shape)
        n = math.prod(sample_shape)

        def build(structure):
            def draw(keys, params, dynamic):
                a, kw = structure.rebuild(dynamic)
                analysis = analyze_model(self.model, a, kw)

                def one(key):
                    guide = handlers.seed(substitute_exactly(self, data=params), key)
                    tr = handlers.trace(guide).get_trace(*a, **kw)
                    # the model's latent sites only: a guide's own sites (`_auto_latent`,
                    # AutoDAIS's `auto_z_0`, `auto_momentum`, `auto_factor`) are not the model's
                    values = {name: s["value"] for name, s in tr.items()
                              if s["type"] == "sample" and name in analysis
                              and analysis[name].type == "sample"}
                    return {**values, **self._deterministic(a, kw, values, params, analysis)}
                return jax.vmap(one)(keys)
            return draw

        fn, dynamic = self._compiled("sample_posterior", build, args, kwargs)
        key = jax.random.key_data(rng_key) if jnp.issubdtype(
            getattr(rng_key, "dtype", None), jax.dtypes.prng_key) else rng_key
        out = fn(jax.random.split(key, max(n, 1)), params, dynamic)
        return jax.tree.map(lambda x: x[:n].reshape(sample_shape + x.shape[1:]), out)
