"""Which value a traced argument stands for.

`trace_call` traces a function at fresh tracers for its array arguments; nested handlers trace
again, each at fresh tracers for the tracers outside. While `recording_sources()` is active,
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
    sources = getattr(_state, "sources", None)
    if sources is None:
        yield
        return
    keys = []
    for t, x in zip(tracers, values):
        if id(t) not in sources:
            sources[id(t)] = x
            keys.append(id(t))
    try:
        yield
    finally:
        for k in keys:
            sources.pop(k, None)


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
