"""`NeuTraReparam`: neural-transport reparametrization (Hoffman et al., 2019) with a trained
`AutoContinuous` guide, as NumPyro's."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.distributions.transforms import AffineTransform, LowerCholeskyAffine, biject_to
from numpyro.distributions.util import sum_rightmost

from ...handlers import reparam
from ...handlers.internal import SiteError, analyze_model, factor, get_mask, model_name, sample
from .._reparam import Reparam
from .autoguide._batched import _AutoBatched
from .autoguide._continuous import AutoContinuous
from .autoguide._errors import AutoGuideError
from .autoguide._flows import _AutoFlow


class _FromShared(Reparam):
    """One site's share of the warped latent: its unconstrained value `u`, mapped to the site's
    support, with the site's log density (and Jacobian) as the factor `_{name}_log_prob`."""

    def __init__(self, u):
        self.u = u

    def __call__(self, name, fn, obs):
        if obs is not None:
            raise SiteError(f"effppl.infer.reparam.NeuTraReparam: site `{name}` is observed; "
                            f"only latent sites are reparametrized (as in NumPyro).")
        transform = biject_to(fn.support)
        expected = tuple(transform.inverse_shape(fn.shape()))  # (a simplex: one entry fewer)
        if jnp.shape(self.u) != expected:
            raise SiteError(f"effppl.infer.reparam.NeuTraReparam: site `{name}` has "
                            f"unconstrained shape {expected} here, but the guide's latent gives "
                            f"it {jnp.shape(self.u)} (a site inside a loop is reparametrized "
                            f"whole: not supported).")
        value = transform(self.u)
        if get_mask() is not False:
            log_det = transform.log_abs_det_jacobian(self.u, value)
            log_det = sum_rightmost(log_det, jnp.ndim(log_det) - jnp.ndim(value)
                                    + len(fn.event_shape))
            factor(f"_{name}_log_prob", fn.log_prob(value) + log_det)
        return None, value


