"""NumPyro's `forward_mode_differentiation=True`: the gradient of a log density computed in
forward mode (`jax.jacfwd`, one forward pass per unconstrained coordinate, batched), for models
whose log density JAX cannot differentiate in reverse mode (a `lax.while_loop` between a latent
site and the density, e.g. an iterative solver). It costs O(d) evaluations per gradient, so it
suits models with few latent coordinates, as in NumPyro.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["forward_gradient", "value_and_forward_grad"]


def value_and_forward_grad(f: Callable) -> Callable:
    """`(params, *rest) -> (f(params, *rest), d f / d params)`, the derivative by forward mode."""
    def value_and_grad(params, *rest):
        return f(params, *rest), jax.jacfwd(f)(params, *rest)
    return value_and_grad


def _zero_cotangent(x):
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(x.shape, dtype=jax.dtypes.float0)


def forward_gradient(f: Callable) -> Callable:
    """`f(params, rest)` (a scalar) whose reverse-mode derivative with respect to `params` JAX
    takes by forward mode (`jax.grad` of it works where `f` holds a `while_loop`); `rest` (the
    model's data) gets a zero cotangent."""
    @jax.custom_vjp
    def g(params, rest):
        return f(params, rest)

    def g_fwd(params, rest):
        value, grad = value_and_forward_grad(f)(params, rest)
        return value, (grad, rest)

    def g_bwd(residual, cotangent):
        grad, rest = residual
        return (jax.tree.map(lambda d: d * cotangent, grad),
                jax.tree.map(_zero_cotangent, rest))

    g.defvjp(g_fwd, g_bwd)
    return g
