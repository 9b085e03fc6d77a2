"""Reparameterizers that change a latent's coordinates with a fixed transform: NumPyro's
`UnitJacobianReparam` (`HaarReparam`, `DiscreteCosineReparam`), `ExplicitReparam`,
`ProjectedNormalReparam` and `CircularReparam`, written with effppl's `sample` and `factor`.

Each is called as `reparam(name, fn, obs) -> (None, value)` (NumPyro's protocol, see
`_reparam.py`): it draws one auxiliary site and returns the site's value as a deterministic
function of it. The transforms are NumPyro's (`numpyro.distributions.transforms`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions import biject_to, constraints
from numpyro.distributions.transforms import (
    ComposeTransform,
    DiscreteCosineTransform,
    HaarTransform,
    Transform,
)
from numpyro.distributions.util import safe_normalize

from ..handlers.internal import SiteError, factor, sample
from ._reparam import Reparam, _latent_only

__all__ = ["UnitJacobianReparam", "HaarReparam", "DiscreteCosineReparam", "ExplicitReparam",
           "ProjectedNormalReparam", "CircularReparam"]


class UnitJacobianReparam(Reparam):
    """Draw the site in the space `transform(biject_to(support).inv(x))` (a transform whose
    Jacobian determinant is one, so the model's density is unchanged) as the auxiliary site
    `{name}_{suffix}`, and set the site to its inverse (NumPyro's `UnitJacobianReparam`).

    **Arguments:** `transform`: a `numpyro.distributions.transforms.Transform` of unit Jacobian
    (e.g. `HaarTransform`); `suffix`: the auxiliary site's suffix.

    **Raises:** `SiteError` (when the model runs) for an observed site.

    **Example:** `reparam(model, config={"x": UnitJacobianReparam(HaarTransform())})`.

    **References:** NumPyro's `numpyro.infer.reparam.UnitJacobianReparam`.
    """

    def __init__(self, transform: Transform, suffix: str = "transformed"):
        if not isinstance(transform, Transform):
            raise TypeError(f"effppl.infer.reparam.{type(self).__name__}(transform=...) expected "
                            f"a numpyro Transform, but got {type(transform).__name__}.")
        self.transform, self.suffix = transform, suffix

    def __call__(self, name, fn, obs):
        _latent_only(type(self).__name__, name, obs)
        fn, expand_shape, event_dim = self._unwrap(fn)
        transform = ComposeTransform([biject_to(fn.support).inv, self.transform])
        base_event_dim = max(event_dim, self.transform.domain.event_dim)
        x = sample(f"{name}_{self.suffix}", dist.TransformedDistribution(
            self._wrap(fn, expand_shape, base_event_dim), transform))
        return None, transform.inv(x)


class HaarReparam(UnitJacobianReparam):
    """Haar wavelet coordinates along the event dimension `dim` (NumPyro's `HaarReparam`):
    the auxiliary site is `{name}_haar`. For sequential latents (a random walk along a time
    axis, `.to_event(1)`), whose posterior is then closer to diagonal for diagonal guides and
    mass matrices.

    **Arguments:** `dim`: negative int, the axis (counted from the right); `flip`: reverse the
    axis first.

    **References:** NumPyro's `HaarReparam`; Pyro's `HaarReparam`.
    """

    def __init__(self, dim: int = -1, flip: bool = False):
        super().__init__(HaarTransform(dim=dim, flip=flip), suffix="haar")


class DiscreteCosineReparam(UnitJacobianReparam):
    """Discrete cosine (DCT-II) coordinates along the event dimension `dim` (NumPyro's
    `DiscreteCosineReparam`): the auxiliary site is `{name}_dct`.

    **Arguments:** `dim`: negative int, the axis; `smooth`: 0 maps white noise to white noise,
    1 Brownian noise to white noise, any real number allowed.

    **References:** NumPyro's `DiscreteCosineReparam`; Pyro's `DiscreteCosineReparam`.
    """

    def __init__(self, dim: int = -1, smooth: float = 0.0):
        super().__init__(DiscreteCosineTransform(dim=dim, smooth=smooth), suffix="dct")


class ExplicitReparam(Reparam):
    """Draw `transform(x)` as the auxiliary site `{name}_base` and set the site to its inverse
    (NumPyro's `ExplicitReparam`): the density is the model's, seen through `transform`.

    **Arguments:** `transform`: a `Transform`, or a list of them (composed).
    """

    def __init__(self, transform):
        if isinstance(transform, Iterable) and all(isinstance(t, Transform) for t in transform):
            transform = ComposeTransform(list(transform))
        if not isinstance(transform, Transform):
            raise TypeError(f"effppl.infer.reparam.ExplicitReparam(transform=...) expected a "
                            f"numpyro Transform or a list of them, but got "
                            f"{type(transform).__name__}.")
        self.transform = transform

    def __call__(self, name, fn, obs):
        _latent_only("ExplicitReparam", name, obs)
        x = sample(f"{name}_base", dist.TransformedDistribution(fn, self.transform))
        return None, self.transform.inv(x)


class ProjectedNormalReparam(Reparam):
    """Draw a `ProjectedNormal` site as `{name}_normal ~ Normal(0, 1)` of its concentration's
    shape and set it to `normalize(x + concentration)` (NumPyro's `ProjectedNormalReparam`):
    the site's density needs no normalising constant, so HMC and autoguides can handle it.

    **Raises:** `SiteError` (when the model runs) for an observed site or another distribution.
    """

    def __call__(self, name, fn, obs):
        _latent_only("ProjectedNormalReparam", name, obs)
        fn, expand_shape, event_dim = self._unwrap(fn)
        if not isinstance(fn, dist.ProjectedNormal):
            raise SiteError(f"effppl.infer.reparam.ProjectedNormalReparam: site `{name}` has a "
                            f"{type(fn).__name__}, not a ProjectedNormal.")
        noise = dist.Normal(jnp.zeros(jnp.shape(fn.concentration)), 1.0).to_event(1)
        x = sample(f"{name}_normal", self._wrap(noise, expand_shape, event_dim))
        return None, safe_normalize(x + fn.concentration)


class CircularReparam(Reparam):
    """Draw a site of circular support (`VonMises`, `SineSkewed`, ...) as the unbounded site
    `{name}_unwrapped` (an improper uniform on the reals), set it to that value wrapped into
    `[-pi, pi)`, and add the site's log density as the factor `{name}_factor` (NumPyro's
    `CircularReparam`): HMC then moves freely around the circle.

    **Raises:** `SiteError` (when the model runs) for an observed site or a support that is not
    `constraints.circular`.
    """

    def __call__(self, name, fn, obs):
        support = fn.support
        if isinstance(support, constraints.independent):
            support = support.base_constraint
        if support is not constraints.circular:
            raise SiteError(f"effppl.infer.reparam.CircularReparam: site `{name}` has a "
                            f"{type(fn).__name__} with support {support}, not "
                            f"`constraints.circular`.")
        _latent_only("CircularReparam", name, obs)
        unwrapped = sample(f"{name}_unwrapped",
                           dist.ImproperUniform(constraints.real, fn.batch_shape, fn.event_shape))
        value = jnp.remainder(unwrapped + math.pi, 2 * math.pi) - math.pi
        factor(f"{name}_factor", fn.log_prob(value))
        return None, value
