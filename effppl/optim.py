"""NumPyro's optimisers (`numpyro.optim`), on optax.

Each class takes NumPyro's arguments and has NumPyro's interface (`init`, `update`, `get_params`,
`eval_and_update`, `eval_and_stable_update`; the state is `(step, (params, optax_state))`), and
holds the optax `GradientTransformation` that does the same update as NumPyro's (which uses
`jax.example_libraries.optimizers`) as `.transformation`. A `step_size` may be a number or a
schedule, a function of the step number (from 0). `effppl.infer.SVI` takes these, NumPyro's own
`numpyro.optim` objects and optax transformations alike.

Every numeric argument is checked when the optimiser is built: None, a str, a bool, an array
that is not a scalar or a complex number raises `effppl.infer.OptimizerError` naming the
argument; a NaN, infinite or negative step size is allowed (as in NumPyro) but warned about
(`RuntimeWarning`).

Example:
    >>> import jax.numpy as jnp
    >>> from effppl import optim
    >>> opt = optim.SGD(0.5)
    >>> state = opt.init({"x": jnp.zeros(2)})
    >>> state = opt.update({"x": jnp.array([1.0, -2.0])}, state)
    >>> opt.get_params(state)["x"]
    Array([-0.5,  1. ], dtype=float32)
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from ._errors import EffpplError

__all__ = ["Adam", "Adagrad", "ClippedAdam", "Minimize", "Momentum", "RMSProp", "RMSPropMomentum",
           "SGD", "SM3", "optax_to_numpyro", "OptimizerError"]


class OptimizerError(EffpplError, TypeError):
    """An optimiser got an argument it cannot take, or `SVI` got something that is not an
    optimiser (also `effppl.infer.OptimizerError`)."""


def _value_and_grad(fn, params, forward_mode_differentiation):
    """`((out, aux), grads)` of `fn(params) -> (out, aux)`, reverse or forward mode."""
    if forward_mode_differentiation:
        def with_value(p):
            out, aux = fn(p)
            return out, (out, aux)

        grads, (out, aux) = jax.jacfwd(with_value, has_aux=True)(params)
        return (out, aux), grads
    return jax.value_and_grad(fn, has_aux=True)(params)


class _NumPyroOptim:
    """An optax `transformation` behind NumPyro's optimiser interface. Two optimisers built
    alike (same class, same arguments) are equal, so they share `SVI`'s compiled update."""

    def __init__(self, transformation, update_with_value: bool = False, key: Any = None):
        self.transformation = optax.with_extra_args_support(transformation)
        self.update_with_value = update_with_value
        try:
            hash(key)
        except TypeError:  # an unhashable argument (an array step size): compare by identity
            key = None
        self._key = key

    def __eq__(self, other):
        if self._key is None or type(other) is not type(self):
            return self is other
        return self._key == other._key

    def __hash__(self):
        return id(self) if self._key is None else hash((type(self), self._key))

    def init(self, params):
        """The initial state `(0, (params, optax_state))` for a pytree of arrays `params`."""
        return jnp.array(0), (params, self.transformation.init(params))

    def update(self, g, state, value=None):
        """The state after one step along the gradient `g` (`value`: the objective's value,
        passed to optax transformations that take it, e.g. `optax.contrib.reduce_on_plateau`)."""
        i, (params, opt_state) = state
        extra = {"value": value} if self.update_with_value else {}
        updates, opt_state = self.transformation.update(g, opt_state, params, **extra)
        return i + 1, (optax.apply_updates(params, updates), opt_state)

    def get_params(self, state):
        """The current params (the pytree given to `init`)."""
        return state[1][0]

    def eval_and_update(self, fn, state, forward_mode_differentiation: bool = False):
        """`((out, aux), new_state)`: evaluate `fn(params) -> (scalar, aux)` and step along
        its gradient."""
        (out, aux), grads = _value_and_grad(fn, self.get_params(state),
                                            forward_mode_differentiation)
        return (out, aux), self.update(grads, state, value=out)

    def eval_and_stable_update(self, fn, state, forward_mode_differentiation: bool = False):
        """`eval_and_update`, but a step whose value or gradient is not finite leaves the state
        as it was and gives the value `nan` (NumPyro's)."""
        (out, aux), grads = _value_and_grad(fn, self.get_params(state),
                                            forward_mode_differentiation)
        ok = jnp.isfinite(out) & jnp.all(jnp.isfinite(ravel_pytree(grads)[0]))
        new = self.update(grads, state, value=out)
        state = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, state)
        return (jnp.where(ok, out, jnp.nan), aux), state


