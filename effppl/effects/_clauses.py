"""Clauses: how a handler's clauses are traced, classified and shared.

A clause is traced once per *signature* of the operations it handles (the operation, its static
arguments, the types of its dynamic ones), as a jaxpr of the handler's parameters and the
operation's arguments; `classify_clause` says how it uses `resume` (paper §5), which decides how
the translator compiles it away. Clauses that declare what they do with static arguments
(`forwards_static`, `forwards_when`) are traced once for many signatures and shared across
handlers and eliminations.
"""

from __future__ import annotations

import collections
import inspect
import threading
import types
from collections.abc import Callable

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from . import _compat
from ._compat import abstractify
from ._core import ClauseKind, in_play, perform_p, resume_p
from ._values import check_arrays
from ._walk import iter_eqns, iter_performs

# Its implementation, JVP, batching and lowering rules (eliminate the handler, then run, or
# differentiate, batch, lower the plain jaxpr) are registered by the translator, `_translate.py`.


def perform_sites(jaxpr, ops):
    """The `SiteKey`s of every perform of `ops` that reaches a handler around `jaxpr`: at
    any depth, except those a nested handler handles, whose clauses are searched instead."""
    return dict.fromkeys(p.key for p in iter_performs(jaxpr, ops, distinct=True))


def _count_resumes(jaxpr):
    return sum(eqn.primitive is resume_p for eqn in iter_eqns(jaxpr))


def classify_clause(closed) -> ClauseKind:
    """`TAIL` if the clause ends by returning `resume(...)` (called exactly once, nothing
    effectful after it), `ABORTIVE` if it never resumes, `GENERAL` otherwise (paper §5)."""
    jaxpr = closed.jaxpr
    n = _count_resumes(jaxpr)
    if n == 0:
        return ClauseKind.ABORTIVE
    tops = [i for i, e in enumerate(jaxpr.eqns) if e.primitive is resume_p]
    if n == 1 and len(tops) == 1:
        i = tops[0]
        eqn = jaxpr.eqns[i]
        after_pure = all(not in_play(e.effects) for e in jaxpr.eqns[i + 1:])
        if after_pure and list(jaxpr.outvars) == list(eqn.outvars):
            return ClauseKind.TAIL
    return ClauseKind.GENERAL


def _same_types(tree_a, avals_a, tree_b, avals_b):
    return tree_a == tree_b and [(a.shape, a.dtype) for a in avals_a] == \
        [(b.shape, b.dtype) for b in avals_b]




def forwards_static(*names: str, reads: Callable[..., tuple] | None = None
                    ) -> Callable[[Callable], Callable]:
    """Declare that a clause uses the static keyword arguments `names` of its operation only to
    pass them on, unchanged, to the operations it performs (and in the messages of errors it
    raises): its jaxpr is then traced once per perform signature that differs only in them, and
    reused for the others with those arguments replaced in its performs.

    A handler whose clause forwards, say, a site `name` to the handlers outside it otherwise
    traces its clause once per site: the cost that grows with the number of sites. A clause that
    reads such an argument (looks it up, formats it into an array or a callback) must not be
    marked: it would get the first site's jaxpr.

    `reads(**static) -> (facts, arrays)` is for a clause that does look its site up, to read an
    array of its handler's (a value given for the site): `arrays`, a pytree of arrays, reaches
    the clause as its keyword argument `read`, an input of its jaxpr rather than a constant, so
    one jaxpr serves every site; `facts`, hashable, is everything else the clause's program
    takes from the site or from what it closes over (the site's shape in its loops, an option of
    the handler), or `None` when the program is the site's own (then it is traced for that
    perform alone). The clause's jaxpr then depends on its code, `facts`, the types of `arrays`
    and of its arguments only, so later handlers of the same code reuse it too (as they reuse
    a marked clause that closes over nothing). Errors name the site the jaxpr was traced for.

    >>> import jax, jax.numpy as jnp
    >>> from effppl.effects import Operation, handle
    >>> from effppl.effects.internal import forwards_static
    >>> tick = Operation("tick", out=lambda x, **static: jax.ShapeDtypeStruct((), jnp.float32))
    >>> @forwards_static("label")
    ... def double(p, x, *, resume, label):
    ...     return resume(p, tick(2.0 * x, label=label))
    >>> count = lambda p, x, *, resume, label: resume(p + 1.0, x)
    >>> inner = handle(lambda: tick(1.0, label="a") + tick(3.0, label="b"), clauses={tick: double})
    >>> outer = handle(inner, params=jnp.float32(0.0), clauses={tick: count},
    ...                ret=lambda p, r: (p, r))
    >>> [v.tolist() for v in outer()]
    [2.0, 8.0]

    With `reads`: each label's offset comes in as `read`, from one jaxpr traced for both.

    >>> offsets = {"a": jnp.float32(10.0), "b": jnp.float32(20.0)}
    >>> @forwards_static("label", reads=lambda *, label: ((), offsets[label]))
    ... def shift(p, x, *, resume, label, read):
    ...     return resume(p, tick(x + read, label=label))
    >>> inner = handle(lambda: tick(1.0, label="a") + tick(3.0, label="b"), clauses={tick: shift})
    >>> outer = handle(inner, params=jnp.float32(0.0), clauses={tick: count},
    ...                ret=lambda p, r: (p, r))
    >>> [v.tolist() for v in outer()]
    [2.0, 34.0]
    """
    forwarded = frozenset(names)
    if reads is not None and not callable(reads):
        raise TypeError(f"effppl.effects.internal.forwards_static(..., reads=...) expected a "
                        f"callable `reads(**static) -> (facts, arrays)`, but got {reads!r}.")

    def mark(clause):
        clause._effppl_forwards_static = forwarded
        clause._effppl_reads = reads
        return clause
    return mark


