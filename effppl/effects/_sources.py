"""Which value a traced argument stands for.

`trace_call` traces a function at fresh tracers for its array arguments; nested handlers trace
again, each at fresh tracers for the tracers outside. Each tracer made for a weakly typed value
(a Python float) is strongly typed; `stands_for_weak` tells it, always noted. While `recording_sources()` is active,
each tracer `trace_call` makes is noted with the value it stands for, so code deep inside (an
autoguide keeping the data it first ran with, as NumPyro's do) can ask `source_values` for the
concrete arguments of the outermost call. Only arguments passed on unchanged resolve; a value
computed while tracing, or traced by JAX itself (`jax.jit`, a loop body), does not.
"""

from __future__ import annotations

import contextlib
import threading

import jax
import jax.core

_state = threading.local()


@contextlib.contextmanager
def recording_sources():
    """Note, until the block ends, what each tracer `trace_call` makes stands for (nested
    blocks share the outermost's notes)."""
    if getattr(_state, "sources", None) is not None:
        yield
        return
    _state.sources = {}
    try:
        yield
    finally:
        _state.sources = None


@contextlib.contextmanager
def noting_sources(tracers, values):
    """While the block runs (the function traced at `tracers`), note that each of `tracers`
    stands for the value at the same place in `values`. Notes are keyed by `id` and hold no
    tracer of their own level: they end with the trace, so JAX's leak checker finds nothing,
    and an `id` is not reused while its tracer is in use."""
    weak = _weak_ids()
    weak_keys = [id(t) for t, x in zip(tracers, values) if id(t) not in weak and stands_for_weak(x)]
    weak.update(weak_keys)
    sources = getattr(_state, "sources", None)
    keys = []
    if sources is not None:
        for t, x in zip(tracers, values):
            if id(t) not in sources:
                sources[id(t)] = x
                keys.append(id(t))
    try:
        yield
    finally:
        weak.difference_update(weak_keys)
        if sources is not None:
            for k in keys:
                sources.pop(k, None)


def _weak_ids() -> set:
    weak = getattr(_state, "weak", None)
    if weak is None:
        weak = _state.weak = set()
    return weak


def stands_for_weak(x) -> bool:
    """Whether `x` is weakly typed (a Python scalar, a weakly typed array or tracer), or is a
    tracer `trace_call` made for such a value (tracing makes it strongly typed), also through
    nested traces. Noted whether or not `recording_sources` is active."""
    if isinstance(x, jax.core.Tracer):
        return id(x) in _weak_ids() or bool(getattr(jax.typeof(x), "weak_type", False))
    if isinstance(x, bool):
        return False
    return isinstance(x, (int, float, complex)) or bool(getattr(x, "weak_type", False))


def source_values(tree):
    """`tree` with each tracer replaced by the non-traced value it stands for (following the
    notes through nested traces); None when some tracer stands for none."""
    sources = getattr(_state, "sources", None) or {}
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    out = []
    for leaf in leaves:
        while isinstance(leaf, jax.core.Tracer):
            if id(leaf) not in sources:
                return None
            leaf = sources[id(leaf)]
        out.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, out)
