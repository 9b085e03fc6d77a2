"""`eliminate` and `make_jaxpr`: the user-facing entry points of the translator."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from . import _compat
from ._translate import eliminate_jaxpr, paused_gc


def _name(f) -> str:
    return getattr(f, "__name__", "f")


def _check_callable(f, api):
    if not callable(f):
        raise TypeError(f"effppl.effects.{api}(f) expected a callable, but got "
                        f"{type(f).__name__} {f!r:.60}.")


def eliminate(f: Callable) -> Callable:
    """`f` with every handler compiled away.

    Traces `f` to a jaxpr, translates it (paper §4–§5) into a plain jaxpr with no effect
    primitive, and evaluates that. The result is jit/grad/vmap-able. Use under `jax.jit` to
    translate once per input shape.

    **Raises:** `TypeError` when `f` is not callable; `UnhandledEffectError` naming an operation
    no handler handles;
    `UnsupportedHandlerError` for a clause the translation cannot compile away.

    **Example:**

    >>> import jax, jax.numpy as jnp
    >>> from effppl.effects import Operation, eliminate, handle
    >>> get = Operation("get", out=lambda: jax.ShapeDtypeStruct((), jnp.float32))
    >>> scale = handle(lambda x: get() * x, params=jnp.float32(3.0),
    ...                clauses={get: lambda p, resume: resume(p, p)})
    >>> eliminate(scale)(2.0).tolist()
    6.0
    >>> jax.jit(eliminate(scale))(2.0).tolist()
    6.0

    **References:** "Handling JAX" §4 (the translation), §5 (across loops), App. B (loop rewrites).
    """
    _check_callable(f, "eliminate")

    @functools.wraps(f)
    def eliminated(*args, **kwargs):
        with paused_gc():
            closed, consts, leaves, out_tree = _compat.trace_call(f, args, kwargs, _name(f))
            _compat.check_no_leaked_tracers(consts, _name(f))
            out = _compat.emit_jaxpr(eliminate_jaxpr(closed), *consts, *leaves)
        out = [jnp.asarray(x) for x in out]  # a literal output comes back as a Python scalar
        return jax.tree_util.tree_unflatten(out_tree, out)

    return eliminated


def make_jaxpr(f: Callable) -> Callable:
    """`make_jaxpr(f)(*args)`: the translated `ClosedJaxpr` of `f` at these arguments.

    It contains no effect primitive and no effects; its inputs are the flattened array
    arguments (Python ints, bools and strings are static). Raises as `eliminate` does.

    **Example:** `jax.make_jaxpr` shows the `handle` and `perform` equations; this shows what is
    left once they are compiled away (the parameter `3.0` became the constant `a`):

    >>> import jax, jax.numpy as jnp
    >>> from effppl.effects import Operation, handle, make_jaxpr
    >>> get = Operation("get", out=lambda: jax.ShapeDtypeStruct((), jnp.float32))
    >>> scale = handle(lambda x: get() * x, params=jnp.float32(3.0),
    ...                clauses={get: lambda p, resume: resume(p, p)})
    >>> print(make_jaxpr(scale)(jnp.float32(2.0)))
    { lambda a:f32[]; b:f32[]. let c:f32[] = mul a b in (c,) }
    """
    _check_callable(f, "make_jaxpr")

    @functools.wraps(f)
    def make(*args, **kwargs):
        def flat(*xs):
            a, kw = rebuild(xs)
            return jax.tree_util.tree_leaves(f(*a, **kw))

        leaves, rebuild = _compat.split_args(args, kwargs)
        with paused_gc():
            closed = _compat.trace_to_closed_jaxpr(flat, leaves, _name(f))
            return eliminate_jaxpr(closed)

    return make