def forwards_when(predicate: Callable[..., bool]) -> Callable[[Callable], Callable]:
    """Declare that a clause forwards, unchanged, every perform whose static keyword arguments
    satisfy `predicate(**static)`: such a perform is left to the handlers outside, and this
    handler's parameters stay as they were, as if the clause were `lambda p, *args, resume,
    **static: resume(p, op(*args, **static))`, but with no clause traced or inlined for it.

    A handler that acts on a few sites only (the latent sites it gives values to) otherwise
    traces and compiles away a clause that only passes every other site on. `predicate` must
    depend on the static arguments only, and be true only where the clause would forward.

    >>> import jax, jax.numpy as jnp
    >>> from effppl.effects import Operation, handle
    >>> from effppl.effects.internal import forwards_when
    >>> tick = Operation("tick", out=lambda x, **static: jax.ShapeDtypeStruct((), jnp.float32))
    >>> @forwards_when(lambda *, label: label != "a")
    ... def double(p, x, *, resume, label):
    ...     return resume(p, tick(2.0 * x, label=label))
    >>> count = lambda p, x, *, resume, label: resume(p + 1.0, x)
    >>> inner = handle(lambda: tick(1.0, label="a") + tick(3.0, label="b"), clauses={tick: double})
    >>> outer = handle(inner, params=jnp.float32(0.0), clauses={tick: count},
    ...                ret=lambda p, r: (p, r))
    >>> [v.tolist() for v in outer()]
    [2.0, 5.0]
    """
    def mark(clause):
        clause._effppl_forwards_when = predicate
        return clause
    return mark


def passes_untraced(clause, key) -> bool:
    predicate = getattr(clause, "_effppl_forwards_when", None)
    return predicate is not None and bool(predicate(**dict(key.static)))


def clause_signature(clause, key):
    """`(signature, forwarded, read)`: the part of a perform signature `key` that a clause's
    jaxpr depends on (None for a clause not marked with `forwards_static`, or whose `reads` says
    its program is the site's own), the values of the static arguments it only forwards, and the
    arrays it reads for this perform (`reads`; None without it)."""
    forwarded = getattr(clause, "_effppl_forwards_static", None)
    reads = getattr(clause, "_effppl_reads", None)
    facts, read, extra = None, None, ()
    if reads is not None:
        facts, read = _read(clause, reads, key)
        leaves, tree = jax.tree_util.tree_flatten(read)
        extra = (facts, tree, tuple(abstractify(x) for x in leaves))
    if not forwarded or (reads is not None and facts is None):
        return None, None, read
    kept = tuple(kv for kv in key.static if kv[0] not in forwarded)
    return (clause, key.op, key.in_tree, key.in_avals, kept, *extra), \
        {k: v for k, v in key.static if k in forwarded}, read


def _read(clause, reads, key):
    what = f"The `reads` of the clause for operation `{key.op.name}`"
    out = reads(**dict(key.static))
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"{what} returned {out!r:.80}; it must return `(facts, arrays)`.")
    facts, read = out
    try:
        hash(facts)
    except TypeError:
        raise TypeError(f"{what} returned facts {facts!r:.80} that are not hashable.") from None
    check_arrays(read, f"{what} returned arrays that are not arrays")
    return facts, jax.tree_util.tree_map(
        lambda x: x if isinstance(x, jax.core.Tracer) else jnp.asarray(x), read)


class _LRU:
    """A small least-recently-used map (`functools.lru_cache` for values computed elsewhere),
    safe to share between threads."""

    def __init__(self, size):
        self.size, self.items, self.lock = size, collections.OrderedDict(), threading.Lock()

    def get(self, key):
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def put(self, key, value):
        with self.lock:
            self.items[key] = value
            if len(self.items) > self.size:
                self.items.popitem(last=False)