def _checked(api, name, value, schedule=False):
    """`value` unchanged when it is a real number (a Python or NumPy number, or an array of
    shape `()`), or, with `schedule`, a callable (a function of the step number); else an
    `OptimizerError` naming the argument. A step size that is not finite or is negative (an
    ascent) is allowed, as in NumPyro, but warned about."""
    if schedule and callable(value):
        return value
    what = None
    if value is None or isinstance(value, (bool, np.bool_, str, bytes)):
        what = repr(value)
    elif not isinstance(value, (int, float, np.number, np.ndarray, jax.Array)):
        what = f"{type(value).__name__} {value!r:.40}"
    elif np.shape(value) != ():
        what = f"an array of shape {np.shape(value)}"
    elif not jnp.issubdtype(jnp.result_type(value), jnp.number) or \
            jnp.issubdtype(jnp.result_type(value), jnp.complexfloating):
        what = f"a value of dtype {jnp.result_type(value)}"
    if what is not None:
        expected = "a real number (or a schedule: a function of the step number)" if schedule \
            else "a real number"
        raise OptimizerError(f"`effppl.optim.{api}({name}=...)` expected {expected}, but got "
                             f"{what}.")
    if schedule and not isinstance(value, jax.core.Tracer):
        number = float(value)
        effect = ("makes the params non-finite" if not math.isfinite(number) else
                  "climbs the loss instead of descending it" if number < 0 else None)
        if effect:
            warnings.warn(f"`effppl.optim.{api}({name}={number})`: this step size {effect}.",
                          RuntimeWarning, stacklevel=4)
    return value


def _check_all(api, step_size, **numbers):
    """Check `step_size` (a number or a schedule) and the other numeric `numbers` of `api`."""
    _checked(api, "step_size", step_size, schedule=True)
    for name, value in numbers.items():
        _checked(api, name, value)


def _lr(step_size):
    """optax's learning-rate step (`-step_size`, or `-step_size(count)` for a schedule)."""
    return optax.scale_by_learning_rate(step_size)


class Adam(_NumPyroOptim):
    """Adam (Kingma & Ba, 2014), as `jax.example_libraries.optimizers.adam`: `optax.adam`."""

    def __init__(self, step_size, b1=0.9, b2=0.999, eps=1e-8):
        _check_all("Adam", step_size, b1=b1, b2=b2, eps=eps)
        super().__init__(optax.adam(step_size, b1, b2, eps), key=(step_size, b1, b2, eps))


class ClippedAdam(_NumPyroOptim):
    """`Adam` after clipping each gradient element to `[-clip_norm, clip_norm]` (NumPyro's)."""

    def __init__(self, step_size, b1=0.9, b2=0.999, eps=1e-8, *, clip_norm=10.0):
        _check_all("ClippedAdam", step_size, b1=b1, b2=b2, eps=eps, clip_norm=clip_norm)
        self.clip_norm = clip_norm
        super().__init__(optax.chain(optax.clip(clip_norm), optax.adam(step_size, b1, b2, eps)),
                         key=(step_size, b1, b2, eps, clip_norm))


class SGD(_NumPyroOptim):
    """Plain gradient descent: `optax.sgd`."""

    def __init__(self, step_size):
        _check_all("SGD", step_size)
        super().__init__(optax.sgd(step_size), key=(step_size,))


class Momentum(_NumPyroOptim):
    """Gradient descent with momentum `mass` (velocity `mass * v + g`): `optax.sgd(momentum=)`."""

    def __init__(self, step_size, mass):
        _check_all("Momentum", step_size, mass=mass)
        super().__init__(optax.sgd(step_size, momentum=mass), key=(step_size, mass))


class Adagrad(_NumPyroOptim):
    """Adagrad (Duchi et al., 2011) with NumPyro's momentum: the gradient over the root of the
    summed squared gradients (0 where that sum is 0), averaged with weight `momentum`."""

    def __init__(self, step_size, momentum=0.9):
        _check_all("Adagrad", step_size, momentum=momentum)
        super().__init__(optax.chain(optax.scale_by_rss(initial_accumulator_value=0.0, eps=0.0),
                                     optax.ema(momentum, debias=False), _lr(step_size)),
                         key=(step_size, momentum))


