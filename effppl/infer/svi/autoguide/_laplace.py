"""`AutoLaplaceApproximation`: MAP in unconstrained space, then the normal approximation whose
covariance is the inverse Hessian of the negative log joint there (NumPyro's)."""

from __future__ import annotations

import math
import warnings

import jax
import jax.core
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions.util import cholesky_of_inverse

from ....handlers import internal as ppl
from ....handlers import potential_energy, seed
from ..._init import init_to_uniform
from ._continuous import AutoContinuous
from ._errors import AutoGuideError

__all__ = ["AutoLaplaceApproximation"]


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
        loc = ppl.param(f"{self.prefix}_loc", flat_init)
        return dist.Delta(loc, event_dim=1)

    def _param_shapes(self, size):
        return {"loc": (size,)}

    def _laplace(self, params, api):
        """`(posterior, positive_definite)`: `MultivariateNormal(loc, scale_tril)` with
        `scale_tril` the Cholesky factor of the inverse Hessian of the potential energy at `loc`
        (the model at the guide's prototype's arguments, as NumPyro's), 0 where the Hessian is
        not positive definite; `positive_definite` is None when `loc` is traced."""
        args, kwargs = self._args(api)
        layout = self._layout_now()
        hessian_fn = self.hessian_fn or (lambda f, x: jax.hessian(f)(x))

        # a site the guide does not cover (hidden by `block`, as in an AutoGuideList part) is
        # drawn once, with a fixed key, and held fixed in the Hessian
        model = seed(self.model, jax.random.PRNGKey(0))

        def build(structure):
            def precision(loc, dynamic):
                a, kw = structure.rebuild(dynamic)
                return hessian_fn(
                    lambda x: potential_energy(model, a, kw, self._unpack(x, layout)), loc)
            return precision

        fn, dynamic = self._compiled("laplace_hessian", build, args, kwargs)
        loc = params[f"{self.prefix}_loc"]
        scale_tril = cholesky_of_inverse(fn(loc, dynamic))
        ok = None if isinstance(scale_tril, jax.core.Tracer) else \
            not bool(jnp.any(jnp.isnan(scale_tril)))
        scale_tril = jnp.where(jnp.isnan(scale_tril), 0.0, scale_tril)
        return dist.MultivariateNormal(loc, scale_tril=scale_tril, validate_args=False), ok

    def _warn_singular(self, api):
        warnings.warn(f"effppl.infer.autoguide.AutoLaplaceApproximation.{api}: the Hessian of "
                      f"log posterior (unconstrained) at `{self.prefix}_loc` is not negative "
                      f"definite (not a MAP point?), so the posterior is the point "
                      f"`{self.prefix}_loc` (scale_tril 0), as in NumPyro. Fit longer, or use "
                      f"AutoNormal.", UserWarning, stacklevel=3)

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
