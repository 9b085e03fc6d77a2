"""The batched normal guides over the flat latent vector (NumPyro's `AutoBatchedMultivariateNormal`
and `AutoBatchedLowRankMultivariateNormal`): the flat vector of `AutoContinuous` is viewed as a
`(*batch_shape, E)` array, one independent normal per batch member, each with a full or
low-rank-plus-diagonal covariance over its `E` values.

The view is NumPyro's: the flat vector (site by site, each raveled) is reshaped to `(*batch_shape,
D // B)`, `B = prod(batch_shape)`. With one latent site its rows are the site's batch members;
with several, the rows follow the flat order, not a plate index, exactly as NumPyro's do, so
params carry over between the two.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.distributions.transforms import ReshapeTransform

from ....handlers import internal as ppl
from ..._init import init_to_uniform
from ._continuous import AutoContinuous, AutoLowRankMultivariateNormal
from ._errors import AutoGuideError

__all__ = ["AutoBatchedMultivariateNormal", "AutoBatchedLowRankMultivariateNormal"]


def _count(value) -> bool:
    """Whether `value` is an int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


class _AutoBatched(AutoContinuous):
    """What both batched guides share: the batch shape read from the latent sites, the view of
    the flat latent vector as `(*batch_shape, E)`, and the maps between the two. A subclass
    gives `_batched(flat_init, batch_shape)` (the batched distribution, with its params),
    `_batched_posterior(params)` and `_batched_param_shapes(batch_shape, event_size)`."""

    def __init__(self, model, *, prefix, init_loc_fn, init_scale, batch_ndim):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn)
        if not _count(batch_ndim) or batch_ndim < 1:
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}(batch_ndim="
                                 f"{batch_ndim!r}) expected an int >= 1: the number of leading "
                                 f"dims that every latent site shares.")
        self.init_scale = self._positive("init_scale", init_scale)
        self.batch_ndim = batch_ndim

    def _layout(self, sites):
        layout = super()._layout(sites)
        batch, first = None, None
        for name, latent in sites.items():
            if latent.batch_ndim < self.batch_ndim:
                raise AutoGuideError(
                    f"effppl.infer.autoguide.{type(self).__name__}(batch_ndim={self.batch_ndim}):"
                    f" latent site `{name}` has shape {latent.shape} with {latent.batch_ndim} "
                    f"batch dim(s), fewer than batch_ndim. Every latent site needs batch_ndim "
                    f"leading batch dims (e.g. a plate around it), or use "
                    f"{type(self).__name__.replace('Batched', '')}.")
            shape = tuple(latent.shape[:self.batch_ndim])
            if batch is None:
                batch, first = shape, name
            elif shape != batch:
                raise AutoGuideError(
                    f"effppl.infer.autoguide.{type(self).__name__}(batch_ndim={self.batch_ndim}):"
                    f" inconsistent batch shapes: latent site `{name}` has leading dims "
                    f"{shape}, but site `{first}` has {batch}; every latent site must share the "
                    f"same batch shape (the first batch_ndim dims of its value).")
        return layout

    def _shape(self, layout) -> tuple:
        """`(batch_shape, E)` of the latent `layout` (`_layout`, so every site shares the batch
        shape)."""
        batch = tuple(layout[0][1][:self.batch_ndim])
        size = sum(n for _, _, n in layout)
        return batch, size // math.prod(batch)

    def _reshape(self, batch, event_size) -> ReshapeTransform:
        """The map from `(*batch, E)` to the flat latent vector `(D,)` (NumPyro's)."""
        return ReshapeTransform((math.prod(batch) * event_size,), batch + (event_size,))

    def _latent_dist(self, flat_init, layout):
        batch, event_size = self._shape(layout)
        batched = self._batched(flat_init.reshape(batch + (event_size,)), batch)
        return dist.TransformedDistribution(batched, self._reshape(batch, event_size))

    def _batched(self, init, batch):
        """The batched distribution (batch shape `batch`, event `(E,)`), its params made with
        `init` (`(*batch, E)`) as the initial loc."""
        raise NotImplementedError

    def _batched_posterior(self, params):
        """The batched distribution at `params`."""
        raise NotImplementedError

    def _batched_param_shapes(self, batch, event_size) -> dict:
        raise NotImplementedError

    def _expected_params(self, sites):
        batch, event_size = self._shape(self._layout(sites))
        return {f"{self.prefix}_{k}": shape
                for k, shape in self._batched_param_shapes(batch, event_size).items()}

    def _loc(self, params):
        return jnp.reshape(params[f"{self.prefix}_loc"], (-1,))

    def _marginals(self, params):
        posterior = self._batched_posterior(params)
        return (jnp.reshape(posterior.mean, (-1,)),
                jnp.reshape(jnp.sqrt(posterior.variance), (-1,)))

    def get_posterior(self, params):
        """The guide's distribution of the flat unconstrained latent vector `(D,)` at `params`:
        the batched normal mapped by the reshape from `(*batch_shape, E)` to `(D,)`. (NumPyro's
        batched guides raise `NotImplementedError` here.)"""
        loc = params[f"{self.prefix}_loc"]
        batch, event_size = tuple(jnp.shape(loc)[:-1]), jnp.shape(loc)[-1]
        return dist.TransformedDistribution(self._batched_posterior(params),
                                            self._reshape(batch, event_size))