class RMSProp(_NumPyroOptim):
    """RMSProp (Tieleman & Hinton, 2012): the gradient over `sqrt(avg_sq_grad + eps)`, the
    average decaying by `gamma`: `optax.rmsprop`."""

    def __init__(self, step_size, gamma=0.9, eps=1e-8):
        _check_all("RMSProp", step_size, gamma=gamma, eps=eps)
        super().__init__(optax.rmsprop(step_size, decay=gamma, eps=eps), key=(step_size, gamma, eps))


class RMSPropMomentum(_NumPyroOptim):
    """`RMSProp` whose scaled steps accumulate with `momentum`: `optax.rmsprop(momentum=)`."""

    def __init__(self, step_size, gamma=0.9, eps=1e-8, momentum=0.9):
        _check_all("RMSPropMomentum", step_size, gamma=gamma, eps=eps, momentum=momentum)
        super().__init__(optax.rmsprop(step_size, decay=gamma, eps=eps, momentum=momentum),
                         key=(step_size, gamma, eps, momentum))


class SM3(_NumPyroOptim):
    """SM3 (Anil et al., 2019): `optax.scale_by_sm3` (a schedule `step_size` allowed), on
    scalar params too (as shape-`(1,)` arrays: optax's SM3 indexes a param's axes)."""

    def __init__(self, step_size, momentum=0.9):
        _check_all("SM3", step_size, momentum=momentum)
        super().__init__(optax.chain(_scalars_as_vectors(optax.scale_by_sm3(momentum)),
                                     _lr(step_size)),
                         key=(step_size, momentum))


def _scalars_as_vectors(inner: optax.GradientTransformation) -> optax.GradientTransformation:
    """`inner`, seeing each 0-d leaf (params, updates) as a shape-`(1,)` array."""
    def up(tree):
        return jax.tree.map(lambda x: jnp.reshape(x, (1,)) if jnp.ndim(x) == 0 else x, tree)

    def init(params):
        return inner.init(up(params))

    def update(updates, state, params=None):
        new, state = inner.update(up(updates), state, None if params is None else up(params))
        return jax.tree.map(lambda n, u: jnp.reshape(n, jnp.shape(u)), new, updates), state

    return optax.GradientTransformation(init, update)


class _MinimizeState(NamedTuple):
    flat_params: Any


class Minimize(_NumPyroOptim):
    """Minimise the objective outright with `jax.scipy.optimize.minimize` (BFGS) in one step, as
    NumPyro's `Minimize`: for deterministic objectives (`AutoDelta`, `AutoLaplaceApproximation`,
    maximum likelihood). `**kwargs` go to `minimize` (`tol`, `options`)."""

    def __init__(self, method="BFGS", **kwargs):
        super().__init__(optax.identity(), key=None)
        self._method, self._kwargs = method, kwargs

    def eval_and_update(self, fn, state, forward_mode_differentiation: bool = False):
        from jax.scipy.optimize import minimize

        i, (params, opt_state) = state
        flat, unravel = ravel_pytree(params)
        result = minimize(lambda x: fn(unravel(x))[0], flat, (), method=self._method,
                          **self._kwargs)
        return (result.fun, None), (i + 1, (unravel(result.x), opt_state))

    def eval_and_stable_update(self, fn, state, forward_mode_differentiation: bool = False):
        return self.eval_and_update(fn, state, forward_mode_differentiation)


def optax_to_numpyro(transformation) -> _NumPyroOptim:
    """An optax `GradientTransformation` behind NumPyro's optimiser interface (as NumPyro's
    `optax_to_numpyro`; the objective's value is passed to transformations that take it).

    **Raises:** `OptimizerError` when `transformation` has no callable `init` and `update`."""
    if isinstance(transformation, type) or not (
            callable(getattr(transformation, "init", None))
            and callable(getattr(transformation, "update", None))):
        raise OptimizerError(f"`effppl.optim.optax_to_numpyro(transformation)` expected an optax "
                             f"GradientTransformation (e.g. `optax.adam(1e-2)`), but got "
                             f"{type(transformation).__name__} {transformation!r:.40}.")
    return _NumPyroOptim(transformation, update_with_value=True)
