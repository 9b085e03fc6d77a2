"""`lift`: turn param sites into sample sites drawn from a prior (NumPyro's `lift`)."""

from __future__ import annotations

import numpyro.distributions as dist

from ..primitives import param_op, sample
from ._handler import Handler, forward_param


class lift(Handler):
    """Make the param sites of `fn` random: each param site named in `prior` becomes a latent
    sample site of the same name drawn from its prior (its `init_value` is not used).

    **Arguments:** `fn` (model); `prior`: a distribution (for every param site) or a dict
    param name -> distribution (other params stay params).

    **Raises:** `TypeError` when `prior` is neither.

    **Example:** `trace(seed(lift(model, prior={"w": dist.Normal(0.0, 1.0)}), 0)).get_trace(x)`
    gives site `w` of type `"sample"`.

    **References:** NumPyro's `numpyro.handlers.lift`; Pyro's `poutine.lift`.
    """

    def __init__(self, fn=None, prior=None):
        super().__init__(fn)
        if not isinstance(prior, (dist.Distribution, dict)):
            raise TypeError(f"effppl.handlers.lift(fn, prior=...) expected a distribution or a "
                            f"dict param name -> distribution, but got {type(prior).__name__}.")
        self.prior = prior

    def clauses(self):
        def param(params, msg, *, resume, name, **static):
            prior = self.prior.get(name) if isinstance(self.prior, dict) else self.prior
            if not isinstance(prior, dist.Distribution):
                return resume(params, forward_param(msg, name=name, **static))
            return resume(params, sample(name, prior))
        return {param_op: param}
