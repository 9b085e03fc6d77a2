"""Optimisers for SVI: optax `GradientTransformation`s, and NumPyro's `numpyro.optim` objects
(which hold the parameters in their state), behind one small interface."""

from __future__ import annotations

import dataclasses
from typing import Any

import optax

from .._errors import EffpplError

__all__ = ["Optimizer", "as_optimizer"]


class OptimizerError(EffpplError, TypeError):
    """`SVI` got something that is not an optimiser."""


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """`init(params) -> state`, `update(grads, state) -> state`, `get_params(state) -> params`
    over a dict of unconstrained parameters. Hashable: it keys SVI's compiled functions."""

    optim: Any

    def _is_optax(self):
        return not hasattr(self.optim, "get_params")

    def init(self, params):
        if self._is_optax():
            return params, self.optim.init(params)
        return self.optim.init(params)

    def update(self, grads, state):
        if self._is_optax():
            params, opt_state = state
            updates, opt_state = self.optim.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state
        return self.optim.update(grads, state)

    def get_params(self, state):
        if self._is_optax():
            return state[0]
        return self.optim.get_params(state)


def as_optimizer(optim, api: str = "effppl.infer.SVI") -> Optimizer:
    """`optim` (an optax `GradientTransformation` or a `numpyro.optim` optimiser) wrapped.

    **Raises:** `OptimizerError` for anything else.
    """
    if callable(getattr(optim, "init", None)) and callable(getattr(optim, "update", None)):
        return Optimizer(optim)  # optax's transformations (with or without extra args), NumPyro's
    raise OptimizerError(f"`{api}(model, guide, optim, loss)` expected an optax "
                         f"GradientTransformation (e.g. `optax.adam(1e-2)`) or a numpyro.optim "
                         f"optimiser, but got {type(optim).__name__}.")
