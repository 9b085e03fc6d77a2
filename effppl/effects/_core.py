"""The effects core: effects, operations, and the primitives that stage them into jaxprs.

* `perform_p` performs an operation: params `op`, `in_tree`, `static`.
* `handle_p` installs a handler around a body jaxpr: params `body` and `spec` (a `HandlerSpec`
  holding one traced clause jaxpr per operation site found in the body, and the return jaxpr).
* `resume_p` stands for a call of `resume` inside a traced clause.
* `enter_p`/`exit_p` mark a block scoped by a `with`-handler (`_scope.py`); `split_scopes`
  finds those blocks in a jaxpr.

Everything else of the library builds on this module, and it on none of them: how clauses are
traced and classified is `_clauses.py`, `handle` is `_handle.py`, and the translator
(`_translate.py`) registers `handle_p`'s implementation, JVP, batching and lowering rules, which
compile the handlers away first. Paper §3 (the calculus) and §6 (implementation).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.core
import jax.numpy as jnp

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
    - `default`: optional `default(*args, **static) -> result`, what performing means where no
      handler handles the operation (eagerly, under `jax.jit`/`grad`/`vmap` with no handler
      around, or in a program eliminated with none): plain JAX code run in the perform's
      place. Without one, such a perform raises `UnhandledEffectError`. (`fail_op`'s default
      raises `FailureError`.)

    Calling `op(*args, **static)` performs it: `args` are pytrees of arrays, `static` keyword
    arguments must be hashable and reach the clause as keyword arguments.

    **Raises:** `TypeError` for a `name` that is not a str, an `out`, `unhandled` or `batch_rule`
    that is not callable, a perform with arguments that are not arrays or that `out` does not
    accept, and an `out` that does not return `jax.ShapeDtypeStruct`s (each naming the operation);
    `UnhandledEffectError` when performed (or translated) with no handler for it and no
    `default`.

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
                 batch_rule: Callable[..., Any] | None = None,
                 default: Callable[..., Any] | None = None):
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
        for what, fn in (("batch_rule", batch_rule), ("default", default)):
            if fn is not None and not callable(fn):
                raise TypeError(f"effppl.effects.Operation({name!r}, {what}=...) expected a "
                                f"callable, but got {fn!r}.")
        self.name = name
        self.out = out
        self.unhandled = unhandled
        self.batch_rule = batch_rule
        self.default = default

    def run_default(self, leaves, in_tree, static):
        """The flattened result of `default` on the flattened arguments `leaves`."""
        assert self.default is not None
        args = jax.tree_util.tree_unflatten(in_tree, list(leaves))
        return jax.tree_util.tree_leaves(self.default(*args, **dict(static)))

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
    if op.default is not None:
        return op.run_default(args, in_tree, static)
    raise UnhandledEffectError(
        f"Operation `{op.name}` was performed outside of any handler for it. "
        f"{op.how_to_handle(static)}")


def _perform_lowering(ctx, *args, op, in_tree, static):
    if op.default is None:
        _perform_unhandled(op=op, in_tree=in_tree, static=static)
    return _compat.mlir.lower_fun(lambda *a: op.run_default(a, in_tree, static),
                                  multiple_results=True)(ctx, *args)


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
_compat.mlir.register_lowering(perform_p, _perform_lowering)

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


# --------------------------------------------------------------------------------------------
# Scope markers: a block scoped by a `with`-handler (`_scope.py`)


enter_p = _compat.Primitive("scope_enter")
enter_p.multiple_results = True
exit_p = _compat.Primitive("scope_exit")
exit_p.multiple_results = True


def _marker_abstract_eval(*avals, spec, **_):
    return [], {SCOPE_EFFECT}


def _marker_unhandled(*args, spec, **_):
    return []  # outside any translation: the performs inside the block report the missing handler


def _marker_batch(args, dims, *, spec, **_):
    raise UnsupportedHandlerError(
        f"The `with`-scoped handler `{spec.name}` is used inside a `jax.vmap` within the handled "
        f"region; put the `with` block outside the vmapped function, or wrap the function in the "
        f"handler instead.")


for _p in (enter_p, exit_p):
    _p.def_effectful_abstract_eval(_marker_abstract_eval)
    _p.def_impl(_marker_unhandled)
    _compat.batching.primitive_batchers[_p] = _marker_batch
    _compat.mlir.register_lowering(_p, lambda ctx, *a, **kw: [])


def split_scopes(eqns):
    """The equations of one jaxpr level as `(eqn, None)` items, with each outermost `with`
    block as one `(enter_eqn, body_eqns)` item (after calling the scope's `prepare`)."""
    out, depth, start = [], 0, 0
    for i, eqn in enumerate(eqns):
        if eqn.primitive is enter_p:
            if depth == 0:
                start = i
            depth += 1
        elif eqn.primitive is exit_p:
            depth -= 1
            if depth == 0:
                enter = eqns[start]
                enter.params["spec"].prepare(eqns[start + 1:i])
                out.append((enter, eqns[start + 1:i]))
        elif depth == 0:
            out.append((eqn, None))
    return out
