"""Failures: an exception effect.

`fail(message, *values)` performs the operation `fail_op`; whoever handles it decides what a
failure means, and the code that fails need not know who that is:

* `catch(fn, on_failure)` aborts: the rest of `fn` is dropped and `on_failure(message,
  *values)` is its result (an abortive clause: it crosses `lax.scan`, `lax.while_loop` and
  `effects.while_loop` by the App. B.2 rewrite, stopping the loop);
* a handler whose clause resumes notes the failure and lets the code go on with whatever it
  computed (a resumable failure: a log density handler makes the density `-inf`);
* with no handler at all, `fail_op`'s default raises `FailureError` naming the message: at once
  when run eagerly, else when the compiled program runs (a host callback).

`fail_if(pred, message, *values, carry=x)` returns `x`: a value the check is attached to. Where
no handler can be around (outside the body of every handler being traced), the check then
compiles to a `jax.pure_callback` on `x`'s path, which costs nothing unless it fails (without a
`carry`, to a `jax.debug.callback`, a side effect that makes JAX dispatch the compiled program
more slowly); use the returned `x`, or the check is dead code.

A clause of `fail_op` is called as `clause(params, when, carry, values, *, resume, message)`:
`message` is the static message, `values` the tuple of arrays it formats
(`message.format(*values)`), `carry` the tuple passed through (resume with it), and `when` a
bool array that is true where the failure happened (always true, except in a `cond` that JAX
batched into a `select`, where it tells the elements that failed from those that did not).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _compat
from ._core import Operation
from ._errors import EffectError
from ._handle import handle


class FailureError(EffectError, RuntimeError):
    """A failure (`effppl.effects.fail`) that no handler handled."""


def _concrete(*trees) -> bool:
    return not any(isinstance(x, _compat.Tracer) for x in jax.tree_util.tree_leaves(trees))


def _default(when, carry, values, *, message):
    """`fail_op` where no handler handles it: raise `FailureError` now (concrete values), or when
    the compiled program runs (a callback that checks `when`, so that a `select` stays right)."""
    if _concrete(when, carry, values):
        _raise_now(when, values, message)
        return carry
    if not jax.tree_util.tree_leaves(carry):
        jax.debug.callback(lambda w, v: _raise_now(w, v, message), when, values)
        return carry

    return _checked(message)(carry, when, values)


def _checked(message):
    """`carry`, passed through a pure callback that raises where `when` (an identity for
    differentiation: JAX cannot differentiate a callback)."""
    def check(w, v, c):
        _raise_now(w, v, message)
        return c

    @jax.custom_jvp
    def checked(carry, when, values):
        structs = jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct(jnp.shape(x), x.dtype), carry)
        return jax.pure_callback(check, structs, when, values, carry, vmap_method="broadcast_all")

    @checked.defjvp
    def _jvp(primals, tangents):
        return checked(*primals), tangents[0]

    return checked


def _raise_now(when, values, message):
    when = np.asarray(when)
    if not when.any():
        return
    values = [np.asarray(v) for v in values]
    if when.ndim:  # a batch: the first element that failed
        first = np.unravel_index(np.argmax(when), when.shape)
        values = [v[first] if v.shape[:when.ndim] == when.shape else v for v in values]
    raise FailureError(message.format(*(v.item() if v.size == 1 else v for v in values)))


def _batch_rule(args, dims, *, in_tree, static):
    """Under `jax.vmap` inside a handled region: one failure if any element failed, with the
    values of the first that did; the carry keeps its batch."""
    when, carry, values = jax.tree_util.tree_unflatten(in_tree, args)
    w_dim, c_dims, v_dims = jax.tree_util.tree_unflatten(in_tree, dims)
    index = 0
    if w_dim is not None:
        when = jnp.moveaxis(when, w_dim, 0)
        index, when = jnp.argmax(when), jnp.any(when)
    values = tuple(v if d is None else jnp.moveaxis(v, d, 0)[index]
                   for v, d in zip(values, v_dims))
    carry = tuple(c if d is None else jnp.moveaxis(c, d, 0) for c, d in zip(carry, c_dims))
    out = fail_op(when, carry, values, **dict(static))
    return list(out), [None if d is None else 0 for d in c_dims]


fail_op = Operation(
    "fail", out=lambda when, carry, values, *, message: carry, default=_default,
    batch_rule=_batch_rule, unhandled=lambda message: "Handle it with `effppl.effects.catch`.")
"""The operation `fail` performs (clauses: `clause(params, when, carry, values, *, resume,
message)`)."""


def _check_message(api, message):
    if not isinstance(message, str):
        raise TypeError(f"effppl.effects.{api}(message, ...) expected a str message (a format "
                        f"string for the values), but got {type(message).__name__} "
                        f"{message!r:.60}.")


def _signal(when, carry, values, message):
    """Perform `fail_op`, or, where no handler can be around, run its default directly (so the
    traced program holds no operation, whose effect would slow JAX's dispatch of it)."""
    if _compat.in_handled_region():
        return fail_op(when, carry, values, message=message)
    return _default(when, carry, values, message=message)


def fail(message: str, *values) -> None:
    """Signal a failure; the handler of `fail_op` around decides what it means.

    **Arguments:**
    - `message`: a static format string, `message.format(*values)` says what went wrong.
    - `values`: arrays the message shows (no gradient flows through them).

    **Returns:** nothing, where a handler resumes; under `catch` the rest is dropped.

    **Raises:** `FailureError` with the formatted message where no handler handles it (see
    the module docstring); `TypeError` for a message that is not a str.

    **Example:**

    >>> import jax.numpy as jnp
    >>> from effppl import effects as fx
    >>> def safe_log(x):
    ...     fx.fail_if(x <= 0, "log of {}", x)
    ...     return jnp.log(x)
    >>> fx.catch(safe_log, lambda message, x: -jnp.inf * jnp.ones_like(x))(jnp.float32(-2.0))
    Array(-inf, dtype=float32)
    >>> try:
    ...     safe_log(jnp.float32(-2.0))
    ... except fx.FailureError as err:
    ...     print(err)
    log of -2.0
    """
    _check_message("fail", message)
    _signal(jnp.bool_(True), (), _values(values), message)


def fail_if(pred, message: str, *values, carry: Any = None) -> Any:
    """`fail(message, *values)` where the bool scalar `pred` is true; nothing otherwise.

    **Arguments:** as `fail`; `pred`, a bool scalar; `carry`, an optional pytree of arrays the
    check is attached to (module docstring).

    **Returns:** `carry`.

    **Raises:** `FailureError` at once, outside every JAX transformation with a concrete true
    `pred`; else as `fail`. `TypeError` for a `pred` that is not a bool scalar.

    **Example:** a check attached to the value it guards (under `jax.jit` and outside every
    handler, a pure callback on its path):

    >>> import jax, jax.numpy as jnp
    >>> from effppl import effects as fx
    >>> checked_log = jax.jit(lambda x: jnp.log(fx.fail_if(x <= 0, "log of {}", x, carry=x)))
    >>> checked_log(jnp.float32(1.0))
    Array(0., dtype=float32)
    >>> fx.catch(checked_log, lambda message, x: jnp.float32(-1.0))(jnp.float32(-2.0))
    Array(-1., dtype=float32)

    **References:** the paper "Handling JAX" (exceptions as an abortive effect, App. B.2).
    """
    _check_message("fail_if", message)
    pred = pred if isinstance(pred, _compat.Tracer) else jnp.asarray(pred)
    if pred.shape != () or pred.dtype != jnp.bool_:
        raise TypeError(f"effppl.effects.fail_if(pred, ...) expected a bool scalar, but got "
                        f"{_compat.typeof(pred).str_short()}.")
    values = _values(values)
    leaves, tree = jax.tree_util.tree_flatten(carry)
    leaves = tuple(x if isinstance(x, _compat.Tracer) else jnp.asarray(x) for x in leaves)
    if _compat.outside_transformations() and _concrete(pred):
        _raise_now(pred, values, message)
        return carry
    out = jax.lax.cond(pred, lambda p, c, v: _signal(p, c, v, message), lambda p, c, v: c,
                       pred, leaves, values)
    return tree.unflatten(list(out))


def _values(values):
    return tuple(jax.lax.stop_gradient(jnp.asarray(v)) for v in values)


def catch(fn: Callable, on_failure: Callable[..., Any]) -> Callable:
    """`fn`, stopping at the first failure: then `on_failure(message, *values)` is its result.

    **Arguments:** `fn`, the computation; `on_failure(message, *values)`, returning a value of
    the type of `fn`'s result (`message` is a static str).

    **Returns:** the handled function.

    **Raises:** `TypeError` when `on_failure` returns another type than `fn`.

    **Example:** the first failure of a loop stops it, and its value is the result:

    >>> import jax, jax.numpy as jnp
    >>> from effppl import effects as fx
    >>> def total(xs):
    ...     def step(acc, x):
    ...         fx.fail_if(x < 0, "negative {}", x)
    ...         return acc + x, None
    ...     return jax.lax.scan(step, jnp.float32(0.0), xs)[0]
    >>> fx.catch(total, lambda message, x: 100 * x)(jnp.array([1.0, -2.0, -3.0]))
    Array(-200., dtype=float32)

    **References:** the paper "Handling JAX" §3 (abortive clauses) and App. B.2 (across loops).
    """
    def clause(params, when, carry, values, *, resume, message):
        del params, when, carry, resume
        return on_failure(message, *values)

    return handle(fn, clauses={fail_op: clause})
