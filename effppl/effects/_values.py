"""What may stand for an array: the check behind every "expected arrays, but got ..." message.

JAX's own error for a value it cannot stage ("Value 'x' with dtype <U1 is not a valid JAX array
type") names neither the argument nor the operation; the entry points call `check_arrays` first
and say which of *their* arguments is at fault.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

_SCALARS = (bool, int, float, complex, np.bool_, np.number)


def describe_non_array(x: Any) -> str | None:
    """`None` when `x` converts to a JAX array (an array or tracer of a numeric or bool dtype, a
    Python or NumPy number, a rectangular nested list of numbers); else what `x` is, for an error
    message: "a str 'abc'", "an array of dtype object", "a ragged nested list", ...."""
    if isinstance(x, (jax.Array, jax.core.Tracer, *_SCALARS)):
        return None
    if isinstance(x, (str, bytes)):
        return f"a {type(x).__name__} {x!r:.60}"
    if isinstance(x, np.ndarray):
        return None if _numeric(x.dtype) else f"an array of dtype {x.dtype}"
    if isinstance(x, (list, tuple)):
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError):
            return f"a ragged nested {type(x).__name__} (rows of different lengths)"
        return None if _numeric(arr.dtype) else \
            f"a {type(x).__name__} holding non-numbers ({x!r:.60})"
    return f"an object of type {type(x).__name__} ({x!r:.60})"


def describe_non_bool(x: Any) -> str | None:
    """`None` when `x` is a bool array (or a Python/NumPy bool); else what it is, for an error
    message, as `describe_non_array`."""
    problem = describe_non_array(x)
    if problem is None and jnp.result_type(x) != jnp.bool_:
        problem = f"an array of dtype {jnp.result_type(x)}"
    return problem


def _numeric(dtype) -> bool:
    return dtype == np.bool_ or jnp.issubdtype(dtype, jnp.number)


def check_arrays(tree: Any, what: str, error: type = TypeError) -> list:
    """The leaves of `tree`, after checking that each is array-like (`describe_non_array`).

    **Raises:** `error` (default `TypeError`) whose message starts with `what` (e.g.
    "effppl.effects.handle(..., params=...)") and names the leaf's path in `tree`.
    """
    with_paths, _ = jax.tree_util.tree_flatten_with_path(tree)
    for path, leaf in with_paths:
        problem = describe_non_array(leaf)
        if problem is not None:
            where = f" at {jax.tree_util.keystr(path)}" if path else ""
            raise error(f"{what}: expected arrays (or pytrees of arrays), but got "
                        f"{problem}{where}.")
    return [leaf for _, leaf in with_paths]
