"""Optimisers for SVI: optax `GradientTransformation`s, and optimisers with NumPyro's interface
(`effppl.optim`'s, NumPyro's `numpyro.optim`'s; they hold the parameters in their state), behind
one small interface."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpyro.optim
import optax
from jax.example_libraries import optimizers

from ...optim import OptimizerError, _NumPyroOptim

__all__ = ["Optimizer", "ExampleLibrariesOptim", "as_optimizer", "OptimizerError"]


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """`init(params) -> state`, `update(grads, state) -> state`, `get_params(state) -> params`
    over a dict of unconstrained parameters. Hashable: it keys SVI's compiled functions."""

    optim: Any

    def _is_optax(self):
        return not hasattr(self.optim, "get_params")

    def step(self, objective, state, forward_mode: bool = False):
        """One step on `objective(params) -> scalar`: `(loss, grads, new_state)`, the loss and
        gradient at the params before the step. An optimiser that does not step along the
        gradient (`Minimize`: `eval_and_update` of its own) gives `grads=None`."""
        if not self._is_optax() and _steps_itself(self.optim):
            (loss, _), state = self.optim.eval_and_update(lambda p: (objective(p), None), state,
                                                          forward_mode_differentiation=forward_mode)
            return loss, None, state
        params = self.get_params(state)
        if forward_mode:
            loss, grads = objective(params), jax.jacfwd(objective)(params)
        else:
            loss, grads = jax.value_and_grad(objective)(params)
        return loss, grads, self.update(grads, state, loss)

    def init(self, params):
        if self._is_optax():
            return params, self.optim.init(params)
        return self.optim.init(params)

    def update(self, grads, state, value):
        if self._is_optax():
            params, opt_state = state
            updates, opt_state = optax.with_extra_args_support(self.optim).update(
                grads, opt_state, params, value=value)
            return optax.apply_updates(params, updates), opt_state
        if getattr(self.optim, "update_with_value", False):
            return self.optim.update(grads, state, value=value)
        return self.optim.update(grads, state)

    def get_params(self, state):
        if self._is_optax():
            return state[0]
        return self.optim.get_params(state)


def _steps_itself(optim) -> bool:
    """Whether `optim` overrides NumPyro's gradient-step `eval_and_update` (`Minimize` does)."""
    method = getattr(type(optim), "eval_and_update", None)
    return method is not None and method not in (numpyro.optim._NumPyroOptim.eval_and_update,
                                                 _NumPyroOptim.eval_and_update)


@dataclasses.dataclass(frozen=True)
class ExampleLibrariesOptim:
    """A `jax.example_libraries.optimizers` triple `(init_fn, update_fn, params_fn)` behind
    NumPyro's optimiser interface (its state: `(step, the triple's state)`), as NumPyro's SVI
    takes one."""

    init_fn: Any
    update_fn: Any
    params_fn: Any

    def init(self, params):
        return jax.numpy.array(0), self.init_fn(params)

    def update(self, g, state):
        i, opt_state = state
        return i + 1, self.update_fn(i, g, opt_state)

    def get_params(self, state):
        return self.params_fn(state[1])


def as_optimizer(optim, api: str = "effppl.infer.SVI") -> Optimizer:
    """`optim` (an optax `GradientTransformation`, a `numpyro.optim` optimiser, or a
    `jax.example_libraries.optimizers` triple such as `optimizers.adam(1e-2)`) wrapped.

    **Raises:** `OptimizerError` for anything else.
    """
    if isinstance(optim, type):
        raise OptimizerError(f"`{api}(model, guide, optim, loss)` expected an optimiser object, "
                             f"but got the class {optim.__name__}: create one (e.g. "
                             f"`{optim.__name__}(step_size=1e-2)`, or `optax.adam(1e-2)`).")
    if isinstance(optim, optimizers.Optimizer):
        return Optimizer(ExampleLibrariesOptim(*optim))
    if callable(getattr(optim, "init", None)) and callable(getattr(optim, "update", None)):
        return Optimizer(optim)  # optax's transformations (with or without extra args), NumPyro's
    raise OptimizerError(f"`{api}(model, guide, optim, loss)` expected an optax "
                         f"GradientTransformation (e.g. `optax.adam(1e-2)`), a numpyro.optim "
                         f"optimiser or a jax.example_libraries.optimizers one, but got "
                         f"{type(optim).__name__}.")
