"""Structural caching of compiled inference functions.

The rule (JAX's compile caches key on function identity and argument structure): a compiled
function is looked up by *structure* — the model
object, the pytree structure of the model arguments, their non-array leaves, and the sampler
settings — and the arrays of the model arguments are *arguments* of the compiled function, never
constants closed over in it. The array shapes and dtypes are then keyed by `jax.jit`'s own cache,
so a second call with new data of the same shapes re-uses the executable: no re-trace, no
re-translation of handlers, no XLA compilation.

The functions built here close over hashable Python values and modules only, never arrays.

A model may still read values that are not its arguments (a global data array, a setting on a
module): those are baked into the compiled functions. So `_fns.model_fns` re-traces the model
itself (not its handlers; milliseconds) on every call and compares the program and the values it
closes over with those the cached functions were built from; on any change they are rebuilt
instead of silently reusing the old values. It skips that trace when a fingerprint of
everything the model's code reads (`_fingerprint.py`) is the one taken at its last trace.
"""

import collections
import copy
import dataclasses
import threading
from collections.abc import Callable, Hashable
from typing import Any

import jax
import numpy as np

from ..._errors import EffpplError

__all__ = ["UnhashableArgumentError", "ArgsStructure", "StaticArray", "split_cache_key", "cached",
           "lookup", "clear_cache"]


class UnhashableArgumentError(EffpplError, TypeError):
    """A model argument is neither an array nor hashable, so it cannot key a compiled function."""


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


@dataclasses.dataclass(frozen=True)
class ArgsStructure:
    """The static part of `(args, kwargs)`: pytree structure and the non-array leaves.

    Array leaves (`jax.Array`, `numpy.ndarray`, numpy scalars) are *dynamic*: they are passed to the
    compiled functions as arguments. Every other leaf (Python `int`/`float`/`bool`/`str`, callables,
    an object with hashable attributes such as an `argparse.Namespace`, as a `StaticObject`,
    ...) is *static*: part of the cache key, like `jax.jit`'s `static_argnums`, so the model may use
    it in Python control flow or as a shape. Changing a static leaf compiles anew.
    """

    treedef: Any
    static_leaves: tuple  # ((position, value), ...)

    def rebuild(self, dynamic: tuple) -> tuple[tuple, dict]:
        """Merge `dynamic` (the array leaves, in order) with the static leaves into `(args, kwargs)`."""
        leaves, it = [], iter(dynamic)
        static = dict(self.static_leaves)
        for i in range(self.treedef.num_leaves):
            leaf = static[i] if i in static else next(it)
            leaves.append(leaf.obj if isinstance(leaf, StaticObject) else leaf)
        return jax.tree.unflatten(self.treedef, leaves)


class StaticArray:
    """An array argument the model needs the value of while traced (`len(np.unique(group))`, a
    Python `if`, a shape): a static leaf, hashed and compared by value (shape, dtype, contents).
    It stays wrapped through the handlers (which trace every array argument) and is unwrapped
    only when the model is called (`with_static_arrays`)."""

    def __init__(self, array):
        self.array = np.asarray(array)
        self._key = (self.array.shape, str(self.array.dtype), self.array.tobytes())

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, StaticArray) and self._key == other._key


class StaticObject:
    """An unhashable non-array argument whose attributes are hashable (NumPyro's examples pass
    their `argparse.Namespace` to the model): a static leaf, hashed and compared by its type and
    attributes. A copy is kept, so a later change to the caller's object keys a new entry
    instead of changing what the cached functions were built with."""

    def __init__(self, obj):
        self.obj = copy.copy(obj)
        self._key = (type(obj), tuple(sorted(vars(obj).items())))
        hash(self._key)  # TypeError when an attribute is unhashable

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, StaticObject) and self._key == other._key


def split_cache_key(api: str, args: tuple, kwargs: dict,
                    static_arrays: frozenset = frozenset()) -> tuple[ArgsStructure, tuple]:
    """Split model arguments into their hashable structure, which keys the compiled functions,
    and their array leaves, which are the compiled functions' arguments.

    Unlike `effects.internal.split_traced_args` (what a trace of the model abstracts), Python
    floats are static here: a compiled inference function is looked up by them, as by ints (a
    new float compiles anew); only arrays are its arguments.

    **Arguments:**

    - `api`: the public API name, for error messages.
    - `args`, `kwargs`: the model's positional and keyword arguments.
    - `static_arrays`: indices of array leaves (of `(args, kwargs)`) to treat as static values.

    **Returns:** `(structure, dynamic)`: an `ArgsStructure` and the tuple of array leaves.

    **Raises:** `UnhashableArgumentError` when a non-array leaf cannot be hashed, nor its
    attributes (`StaticObject`).
    """
    leaves, treedef = jax.tree.flatten((tuple(args), dict(kwargs)))
    static, dynamic = [], []
    for i, leaf in enumerate(leaves):
        if _is_array(leaf) and i in static_arrays:
            static.append((i, StaticArray(leaf)))
            continue
        if _is_array(leaf):
            dynamic.append(leaf)
            continue
        try:
            hash(leaf)
        except TypeError:
            try:
                leaf = StaticObject(leaf)
            except TypeError:
                raise UnhashableArgumentError(
                    f"`{api}` expected model arguments that are arrays or hashable values (or "
                    f"objects whose attributes are hashable, e.g. an `argparse.Namespace`), but "
                    f"got an unhashable {type(leaf).__name__} at leaf {i} of (args, kwargs). "
                    "Non-array arguments key the compiled sampler; pass data as jax or numpy "
                    "arrays, or make the object hashable."
                ) from None
        static.append((i, leaf))
    return ArgsStructure(treedef=treedef, static_leaves=tuple(static)), tuple(dynamic)


_MAX_ENTRIES = 64
_lock = threading.Lock()
_entries: "collections.OrderedDict[Hashable, Any]" = collections.OrderedDict()


def cached(key: Hashable, build: Callable[[], Any],
           valid: Callable[[Any], bool] = lambda value: True) -> Any:
    """Return the object stored under `key`, building (and storing) it on first use, or when
    `valid(stored)` is false (it is then replaced).

    A bounded least-recently-used store (64 entries) shared by `MCMC`, `Predictive` and
    `log_likelihood`, so a new `MCMC` object on the same model and settings re-uses the compiled
    functions of an old one.
    """
    with _lock:
        if key in _entries and valid(_entries[key]):
            _entries.move_to_end(key)
            return _entries[key]
    value = build()
    with _lock:
        if key in _entries and valid(_entries[key]):
            value = _entries[key]
        _entries[key] = value
        _entries.move_to_end(key)
        while len(_entries) > _MAX_ENTRIES:
            _entries.popitem(last=False)
    return value


def lookup(key: Hashable) -> Any:
    """The object stored under `key` (marked as used), or `None`."""
    with _lock:
        if key not in _entries:
            return None
        _entries.move_to_end(key)
        return _entries[key]


def clear_cache() -> None:
    """Drop every cached compiled function (the next call compiles anew)."""
    with _lock:
        _entries.clear()


def has_static_arrays(structure: ArgsStructure) -> bool:
    return any(isinstance(v, StaticArray) for _, v in structure.static_leaves)


def with_static_arrays(model: Callable) -> Callable:
    """`model`, called with every `StaticArray` argument leaf unwrapped to its numpy array."""
    import functools

    @functools.wraps(model)
    def unwrapped(*args, **kwargs):
        args, kwargs = jax.tree.map(lambda x: x.array if isinstance(x, StaticArray) else x,
                                    (args, kwargs))
        return model(*args, **kwargs)

    return unwrapped
