"""Reparameterizers: NumPyro's `LocScaleReparam` and `TransformReparam`, written with effppl's
`sample`, for `effppl.handlers.reparam`.

A reparameterizer is called as `reparam(name, fn, obs) -> (new_fn, value)` (NumPyro's
protocol): it draws auxiliary sites and returns `(None, value)`, the site's value as a
deterministic function of them, or `(fn, obs)` to leave the site alone.
"""

from __future__ import annotations

import inspect
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import numpyro.infer.reparam

from ..handlers.internal import RefusedSiteError, SiteError, param, sample


class Reparam(numpyro.infer.reparam.Reparam):
    """Base class of effppl's reparameterizers: NumPyro's `Reparam` (its `_unwrap` and `_wrap`),
    leaving the site alone unless a subclass says otherwise."""

    def __call__(self, name, fn, obs):
        return fn, obs


def _latent_only(kind, name, obs):
    if obs is not None:
        raise RefusedSiteError(f"effppl.infer.reparam.{kind}: site `{name}` is observed; "
                               f"{kind} does not support observe statements (only latent "
                               f"sites can be reparametrized, as in NumPyro).")


class LocScaleReparam(Reparam):
    """Decenter a location-scale site (`Normal`, `StudentT`, `Cauchy`, ...): draw
    `{name}_decentered ~ D(c * loc, scale**c)` and set `name = loc + scale**(1 - c) *
    (decentered - c * loc)`. `centered=0` is the non-centred parametrization, `1` leaves the
    site alone. `centered=None` learns it: the param site `{name}_centered` (initially 0.5, in
    the unit interval, of the site's event shape), fitted by `SVI` as in NumPyro.

    **Arguments:** `centered`: float in [0, 1], an array of them (one centering per element,
    broadcasting against the site's value), or None; `shape_params`: names of other
    parameters of the distribution passed through unchanged (e.g. `("df",)` for `StudentT`).

    **Raises:** `ValueError` for another `centered`; `SiteError` (a `ValueError`) naming the site
    and its distribution (when the model runs) for an observed site, a distribution whose
    support is not real (e.g. `LogNormal`, as NumPyro), without `loc` and `scale`, or one whose
    other parameters are not in `shape_params`.

    **References:** Gorinova, Moore and Hoffman (2020), "Automatic Reparameterisation of
    Probabilistic Programs"; NumPyro's `LocScaleReparam`.
    """

    def __init__(self, centered=None, shape_params=()):
        self.centered, self.shape_params = _centering(centered), tuple(shape_params)

    def __call__(self, name, fn, obs):
        _latent_only("LocScaleReparam", name, obs)
        support = fn.support
        if isinstance(support, dist.constraints.independent):
            support = support.base_constraint
        if support is not dist.constraints.real:  # as NumPyro: e.g. a LogNormal is not loc-scale
            raise SiteError(f"effppl.infer.reparam.LocScaleReparam: site `{name}` has a "
                            f"{type(fn).__name__} with support {support}, but LocScaleReparam "
                            f"applies to distributions with real support only (Normal, Cauchy, "
                            f"StudentT, ...; NumPyro's ValueError). For a `LogNormal`, "
                            f"reparametrize its log: `TransformReparam` on `TransformedDistribution"
                            f"(Normal(loc, scale), ExpTransform())` with `LocScaleReparam` on its "
                            f"`{name}_base`.")
        centered = self.centered
        if centered is not None and not isinstance(centered, jax.core.Tracer) \
                and np.all(np.asarray(centered) == 1):
            return fn, obs
        event_shape = fn.event_shape
        fn, expand_shape, event_dim = self._unwrap(fn)
        self._check_family(name, fn)
        if centered is None:  # learnt (by SVI): a param site in [0, 1], one per event element
            centered = param(f"{name}_centered", jnp.full(event_shape, 0.5),
                             constraint=dist.constraints.unit_interval)
        params = {key: getattr(fn, key) for key in self.shape_params}
        family: Any = fn  # a location-scale family (`_check_family`): it has `loc` and `scale`
        loc, scale = family.loc, family.scale
        if isinstance(centered, (int, float, np.generic)) and centered == 0:
            params["loc"], params["scale"] = jnp.zeros_like(loc), jnp.ones_like(scale)
        else:
            params["loc"], params["scale"] = loc * centered, scale ** centered
        decentered = sample(f"{name}_decentered",
                            self._wrap(type(fn)(**params), expand_shape, event_dim))
        return None, loc + jnp.power(scale, 1 - centered) * (decentered - centered * loc)

    def _check_family(self, name, fn):
        """A `SiteError` naming the site and its distribution unless `type(fn)(loc=, scale=,
        **shape_params)` rebuilds it."""
        family = type(fn).__name__
        if not (hasattr(fn, "loc") and hasattr(fn, "scale")):
            raise SiteError(f"effppl.infer.reparam.LocScaleReparam: site `{name}` has a {family}, "
                            f"which is not a location-scale distribution (it has no `loc` and "
                            f"`scale`); LocScaleReparam applies to Normal, Cauchy, Laplace, "
                            f"StudentT, ... Leave `{name}` out of the reparam config, or use "
                            f"`TransformReparam` on a TransformedDistribution.")
        unknown = [k for k in self.shape_params if not hasattr(fn, k)]
        if unknown:
            raise SiteError(f"effppl.infer.reparam.LocScaleReparam(shape_params="
                            f"{self.shape_params}): site `{name}`'s {family} has no parameter "
                            f"`{unknown[0]}`.")
        try:
            required = [p.name for p in inspect.signature(type(fn)).parameters.values()
                        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                               p.KEYWORD_ONLY)]
        except (TypeError, ValueError):
            return
        missing = tuple(p for p in required if p not in ("loc", "scale", *self.shape_params))
        if missing:
            raise SiteError(f"effppl.infer.reparam.LocScaleReparam: site `{name}` has a {family}, "
                            f"which also needs {', '.join(f'`{p}`' for p in missing)} besides "
                            f"`loc` and `scale`: pass `LocScaleReparam(..., shape_params="
                            f"{missing!r})` to carry them over.")


