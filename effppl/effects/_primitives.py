"""Operations, handlers and the three primitives that stage them into jaxprs.

* `perform_p` performs an operation: params `op`, `in_tree`, `static`.
* `handle_p` installs a handler around a body jaxpr: params `body` and `spec` (a `HandlerSpec`
  holding one traced clause jaxpr per operation site found in the body, and the return jaxpr).
* `resume_p` stands for a call of `resume` inside a traced clause.

Everything is traced when `handle(...)` is called, in the user's trace, so clauses may close over
traced values (closure conversion, as `lax.cond` does); the translator (`_translate.py`) then
compiles the handlers away. Paper §3 (the calculus) and §6 (implementation).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import inspect
import sys
import threading
import types
from typing import Any, NamedTuple
from collections.abc import Callable, Mapping

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from . import _compat
from ._compat import abstractify
from ._errors import EffectError, UnhandledEffectError, UnsupportedHandlerError
from ._values import check_arrays

# --------------------------------------------------------------------------------------------
# Effects: the effect set of a jaxpr says, for free, which operations are still unhandled in it.


@dataclasses.dataclass(frozen=True)
class OpEffect(_compat.Effect):
    """The effect of performing `op`."""

    op: Operation


class HandleEffect(_compat.Effect):
    """Marks a jaxpr that still contains a handler to compile away."""

    def __repr__(self):
        return "Handle"


class ResumeEffect(_compat.Effect):
    """Marks a clause jaxpr that calls `resume`."""

    def __repr__(self):
        return "Resume"


class ScopeEffect(_compat.Effect):
    """Marks a jaxpr that still holds a `with`-scoped handler (`_scope.py`) to compile away."""

    def __repr__(self):
        return "Scope"


HANDLE_EFFECT = HandleEffect()
RESUME_EFFECT = ResumeEffect()
SCOPE_EFFECT = ScopeEffect()
_OUR_EFFECTS = (OpEffect, HandleEffect, ResumeEffect, ScopeEffect)
for _t in _OUR_EFFECTS:
    _compat.register_effect_type(_t)


def in_play(effects) -> bool:
    """Whether a jaxpr with these effects still needs translating."""
    return any(isinstance(e, _OUR_EFFECTS) for e in effects)


# --------------------------------------------------------------------------------------------
# Operations


class Operation:
    """An effect operation, performed by calling it.

    **Arguments:**
    - `name`: for error messages and printed jaxprs.
    - `out`: `out(*abstract_args, **static) -> pytree of jax.ShapeDtypeStruct`, the result type
      of performing the operation on arguments of these types (`()` for no result).
    - `unhandled`: optional `unhandled(**static) -> str`, how to fix a perform that no handler
      handles (a library built on effects tells its users which of its entry points to use);
      the default suggests `effppl.effects.handle`.
    - `batch_rule`: optional `batch_rule(args, dims, *, in_tree, static) -> (outs, out_dims)`,
      JAX's batching rule over the flattened arguments, for performs under a `jax.vmap` *inside*
      the handled region (typically: move the batch axis into the arguments and perform once,
      as effppl's `sample` does to act like a plate). Without one, such a perform is an
      `UnsupportedHandlerError`, except inside a `cond`/`while_loop` whose predicate depends on
      the mapped data, which runs element by element (a `lax.map`), performing per element.

    Calling `op(*args, **static)` performs it: `args` are pytrees of arrays, `static` keyword
    arguments must be hashable and reach the clause as keyword arguments.

    **Raises:** `TypeError` for a `name` that is not a str, an `out`, `unhandled` or `batch_rule`
    that is not callable, a perform with arguments that are not arrays or that `out` does not
    accept, and an `out` that does not return `jax.ShapeDtypeStruct`s (each naming the operation);
    `UnhandledEffectError` when performed (or translated) with no handler for it.

    **Example:** a float32 state read, performed with no handler around it:

    >>> import jax, jax.numpy as jnp
    >>> from effppl.effects import Operation, UnhandledEffectError
    >>> get = Operation("get", out=lambda: jax.ShapeDtypeStruct((), jnp.float32))
    >>> get
    Operation('get')
    >>> try:
    ...     get()
    ... except UnhandledEffectError as err:
    ...     print(err)  # doctest: +NORMALIZE_WHITESPACE
    Operation `get` was performed outside of any handler for it. Install one with
    `effppl.effects.handle(..., clauses={get: ...})`.
    """

    def __init__(self, name: str, out: Callable[..., Any],
                 unhandled: Callable[..., str] | None = None,
                 batch_rule: Callable[..., Any] | None = None):
        if not isinstance(name, str):
            raise TypeError(f"effppl.effects.Operation(name, ...) expected a str name (for "
                            f"messages and printed jaxprs), but got {type(name).__name__} "
                            f"{name!r}.")
        if not callable(out):
            raise TypeError(f"effppl.effects.Operation({name!r}, out=...) expected a callable "
                            f"giving the result type, but got {out!r}.")
        if unhandled is not None and not callable(unhandled):
            raise TypeError(f"effppl.effects.Operation({name!r}, unhandled=...) expected a "
                            f"callable giving a message, but got {unhandled!r}.")
        if batch_rule is not None and not callable(batch_rule):
            raise TypeError(f"effppl.effects.Operation({name!r}, batch_rule=...) expected a "
                            f"callable, but got {batch_rule!r}.")
        self.name = name
        self.out = out
        self.unhandled = unhandled
        self.batch_rule = batch_rule

    def how_to_handle(self, static) -> str:
        """The fix suggested when no handler handles a perform with static kwargs `static`."""
        if self.unhandled is not None:
            return self.unhandled(**dict(static))
        return f"Install one with `effppl.effects.handle(..., clauses={{{self.name}: ...}})`."

    def __repr__(self):
        return f"Operation({self.name!r})"

    def __call__(self, *args, **static):
        leaves, in_tree = jax.tree_util.tree_flatten(args)
        try:
            leaves = [x if isinstance(x, jax.core.Tracer) else jnp.asarray(x) for x in leaves]
        except (TypeError, ValueError):
            check_arrays(args, f"Operation `{self.name}` was performed with an argument that is "
                               f"not an array")
            raise
        static_items = tuple(sorted(static.items()))
        try:
            hash(static_items)
        except TypeError:
            raise TypeError(f"Static keyword arguments of operation `{self.name}` must be hashable, "
                            f"but got {static!r}.") from None
        out_tree, _ = self.result_type(in_tree, tuple(abstractify(x) for x in leaves), static_items)
        outs = perform_p.bind(*leaves, op=self, in_tree=in_tree, static=static_items)
        return jax.tree_util.tree_unflatten(out_tree, outs)

    def result_type(self, in_tree, in_avals, static):
        """`(out_tree, out_avals)` of performing on flattened arguments of types `in_avals`."""
        return _result_type(self, in_tree, tuple(in_avals), static)


@functools.lru_cache(maxsize=4096)
def _result_type(op, in_tree, in_avals, static):
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in in_avals]
    args = jax.tree_util.tree_unflatten(in_tree, structs)
    try:
        inspect.signature(op.out).bind(*args, **dict(static))
    except TypeError as err:
        raise TypeError(f"Operation `{op.name}` was performed with {len(args)} argument(s) and "
                        f"static keyword arguments {sorted(dict(static))}, which its result type "
                        f"function `out` does not accept: {err}.") from None
    except ValueError:  # no signature to check (a builtin)
        pass
    out = op.out(*args, **dict(static))
    leaves, out_tree = jax.tree_util.tree_flatten(out)
    try:
        return out_tree, tuple(abstractify(x) for x in leaves)
    except TypeError:
        raise TypeError(f"The result type function `out` of operation `{op.name}` returned "
                        f"{out!r:.100}: it must return a pytree of `jax.ShapeDtypeStruct` (`()` "
                        f"for no result).") from None


class SiteKey(NamedTuple):
    """Identifies one kind of perform: operation, argument structure and types, static kwargs."""

    op: Operation
    in_tree: Any
    in_avals: tuple
    static: tuple


def site_key(eqn) -> SiteKey:
    avals = tuple(abstractify(v.aval) for v in eqn.invars)
    return SiteKey(eqn.params["op"], eqn.params["in_tree"], avals, eqn.params["static"])


perform_p = _compat.Primitive("perform")
perform_p.multiple_results = True


def _perform_abstract_eval(*avals, op, in_tree, static):
    _, out_avals = op.result_type(in_tree, tuple(abstractify(a) for a in avals), static)
    return list(out_avals), {OpEffect(op)}


def _perform_unhandled(*args, op, in_tree, static, **_):
    raise UnhandledEffectError(
        f"Operation `{op.name}` was performed outside of any handler for it. "
        f"{op.how_to_handle(static)}")


def _perform_jvp(primals, tangents, *, op, static, **_):
    raise UnsupportedHandlerError(
        f"Operation `{op.name}` is performed under `jax.grad`/`jax.jvp`: differentiate the handled "
        f"function from outside instead (`jax.grad(handle(...))`), not the operation inside it. "
        f"(With no handler at all: {op.how_to_handle(static)})")


def _perform_batch(args, dims, *, op, in_tree, static):
    rule = getattr(op, "batch_rule", None)
    if rule is None:
        raise UnsupportedHandlerError(
            f"Operation `{op.name}` is performed under `jax.vmap` *inside* a handled region, and "
            f"it declares no `batch_rule` (`Operation(..., batch_rule=...)`); apply `jax.vmap` "
            f"outside the handler instead.")
    return rule(args, dims, in_tree=in_tree, static=static)


perform_p.def_effectful_abstract_eval(_perform_abstract_eval)
perform_p.def_impl(_perform_unhandled)
_compat.ad.primitive_jvps[perform_p] = _perform_jvp
_compat.batching.primitive_batchers[perform_p] = _perform_batch
_compat.mlir.register_lowering(perform_p, _perform_unhandled)

resume_p = _compat.Primitive("resume")
resume_p.multiple_results = True


def _resume_abstract_eval(*avals, answer_avals):
    return list(answer_avals), {RESUME_EFFECT}


def _resume_outside(*args, **_):
    raise EffectError("`resume` was called outside of the handler clause that received it.")


def _resume_transformed(what):
    def rule(*args, **_):
        raise UnsupportedHandlerError(
            f"`resume` is called under {what} inside a clause; call it at the clause's top level "
            f"(each call is one resumption of the rest of the handled computation).")
    return rule


resume_p.def_effectful_abstract_eval(_resume_abstract_eval)
resume_p.def_impl(_resume_outside)
_compat.batching.primitive_batchers[resume_p] = _resume_transformed("`jax.vmap`")
_compat.ad.primitive_jvps[resume_p] = _resume_transformed("`jax.grad`/`jax.jvp`")
_compat.mlir.register_lowering(resume_p, _resume_outside)


# --------------------------------------------------------------------------------------------
# Handlers


class ClauseKind(enum.StrEnum):
    """How a clause uses `resume` (paper §5), which decides how it is compiled away."""

    TAIL = "tail"          # ends by returning `resume(...)`, called once: inlined in place
    ABORTIVE = "abortive"  # never resumes: the rest of the handled computation is dropped
    GENERAL = "general"    # anything else: continuation-passing with static continuations


class Clause(NamedTuple):
    """One clause traced for one site: `jaxpr(consts..., params..., args...) -> answer`."""

    jaxpr: Any          # ClosedJaxpr
    consts: slice       # where its closed-over values sit among the frame's consts
    kind: ClauseKind


@dataclasses.dataclass(frozen=True, eq=False)
class HandlerSpec:
    """The static part of one installed handler (hashable by identity)."""

    name: str
    ops: frozenset
    clauses: dict        # SiteKey -> Clause
    ret: Any             # ClosedJaxpr(ret_consts..., params..., body outs...) -> answer, or None
    ret_consts: slice
    n_params: int
    answer_avals: tuple
    passed: frozenset = frozenset()  # SiteKeys of performs its clause forwards untraced

    def handles(self, key) -> bool:
        """Whether a perform of signature `key` inside the body is handled here (else it
        reaches the handlers outside, as if this one were absent)."""
        return key.op in self.ops and key not in self.passed

    def jaxprs(self):
        yield from (c.jaxpr for c in self.clauses.values())
        if self.ret is not None:
            yield self.ret

    def __repr__(self):
        return f"HandlerSpec({self.name})"


handle_p = _compat.Primitive("handle")
handle_p.multiple_results = True


def _handle_effects(body, spec):
    passed = {key.op for key in spec.passed}
    handled = {OpEffect(op) for op in spec.ops if op not in passed}
    effs = {e for e in body.effects if e not in handled}
    for j in spec.jaxprs():
        effs |= {e for e in j.effects if e is not RESUME_EFFECT}
    return effs | {HANDLE_EFFECT}


def _handle_abstract_eval(*avals, body, spec, n_body_consts, n_frame_consts):
    return list(spec.answer_avals), _handle_effects(body, spec)


handle_p.def_effectful_abstract_eval(_handle_abstract_eval)
# Its implementation, JVP, batching and lowering rules (eliminate the handler, then run, or
# differentiate, batch, lower the plain jaxpr) are registered by the translator, `_translate.py`.


def _perform_sites(jaxpr, ops):
    """The `SiteKey`s of every perform of `ops` that reaches a handler around `jaxpr`: at
    any depth, except those a nested handler handles, whose clauses are searched instead."""
    from ._walk import iter_performs  # it builds on this module
    return dict.fromkeys(p.key for p in iter_performs(jaxpr, ops, distinct=True))


def _count_resumes(jaxpr):
    from ._walk import iter_eqns  # it builds on this module
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
    body_jaxpr, body_consts, arg_leaves, body_tree = _compat.trace_call(body, args, kwargs, name)
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
        ret_jaxpr, ret_consts, answer_tree = _trace_ret(ret, name, p_struct, r_struct)
        answer_avals = tuple(ret_jaxpr.out_avals)
        ret_slice = slice(0, len(ret_consts))
        frame_consts += ret_consts

    traced = {}
    by_signature = {}  # signature -> (the traced Clause, its closed-over values, forwarded values)
    passed = set()
    ops = frozenset(clauses)
    for key in _perform_sites(body_jaxpr.jaxpr, ops):
        clause = clauses[key.op]
        if _passes(clause, key):
            passed.add(key)
            continue
        signature, forwarded, read = _signature(clause, key)
        read_leaves = jax.tree_util.tree_leaves(read)
        if signature in by_signature:  # the same clause but for forwarded static arguments
            template, closed_over, template_forwarded = by_signature[signature]
            clause_jaxpr = _forwarding_to(template.jaxpr, template_forwarded, forwarded)
            if not read_leaves:  # the same inputs: the template's
                traced[key] = template._replace(jaxpr=clause_jaxpr)
                continue
            consts, kind = closed_over, template.kind
        else:
            shared = _shared_key(signature, clause, p_tree, p_avals, answer_tree, answer_avals)
            cached = _SHARED_CLAUSES.get(shared) if shared is not None else None
            if cached is not None:  # traced by an earlier handler of the same code and types
                (template, consts, kind), template_forwarded = cached
                clause_jaxpr = _forwarding_to(template, template_forwarded, forwarded)
            else:
                clause_jaxpr, consts = _trace_clause(clause, key, p_tree, p_avals, answer_tree,
                                                     answer_avals, read=read)
                kind = classify_clause(clause_jaxpr)
                if signature is None or not _only_top_level_performs(clause_jaxpr.jaxpr):
                    signature = None  # not reusable for another signature
                elif shared is not None \
                        and not any(isinstance(c, jax.core.Tracer) for c in consts):
                    _SHARED_CLAUSES.put(shared, ((clause_jaxpr, consts, kind), forwarded))
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


def _passes(clause, key) -> bool:
    predicate = getattr(clause, "_effppl_forwards_when", None)
    return predicate is not None and bool(predicate(**dict(key.static)))


def _signature(clause, key):
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
# values it forwards, keyed by `_shared_key`. As JAX's own trace caches, this holds a clause's
# jaxpr for its code and its argument types; the consts are concrete arrays (never tracers).
_SHARED_CLAUSES = _LRU(4096)


def _shared_key(signature, clause, p_tree, p_avals, answer_tree, answer_avals):
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


# Return clauses shared between handlers, across calls, as `_SHARED_CLAUSES`: `(jaxpr, consts,
# answer tree)` keyed by `_code_key` (a plain function's code and its argument types).
_SHARED_RETS = _LRU(1024)


def _code_key(fn, types_, closure_ok=False):
    """`(code, globals, types_, dtype settings)`: what the jaxpr of `fn` at argument types
    `types_` depends on when `fn` is a plain function that closes over nothing (else None;
    `closure_ok`: `fn` closes over values that do not change its program, `reads`)."""
    if not isinstance(fn, types.FunctionType) or (fn.__closure__ and not closure_ok) \
            or fn.__defaults__ or fn.__kwdefaults__:
        return None
    return (fn.__code__, id(fn.__globals__), types_, jax.config.jax_enable_x64,
            jax.config.jax_numpy_dtype_promotion)


def _trace_ret(ret, name, p_struct, r_struct):
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


def _only_top_level_performs(jaxpr):
    """Whether all the performs of a clause are equations of its own jaxpr (none inside a loop,
    branch or call, which `_forwarding_to` would not rewrite)."""
    from ._walk import iter_eqns  # it builds on this module
    top = sum(e.primitive is perform_p for e in jaxpr.eqns)
    return top == sum(e.primitive is perform_p for e in iter_eqns(jaxpr))


def _forwarding_to(closed, old, new):
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


def _trace_clause(clause, key, p_tree, p_avals, answer_tree, answer_avals, scope_consts=None,
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
