"""`handle`: install a handler around a function, staging one `handle_p` equation (paper §3)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.core

from . import _compat
from ._clauses import (
    SHARED_CLAUSES,
    classify_clause,
    clause_signature,
    forwarding_to,
    only_top_level_performs,
    passes_untraced,
    perform_sites,
    shared_key,
    trace_clause,
    trace_ret,
)
from ._compat import abstractify
from ._core import Clause, HandlerSpec, Operation, handle_p
from ._values import check_arrays


def handle(body: Callable, params: Any = (), clauses: Mapping[Operation, Callable] | None = None,
           ret: Callable | None = None) -> Callable:
    """Install a handler around `body`; returns the handled function.

    **Arguments:**
    - `body`: the computation; `handle(body, ...)(*args, **kwargs)` runs `body(*args, **kwargs)`.
      It may close over traced values.
    - `params`: a pytree of arrays, the initial handler parameter; or a function
      `params(body_jaxpr) -> pytree of arrays` of the body's traced (effectful) jaxpr, for a
      handler whose parameters depend on what the body performs (read it, do not run it).
    - `clauses`: `{op: clause}` with `clause(params, *op_args, resume, **static)` returning the
      handler's output; `resume(new_params, value)` runs the rest of the handled computation
      (re-handled, with the new parameter) and returns its output.
    - `ret`: `ret(params, result)`, the return clause; default returns `result`.

    **Returns:** a function whose output has the type of `ret(params, body(...))`. It works eagerly
    and under `jax.jit`/`grad`/`vmap` applied outside it (the handler is compiled away first).

    **Raises:** `TypeError` when `body`, `ret` or a clause is not callable (or cannot be called
    with the arguments it will get), `params` is not a pytree of arrays, or a clause's result or
    `resume`'s arguments have the wrong type
    (naming the operation; `resume`'s value may differ from the operation's result type only by a
    dtype of the same kind, NumPy's `same_kind` casting, and is converted); the translator raises
    `UnhandledEffectError` / `UnsupportedHandlerError`.

    **Example:** a state handler: `get` reads the parameter, `put` replaces it, and `ret` returns
    the final state beside the body's result.

    >>> import jax, jax.numpy as jnp
    >>> from effppl.effects import Operation, handle
    >>> get = Operation("get", out=lambda: jax.ShapeDtypeStruct((), jnp.float32))
    >>> put = Operation("put", out=lambda x: ())
    >>> def body(x):
    ...     put(get() * x)
    ...     return get() + 1
    >>> state = handle(body, params=jnp.float32(3.0),
    ...                clauses={get: lambda p, resume: resume(p, p),
    ...                         put: lambda p, v, resume: resume(v, ())},
    ...                ret=lambda p, r: (p, r))
    >>> [v.tolist() for v in state(2.0)]
    [6.0, 7.0]
    >>> [v.tolist() for v in jax.jit(state)(5.0)]
    [15.0, 16.0]

    **References:** paper §3 (the `handle` construct), §6 (effecax's interface).
    """
    if not callable(body):
        raise TypeError(f"effppl.effects.handle(body, ...) expected a callable body, but got "
                        f"{type(body).__name__} {body!r:.60}.")
    if ret is not None and not callable(ret):
        raise TypeError(f"effppl.effects.handle(..., ret=...) expected a callable return clause "
                        f"`ret(params, result)`, or None, but got {type(ret).__name__} "
                        f"{ret!r:.60}.")
    if not callable(params):
        check_arrays(params, "effppl.effects.handle(..., params=...)")
    clauses = dict(clauses or {})
    for op, clause in clauses.items():
        if not isinstance(op, Operation) or not callable(clause):
            raise TypeError(f"effppl.effects.handle(..., clauses=...) expected a mapping from "
                            f"Operation to callable clause, but got {op!r}: {clause!r}.")
    name = getattr(body, "__name__", "body")

    @functools.wraps(body)
    def handled(*args, **kwargs):
        try:
            return _bind_handle(body, name, params, clauses, ret, args, kwargs)
        except RecursionError as err:
            if str(err).startswith("Handlers nested"):
                raise
            raise RecursionError(
                f"Handlers nested too deeply (around handler `{name}`): tracing each nested "
                f"handler takes several Python frames, and Python's recursion limit "
                f"({sys.getrecursionlimit()}) was reached. Nest fewer handlers (one handler can "
                f"handle several operations), or raise the limit with "
                f"`sys.setrecursionlimit`.") from None

    return handled


def _bind_handle(body, name, params, clauses, ret, args, kwargs):
    with _compat.handled_region():
        body_jaxpr, body_consts, arg_leaves, body_tree = _compat.trace_call(body, args, kwargs,
                                                                            name)
    body_jaxpr = _compat.without_dead_eqns(body_jaxpr)
    if callable(params):  # parameters that depend on what the body performs
        params = params(body_jaxpr.jaxpr)
        check_arrays(params, "effppl.effects.handle(..., params=f): f(body_jaxpr)")
    p_leaves, p_tree = jax.tree_util.tree_flatten(params)
    p_avals = [abstractify(x) for x in p_leaves]
    body_avals = list(body_jaxpr.out_avals)
    p_struct = jax.tree_util.tree_unflatten(p_tree, p_avals)
    r_struct = jax.tree_util.tree_unflatten(body_tree, body_avals)
    frame_consts = []
    if ret is None:
        ret_jaxpr, answer_tree, answer_avals = None, body_tree, tuple(body_avals)
        ret_slice = slice(0, 0)
    else:
        ret_jaxpr, ret_consts, answer_tree = trace_ret(ret, name, p_struct, r_struct)
        answer_avals = tuple(ret_jaxpr.out_avals)
        ret_slice = slice(0, len(ret_consts))
        frame_consts += ret_consts

    traced = {}
    by_signature = {}  # signature -> (the traced Clause, its closed-over values, forwarded values)
    passed = set()
    ops = frozenset(clauses)
    for key in perform_sites(body_jaxpr.jaxpr, ops):
        clause = clauses[key.op]
        if passes_untraced(clause, key):
            passed.add(key)
            continue
        signature, forwarded, read = clause_signature(clause, key)
        read_leaves = jax.tree_util.tree_leaves(read)
        if signature in by_signature:  # the same clause but for forwarded static arguments
            template, closed_over, template_forwarded = by_signature[signature]
            clause_jaxpr = forwarding_to(template.jaxpr, template_forwarded, forwarded)
            if not read_leaves:  # the same inputs: the template's
                traced[key] = template._replace(jaxpr=clause_jaxpr)
                continue
            consts, kind = closed_over, template.kind
        else:
            shared = shared_key(signature, clause, p_tree, p_avals, answer_tree, answer_avals)
            cached = SHARED_CLAUSES.get(shared) if shared is not None else None
            if cached is not None:  # traced by an earlier handler of the same code and types
                (template, consts, kind), template_forwarded = cached
                clause_jaxpr = forwarding_to(template, template_forwarded, forwarded)
            else:
                clause_jaxpr, consts = trace_clause(clause, key, p_tree, p_avals, answer_tree,
                                                     answer_avals, read=read)
                kind = classify_clause(clause_jaxpr)
                if signature is None or not only_top_level_performs(clause_jaxpr.jaxpr):
                    signature = None  # not reusable for another signature
                elif shared is not None \
                        and not any(isinstance(c, jax.core.Tracer) for c in consts):
                    SHARED_CLAUSES.put(shared, ((clause_jaxpr, consts, kind), forwarded))
        start = len(frame_consts)
        frame_consts += [*consts, *read_leaves]  # the jaxpr's leading inputs, in this order
        traced[key] = Clause(clause_jaxpr, slice(start, len(frame_consts)), kind)
        if signature is not None and signature not in by_signature:
            by_signature[signature] = traced[key], consts, forwarded
    spec = HandlerSpec(name, ops, traced, ret_jaxpr, ret_slice, len(p_leaves), answer_avals,
                       frozenset(passed))
    outs = handle_p.bind(*body_consts, *frame_consts, *p_leaves, *arg_leaves, body=body_jaxpr,
                         spec=spec, n_body_consts=len(body_consts),
                         n_frame_consts=len(frame_consts))
    return jax.tree_util.tree_unflatten(answer_tree, outs)
