"""Failures: an exception effect.

`fail(message, *values)` performs the operation `fail_op`; whoever handles it decides what a
failure means, and the code that fails need not know who that is:

* `catch(fn, on_failure)` aborts: the rest of `fn` is dropped and `on_failure(message,
  *values)` is its result (an abortive clause: it crosses `lax.scan`, `lax.while_loop` and
  `effects.while_loop` by the App. B.2 rewrite, stopping the loop);
* a handler whose clause resumes notes the failure and lets the code go on with whatever it
  computed (a resumable failure: a log density handler makes the density `-inf`);
* with no handler at all, `fail_op`'s default raises `FailureError` naming the message: at once
  when run eagerly, else when the compiled program runs (a `jax.debug.callback`).

A clause of `fail_op` is called as `clause(params, when, *values, resume, message)`: `message`
is the static message, `values` the arrays it formats (`message.format(*values)`), and `when`
a bool array that is true where the failure happened (always true, except in a `cond` JAX
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


def _raise(when, *values, message):
    """`fail_op`'s default: raise `FailureError` now (concrete values), or when the compiled
    program runs (a callback that checks `when`, so that a `select` stays right)."""
    if not any(isinstance(x, _compat.Tracer) for x in (when, *values)):
        _raise_now(when, *values, message=message)
    else:
        jax.debug.callback(lambda w, *v: _raise_now(w, *v, message=message), when, *values)
    return ()


def _raise_now(when, *values, message):
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
    values of the first that did."""
    when, *values = args
    when_dim, *value_dims = dims
    if when_dim is None:
        index = 0
    else:
        when = jnp.moveaxis(when, when_dim, 0)
        index, when = jnp.argmax(when), jnp.any(when)
    values = [v if d is None else jnp.moveaxis(v, d, 0)[index] for v, d in zip(values, value_dims)]
    fail_op(when, *values, **dict(static))
    return [], []


fail_op = Operation(
    "fail", out=lambda when, *values, message: (), default=_raise, batch_rule=_batch_rule,
    unhandled=lambda message: "Handle it with `effppl.effects.catch`.")
"""The operation `fail` performs (clauses: `clause(params, when, *values, resume, message)`)."""


def _check_message(api, message):
    if not isinstance(message, str):
        raise TypeError(f"effppl.effects.{api}(message, ...) expected a str message (a format "
                        f"string for the values), but got {type(message).__name__} "
                        f"{message!r:.60}.")


def _values(values):
    return [jax.lax.stop_gradient(jnp.asarray(v)) for v in values]


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
    fail_op(jnp.bool_(True), *_values(values), message=message)


def fail_if(pred, message: str, *values) -> None:
    """`fail(message, *values)` where the bool scalar `pred` is true; nothing otherwise.

    Outside every JAX transformation, with a concrete `pred`, raises `FailureError` at once
    when it is true (no handler can be around); else performs `fail_op` in a `lax.cond`.

    **Raises:** `FailureError`, `TypeError` as `fail`; `TypeError` for a `pred` that is not a
    bool scalar.
    """
    _check_message("fail_if", message)
    pred = pred if isinstance(pred, _compat.Tracer) else jnp.asarray(pred)
    if pred.shape != () or pred.dtype != jnp.bool_:
        raise TypeError(f"effppl.effects.fail_if(pred, ...) expected a bool scalar, but got "
                        f"{_compat.typeof(pred).str_short()}.")
    values = _values(values)
    if _compat.outside_transformations() and not isinstance(pred, _compat.Tracer):
        _raise_now(pred, *values, message=message)
        return
    jax.lax.cond(pred, lambda p, *v: fail_op(p, *v, message=message), lambda p, *v: (),
                 pred, *values)


def catch(fn: Callable, on_failure: Callable[..., Any]) -> Callable:
    """`fn`, stopping at the first failure: then `on_failure(message, *values)` is its result.

    **Arguments:** `fn`, the computation; `on_failure(message, *values)`, returning a value of
    the type of `fn`'s result (`message` is a static str).

    **Returns:** the handled function.

    **Raises:** `TypeError` when `on_failure` returns another type than `fn`.
    """
    def clause(params, when, *values, resume, message):
        del params, when, resume
        return on_failure(message, *values)

    return handle(fn, clauses={fail_op: clause})
