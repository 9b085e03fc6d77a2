"""`AutoSurrogateLikelihoodDAIS`: `AutoDAIS` whose annealing follows a cheap surrogate of the
model's density (NumPyro's), so that the guide does not read the data and the model can be
subsampled."""

from __future__ import annotations

import jax

from .... import handlers
from ....handlers import internal as ppl
from ....handlers import unconstrained_log_density
from ..._init import init_to_uniform
from ._dais import AutoDAIS
from ._errors import AutoGuideError

__all__ = ["AutoSurrogateLikelihoodDAIS"]


class AutoSurrogateLikelihoodDAIS(AutoDAIS):
    """`AutoDAIS` whose K annealed HMC steps move towards a user's surrogate of the model's
    posterior instead of the model's own (NumPyro's `AutoSurrogateLikelihoodDAIS`, Jankowiak and
    Phan 2022): `surrogate_model()`, with no arguments, samples the model's global latent
    sites and replaces the full likelihood by a cheap one (e.g. a weighted sum over a small
    subset of the data, the weights its own `param`s, learned with the guide). The guide then
    reads no data, so the model may subsample its plates (which `AutoDAIS` refuses); the ELBO
    is still the model's (the surrogate only shapes the guide).

    **Arguments:** `model`; `surrogate_model`: a callable of no arguments with the same latent
    sites (names, supports, shapes) as the model; the other arguments are `AutoDAIS`'s (`K`
    default 4, `eta_init`, `eta_max`, `gamma_init`, `prefix`, `base_dist`, `init_loc_fn`,
    `init_scale`, `forward_mode_differentiation`).

    **Params:** `AutoDAIS`'s, and the surrogate's own `param` sites under their names, at the
    initial values and constraints the surrogate gives them (found by a first, blocked run of
    it with a fixed key).

    **Raises:** `AutoDAIS`'s errors; when the guide first runs, `AutoGuideError` (a
    `ValueError`) for a `surrogate_model` that is not callable (accepted when the guide is built,
    as by NumPyro, so that `AutoGuideList.append` gives NumPyro's refusal), for a latent site in a
    subsampled plate (a local latent site: this guide is for global ones, as NumPyro's), and
    the surrogate's own errors (a latent site it lacks is an unknown parameter of its log
    density).

    **References:** NumPyro's `AutoSurrogateLikelihoodDAIS`; Jankowiak and Phan (2022),
    "Surrogate Likelihoods for Variational Annealed Importance Sampling", ICML; Geffner and
    Domke (2021); Zhang et al. (2021) (see `AutoDAIS`).
    """

    def __init__(self, model, surrogate_model, *, K=4, eta_init=0.01, eta_max=0.1,
                 gamma_init=0.9, prefix="auto", base_dist="diagonal",
                 init_loc_fn=init_to_uniform, init_scale=0.1,
                 forward_mode_differentiation=False):
        super().__init__(model, K=K, base_dist=base_dist, eta_init=eta_init, eta_max=eta_max,
                         gamma_init=gamma_init, prefix=prefix, init_loc_fn=init_loc_fn,
                         init_scale=init_scale,
                         forward_mode_differentiation=forward_mode_differentiation)
        self.surrogate_model = surrogate_model

    def _check_no_subsampling(self, args, kwargs):
        """Nothing to check: the annealing reads the surrogate, not the (subsampled) data."""

    def _surrogate_params(self) -> dict:
        """The surrogate's `param` sites, registered as the guide's, `{name: value}`."""
        traced = handlers.trace(handlers.seed(self.surrogate_model, jax.random.key(0)))
        options = {}  # name -> the param's constraint and event_dim (static)

        def initial_values():
            prototype = traced.get_trace()
            params = {n: s for n, s in prototype.items() if s["type"] == "param"}
            options.update({n: s.get("kwargs") or {} for n, s in params.items()})
            return {n: s["value"] for n, s in params.items()}

        values = handlers.block(initial_values)()  # (hidden from the guide's handlers)
        return {name: ppl.param(name, value, **options[name]) for name, value in values.items()}

    def _target(self, layout, args, kwargs):
        """The surrogate's log density (Jacobians included) of the flat unconstrained latent
        vector, at the guide's values of its params."""
        if not callable(self.surrogate_model):  # (built without one, as NumPyro allows)
            raise AutoGuideError(
                f"effppl.infer.autoguide.AutoSurrogateLikelihoodDAIS(model, surrogate_model="
                f"{self.surrogate_model!r:.60}) expected a callable surrogate model of no "
                f"arguments.")
        params = self._surrogate_params()
        surrogate = handlers.substitute(self.surrogate_model, data=params)

        def target(x):
            return handlers.block(lambda: unconstrained_log_density(
                surrogate, (), {}, self._unpack(x, layout)))()
        return target