def _centering(centered):
    """`centered` checked: None, or a number or array of numbers in [0, 1] (NumPyro accepts
    arrays, one centering per element)."""
    if centered is None or isinstance(centered, jax.core.Tracer):
        return centered
    bad = isinstance(centered, (bool, np.bool_)) or not isinstance(
        centered, (int, float, np.generic, np.ndarray, jax.Array))
    if not bad:
        values = np.asarray(centered)
        bad = not np.issubdtype(values.dtype, np.number) or not np.all((values >= 0)
                                                                       & (values <= 1))
    if bad:
        raise ValueError(f"effppl.infer.reparam.LocScaleReparam(centered={centered!r:.60}) "
                         f"does not satisfy the constraint: it expected a number in [0, 1] "
                         f"(the unit interval), an array of them, or None.")
    return centered


class TransformReparam(Reparam):
    """Draw a `TransformedDistribution` site's base value as `{name}_base` and set the site to
    its transform (NumPyro's `TransformReparam`)."""

    def __call__(self, name, fn, obs):
        _latent_only("TransformReparam", name, obs)
        fn, expand_shape, event_dim = self._unwrap(fn)
        if not isinstance(fn, dist.TransformedDistribution):
            raise SiteError(f"effppl.infer.reparam.TransformReparam: site `{name}` has a "
                            f"{type(fn).__name__}, not a TransformedDistribution.")
        base_event_dim = event_dim
        for t in reversed(fn.transforms):
            base_event_dim += t.domain.event_dim - t.codomain.event_dim
        x = sample(f"{name}_base", self._wrap(fn.base_dist, expand_shape, base_event_dim))
        for t in fn.transforms:
            x = t(x)
        return None, x