class AutoBatchedMultivariateNormal(_AutoBatched):
    """Independent full-covariance normals, one per batch member, over the flat unconstrained
    latent vector viewed as `(*batch_shape, E)`: `batch_shape` is the first `batch_ndim` dims
    shared by every latent site (e.g. its plate), `E = D // prod(batch_shape)`, D the latent
    size. Cheaper than `AutoMultivariateNormal` (`B` matrices `E x E`, not one `D x D`) when the
    batch members are independent a posteriori.

    **Params:** `auto_loc` `(*batch_shape, E)`; `auto_scale_tril` `(*batch_shape, E, E)`
    (`scaled_unit_lower_cholesky`, initially `init_scale * I`). The flat vector is reshaped as
    NumPyro's: with several latent sites, a row holds the next `E` values in the flat order (site
    by site), not one plate index across sites.

    **Arguments:** `model`; `prefix`; `init_loc_fn` (as `AutoContinuous`); `init_scale` (float >
    0); `batch_ndim` (int >= 1, default 1).

    **Raises:** `AutoGuideError` for `batch_ndim` not an int >= 1 or `init_scale` not positive;
    when the guide first runs, an `AutoGuideError` naming the latent site with fewer than
    `batch_ndim` batch dims, or whose leading dims differ from another site's, and for a latent
    site in a subsampled plate (as `AutoContinuous`).

    `median` and `sample_posterior` are NumPyro's; `quantiles` (normal marginals) and
    `get_posterior` (the flat latent's distribution) are effppl's, where NumPyro's batched guides
    raise `NotImplementedError`.

    **References:** NumPyro's `AutoBatchedMultivariateNormal`.
    """

    scale_tril_constraint = constraints.scaled_unit_lower_cholesky

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, init_scale=0.1,
                 batch_ndim=1):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn, init_scale=init_scale,
                         batch_ndim=batch_ndim)

    def _batched(self, init, batch):
        loc = ppl.param(f"{self.prefix}_loc", init)
        eye = jnp.eye(init.shape[-1], dtype=init.dtype)
        scale_tril = ppl.param(f"{self.prefix}_scale_tril",
                               jnp.broadcast_to(eye * self.init_scale, batch + eye.shape),
                               constraint=self.scale_tril_constraint)
        return dist.MultivariateNormal(loc, scale_tril=scale_tril)

    def _batched_posterior(self, params):
        return dist.MultivariateNormal(params[f"{self.prefix}_loc"],
                                       scale_tril=params[f"{self.prefix}_scale_tril"])

    def _batched_param_shapes(self, batch, event_size):
        return {"loc": batch + (event_size,), "scale_tril": batch + (event_size, event_size)}

    def _param_support(self, name):
        return constraints.lower_cholesky if name == f"{self.prefix}_scale_tril" else None


class AutoBatchedLowRankMultivariateNormal(_AutoBatched):
    """Independent low-rank-plus-diagonal normals, one per batch member, over the flat
    unconstrained latent vector viewed as `(*batch_shape, E)` (as `AutoBatchedMultivariateNormal`):
    member `b` has covariance `S_b (W_b W_b^T + I) S_b`, `S_b = diag(scale_b)` (NumPyro's
    parametrization, as `AutoLowRankMultivariateNormal`).

    **Params:** `auto_loc` `(*batch_shape, E)`; `auto_cov_factor` `(*batch_shape, E, rank)`
    (`W`, initially 0); `auto_scale` `(*batch_shape, E)` (softplus-positive, initially
    `init_scale`). `rank` defaults to `round(sqrt(E))`.

    **Arguments:** as `AutoBatchedMultivariateNormal`, and `rank` (int >= 1, or None).

    **Raises:** as `AutoBatchedMultivariateNormal`; `AutoGuideError` for `rank` not an int >= 1
    (or None).

    `median` and `sample_posterior` are NumPyro's; `quantiles` and `get_posterior` are effppl's
    (NumPyro's batched guides raise `NotImplementedError` there).

    **References:** NumPyro's `AutoBatchedLowRankMultivariateNormal`.
    """

    scale_constraint = constraints.softplus_positive

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, init_scale=0.1,
                 rank=None, batch_ndim=1):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn, init_scale=init_scale,
                         batch_ndim=batch_ndim)
        if rank is not None and (not _count(rank) or rank < 1):
            raise AutoGuideError(f"effppl.infer.autoguide.AutoBatchedLowRankMultivariateNormal("
                                 f"rank={rank!r}) expected an int >= 1, or None for about "
                                 f"sqrt(E), E the size of one batch member.")
        self.rank = rank

    def _rank(self, event_size):
        return int(round(event_size ** 0.5)) if self.rank is None else self.rank

    def _batched(self, init, batch):
        event_size = init.shape[-1]
        loc = ppl.param(f"{self.prefix}_loc", init)
        factor = ppl.param(f"{self.prefix}_cov_factor",
                           jnp.zeros(init.shape + (self._rank(event_size),), init.dtype))
        scale = ppl.param(f"{self.prefix}_scale", jnp.full_like(init, self.init_scale),
                          constraint=self.scale_constraint)
        return self._posterior(loc, factor, scale)

    _posterior = staticmethod(AutoLowRankMultivariateNormal._posterior)  # batched as it is

    def _batched_posterior(self, params):
        p = self.prefix
        return self._posterior(params[f"{p}_loc"], params[f"{p}_cov_factor"],
                               params[f"{p}_scale"])

    def _batched_param_shapes(self, batch, event_size):
        return {"loc": batch + (event_size,), "cov_factor": batch + (event_size, None),
                "scale": batch + (event_size,)}

    def _param_support(self, name):
        return constraints.positive if name == f"{self.prefix}_scale" else None