class NeuTraReparam:
    """Reparametrize every latent site of a model through a trained `AutoContinuous` guide
    (`AutoDiagonalNormal`, `AutoMultivariateNormal`, `AutoLowRankMultivariateNormal`,
    `AutoLaplaceApproximation`, `AutoIAFNormal`, `AutoBNAFNormal`): the model draws one shared
    latent `{prefix}_shared_latent` from the guide's standard-normal base, maps it by the
    guide's transform (affine, or the flow of a flow guide) to the
    unconstrained latent vector, and each site takes its slice (mapped to its support). HMC on
    the warped model sees the posterior as the guide flattened it.

    **Arguments:** `guide`: an `AutoContinuous` guide that `SVI` has run (its latent layout is
    known); `params`: its fitted params (`SVIRunResult.params`).

    **Raises:** `TypeError` for another guide (the batched ones too, as NumPyro's fail there); `MissingParamError` (a `KeyError`) naming a param
    of the guide that `params` lack; `ParamTypeError` (a `TypeError`) naming a value that is no
    array of numbers; `AutoGuideError` for `params` that are not a dict or hold a
    param of the wrong shape (`auto_loc`: `(D,)`, ...; D the guide's latent size), for a model (when it runs) that lacks some of the guide's latent sites (a model other
    than the guide's), and for draws of another size than D in `transform_sample`; `SiteError`
    (when the model runs) for an observed site given in the guide, or a site inside a loop.

    **References:** Hoffman et al. (2019), "NeuTra-lizing Bad Geometry in Hamiltonian Monte Carlo
    Using Neural Transport"; NumPyro's `NeuTraReparam`.

    Example: fit a diagonal normal guide, then run NUTS on the model warped by it and map the
    draws back to the model's sites.

        >>> import jax, jax.numpy as jnp, optax
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import MCMC, NUTS, SVI, Trace_ELBO
        >>> from effppl.infer.autoguide import AutoDiagonalNormal
        >>> from effppl.infer.reparam import NeuTraReparam
        >>> def model():
        ...     a = effppl.sample("a", dist.Normal(0.0, 1.0))
        ...     effppl.sample("b", dist.Normal(a, 0.5))
        >>> guide = AutoDiagonalNormal(model)
        >>> fit = SVI(model, guide, optax.adam(0.05), Trace_ELBO()).run(
        ...     jax.random.key(0), 500, progress_bar=False)
        >>> neutra = NeuTraReparam(guide, fit.params)
        >>> mcmc = MCMC(NUTS(neutra.reparam(model)), num_warmup=200, num_samples=200,
        ...             progress_bar=False)
        >>> mcmc.run(jax.random.key(1))
        >>> z = mcmc.get_samples()["auto_shared_latent"]       # (draws, latent size)
        >>> draws = neutra.transform_sample(z)
        >>> z.shape, draws["a"].shape, draws["b"].shape
        ((200, 2), (200,), (200,))
    """

    def __init__(self, guide, params):
        if not isinstance(guide, AutoContinuous):
            raise TypeError(f"effppl.infer.reparam.NeuTraReparam expected an AutoContinuous guide "
                            f"(AutoDiagonalNormal, ...), but got {type(guide).__name__}.")
        if isinstance(guide, _AutoBatched):  # NumPyro's has no base distribution for them either
            raise TypeError(f"effppl.infer.reparam.NeuTraReparam does not support "
                            f"{type(guide).__name__} (nor does NumPyro's): use "
                            f"AutoMultivariateNormal or AutoLowRankMultivariateNormal.")
        self._layout = guide._layout(guide._checked_sites(
            "NeuTraReparam", params,
            where=f"effppl.infer.reparam.NeuTraReparam({type(guide).__name__}, params)"))
        self.guide, self.params = guide, params
        posterior = guide.get_posterior(params)
        if isinstance(guide, _AutoFlow):  # a flow guide: its flow, not an affine map
            self.transform = guide.get_transform(params)
        elif isinstance(posterior, dist.Normal):
            self.transform = AffineTransform(posterior.loc, posterior.scale,
                                             domain=constraints.real_vector)
        else:
            self.transform = LowerCholeskyAffine(posterior.mean, posterior.scale_tril)

    def get_base_dist(self):
        """The shared latent's distribution: standard normal, of the guide's latent size."""
        size = sum(n for _, _, n in self._layout)
        return dist.Normal(jnp.zeros(size), 1.0).to_event(1)

    def reparam(self, fn):
        """`fn` with its latent sites reparametrized (NumPyro's `neutra.reparam(model)`)."""
        @functools.wraps(fn)
        def warped(*args, **kwargs):
            z = sample(f"{self.guide.prefix}_shared_latent", self.get_base_dist().mask(False))
            x = self.transform(z)
            if get_mask() is not False:
                factor(f"_{self.guide.prefix}_shared_latent_log_det",
                       self.transform.log_abs_det_jacobian(z, x))
            shares = self.guide._unpack(x, self._layout)
            self._check_model(fn, args, kwargs)
            config = {name: _FromShared(u) for name, u in shares.items()}
            return reparam(fn, config=config)(*args, **kwargs)
        return warped

    def _check_model(self, fn, args, kwargs):
        """An `AutoGuideError` when `fn` lacks sample sites of the guide (another model)."""
        sites = {n for n, s in analyze_model(fn, args, kwargs).items() if s.type == "sample"}
        missing = [name for name, _, _ in self._layout if name not in sites]
        if missing:
            raise AutoGuideError(
                f"effppl.infer.reparam.NeuTraReparam.reparam: model `{model_name(fn)}` has no "
                f"sample site {', '.join(f'`{n}`' for n in missing)}, which the guide's latent "
                f"covers (its sites: {', '.join(n for n, _, _ in self._layout)}): the guide was "
                f"fitted to another model. Reparametrize the model the guide was fitted to.")

    def transform_sample(self, latent):
        """Draws of the shared latent (`(..., D)`) mapped to dict site -> constrained draws.

        **Raises:** `AutoGuideError` when the last axis of `latent` is not the guide's latent
        size D."""
        size = sum(n for _, _, n in self._layout)
        if jnp.ndim(latent) < 1 or jnp.shape(latent)[-1] != size:
            raise AutoGuideError(f"effppl.infer.reparam.NeuTraReparam.transform_sample(latent) "
                                 f"expected draws of the shared latent of shape (..., {size}), "
                                 f"but got shape {jnp.shape(latent)}.")
        x = self.transform(latent)
        return self.guide._postprocess(self.guide._unpack(x, self._layout), self.params,
                                       batch_ndim=jnp.ndim(latent) - 1)