# Clause jaxprs shared between handlers, across calls: `(jaxpr, consts, kind)`, and the static
# values it forwards, keyed by `shared_key`. As JAX's own trace caches, this holds a clause's
# jaxpr for its code and its argument types; the consts are concrete arrays (never tracers).
SHARED_CLAUSES = _LRU(4096)


def shared_key(signature, clause, p_tree, p_avals, answer_tree, answer_avals):
    """A key under which the jaxpr of `clause` (marked `forwards_static`) at `signature` may be
    reused by later handlers, or None: only for a plain function that closes over nothing (or
    says with `reads` what its program takes from what it closes over), whose jaxpr then depends
    on its code, its globals, its argument types and the dtype settings (`_code_key`)."""
    if signature is None:
        return None
    key = _code_key(clause, (signature[1:], p_tree, tuple(p_avals), answer_tree,
                             tuple(answer_avals)),
                    closure_ok=getattr(clause, "_effppl_reads", None) is not None)
    try:
        hash(key)
    except TypeError:  # an unhashable static argument
        return None
    return key


# Return clauses shared between handlers, across calls, as `SHARED_CLAUSES`: `(jaxpr, consts,
# answer tree)` keyed by `_code_key` (a plain function's code and its argument types).
_SHARED_RETS = _LRU(1024)


def _code_key(fn, types_, closure_ok=False):
    """`(code, globals, types_, dtype settings, mesh)`: what the jaxpr of `fn` at argument types
    `types_` depends on when `fn` is a plain function that closes over nothing (else None;
    `closure_ok`: `fn` closes over values that do not change its program, `reads`). The mesh in
    force (inside a `shard_map`) counts: a jaxpr traced there has that mesh's types."""
    if not isinstance(fn, types.FunctionType) or (fn.__closure__ and not closure_ok) \
            or fn.__defaults__ or fn.__kwdefaults__:
        return None
    return (fn.__code__, id(fn.__globals__), types_, _compat.config_value("jax_enable_x64"),
            _compat.config_value("jax_numpy_dtype_promotion"), jax.sharding.get_abstract_mesh())


def trace_ret(ret, name, p_struct, r_struct):
    """The return clause's `(jaxpr, consts, answer tree)`, traced once per code and argument
    types for a plain function (`_code_key`)."""
    leaves, tree = jax.tree_util.tree_flatten((p_struct, r_struct))
    key = _code_key(ret, (tree, tuple(abstractify(x) for x in leaves)))
    cached = _SHARED_RETS.get(key) if key is not None else None
    if cached is not None:
        return cached
    try:
        traced = _compat.trace_to_jaxpr(ret, (p_struct, r_struct), f"{name}.ret")
    except TypeError:
        _check_signature(ret, f"The return clause `ret` of handler `{name}`",
                         "`ret(params, result)`", p_struct, r_struct)
        raise
    if key is not None and not any(isinstance(c, jax.core.Tracer) for c in traced[1]):
        _SHARED_RETS.put(key, traced)
    return traced


def only_top_level_performs(jaxpr):
    """Whether all the performs of a clause are equations of its own jaxpr (none inside a loop,
    branch or call, which `forwarding_to` would not rewrite)."""
    top = sum(e.primitive is perform_p for e in jaxpr.eqns)
    return top == sum(e.primitive is perform_p for e in iter_eqns(jaxpr))


def forwarding_to(closed, old, new):
    """The clause jaxpr `closed`, traced for a perform with forwarded static values `old`, with
    its performs that forward them passing `new` instead."""
    def rewrite(eqn):
        if eqn.primitive is not perform_p:
            return eqn
        static = eqn.params["static"]
        if not any(k in old and v == old[k] for k, v in static):
            return eqn
        static = tuple((k, new[k] if k in old and v == old[k] else v) for k, v in static)
        return eqn.replace(params={**eqn.params, "static": static})

    jaxpr = closed.jaxpr
    return _compat.ClosedJaxpr(jaxpr.replace(eqns=[rewrite(e) for e in jaxpr.eqns]), closed.consts)


def _check_signature(fn, what, call, *args, **kwargs):
    """Raise a `TypeError` saying `what` (e.g. "The clause for operation `get`") cannot be called
    as `call` (how it will be called) when `fn` does not accept these arguments. Called once a
    call of `fn` raised a `TypeError`, so that a well-formed call pays nothing for the check."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        raise TypeError(f"{what} cannot be called as {call}: {err}.") from None
    except ValueError:  # no signature to check (a builtin)
        pass


_MISSING = object()


def _safe_cast(x, dtype):
    """Whether `resume` may convert the value `x` to the operation's `dtype`: NumPy's
    `same_kind` rule (int -> float, float64 -> float32 are fine; float -> int, complex -> real,
    number -> bool are not)."""
    return np.can_cast(jnp.result_type(x), dtype, casting="same_kind")


def trace_clause(clause, key, p_tree, p_avals, answer_tree, answer_avals, scope_consts=None,
                  read=None):
    """Trace `clause` for the perform signature `key`: a jaxpr `(params..., args...) -> answer`
    and its closed-over values. With `scope_consts` (a pytree of `ShapeDtypeStruct`s), `clause`
    is instead a factory `clause(consts)` of the clause, and the jaxpr takes the constants first:
    `(consts..., params..., args...)` (a `with`-scoped handler, `_scope.py`). With `read` (the
    arrays its `reads` gives, `forwards_static`), the clause gets them as its keyword argument
    `read`, and the jaxpr takes them first: `(read..., params..., args...)`."""
    op = key.op
    out_tree, out_avals = op.result_type(key.in_tree, key.in_avals, key.static)

    def resume(new_params=_MISSING, value=_MISSING):
        if value is _MISSING:
            raise TypeError(f"The clause for operation `{op.name}` called `resume` without "
                            f"{'a value' if new_params is not _MISSING else 'arguments'}: call "
                            f"`resume(new_params, value)`.")
        np_leaves, np_tree = jax.tree_util.tree_flatten(new_params)
        v_leaves, v_tree = jax.tree_util.tree_flatten(value)
        check_arrays(new_params, f"The clause for operation `{op.name}` called `resume` with "
                                 f"new parameters that are not arrays")
        check_arrays(value, f"The clause for operation `{op.name}` called `resume` with a value "
                            f"that is not an array")
        np_avals = [abstractify(x) for x in np_leaves]
        v_avals = [abstractify(x) for x in v_leaves]
        if not _same_types(np_tree, np_avals, p_tree, p_avals):
            raise TypeError(f"The clause for operation `{op.name}` called resume with parameters "
                            f"of type {np_tree.unflatten(np_avals)}, but the handler's parameters "
                            f"have type {p_tree.unflatten(p_avals)}.")
        if not _same_types(v_tree, v_avals, out_tree, out_avals):
            castable = v_tree == out_tree and all(
                jnp.shape(x) == a.shape and _safe_cast(x, a.dtype)
                for x, a in zip(v_leaves, out_avals))
            v_leaves = [jnp.asarray(x, a.dtype) for x, a in zip(v_leaves, out_avals)] \
                if castable else None
            if v_leaves is None:
                raise TypeError(f"The clause for operation `{op.name}` resumed with a value of type "
                                f"{v_tree.unflatten(v_avals)}, but `{op.name}` returns "
                                f"{out_tree.unflatten(out_avals)}.")
        outs = resume_p.bind(*np_leaves, *v_leaves, answer_avals=answer_avals)
        return jax.tree_util.tree_unflatten(answer_tree, outs)

    def clause_flat(p, args, consts=None):
        nonlocal clause
        static = dict(key.static)
        if scope_consts is not None:
            clause = factory(consts)
        elif read is not None:
            static["read"] = consts
        try:
            return clause(p, *args, resume=resume, **static)
        except TypeError:
            _check_signature(clause, f"The clause for operation `{op.name}`",
                             f"`clause(params, *args, resume=..., **static)` with {len(args)} "
                             f"argument(s) and static keyword arguments "
                             f"{sorted(dict(key.static))}",
                             p, *args, resume=resume, **static)
            raise

    factory = clause
    p_struct = jax.tree_util.tree_unflatten(p_tree, p_avals)
    a_struct = jax.tree_util.tree_unflatten(key.in_tree, list(key.in_avals))
    leading = scope_consts if read is None else jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), read)
    if leading is None:
        closed, consts, tree = _compat.trace_to_jaxpr(clause_flat, (p_struct, a_struct),
                                                      f"clause of {op.name}")
    else:
        closed, consts, tree = _compat.trace_to_jaxpr(
            lambda c, p, args: clause_flat(p, args, c), (leading, p_struct, a_struct),
            f"clause of {op.name}")
    if not _same_types(tree, closed.out_avals, answer_tree, answer_avals):
        raise TypeError(f"The clause for operation `{op.name}` returned "
                        f"{tree.unflatten(closed.out_avals)}, but the handler's output type is "
                        f"{answer_tree.unflatten(list(answer_avals))} (the type of "
                        f"`ret(params, body(...))`); end the clause with `return resume(...)` or "
                        f"return a value of that type.")
    return closed, consts
