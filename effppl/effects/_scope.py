"""Handlers scoped by a `with` block: `with scoped(clauses, params=...): ...`.

A Python `with` block has no body function to trace, so its handler cannot be a `handle`
equation. Instead `__enter__` stages an `enter` marker (its inputs: the handler's constants and
initial parameters) and `__exit__` an `exit` marker, both in the jaxpr being traced and so at the
same level of it. The translator treats the equations between them as a handled body: `enter`
pushes a frame, `exit` pops it, and in between the handler acts as an installed one (its
parameters threaded through loops and branches like any other frame's).

The clauses are traced lazily, per perform signature, from `clauses(consts)`: a function of the
handler's constants (as values of the trace that asks), so they can be traced wherever they are
needed (site discovery of an enclosing handler, the translator). Scoped handlers must be
tail-resumptive (every PPL handler is).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.core

from . import _compat
from ._clauses import classify_clause, trace_clause
from ._compat import abstractify
from ._core import Clause, ClauseKind, SiteKey, enter_p, exit_p
from ._errors import UnsupportedHandlerError


class _LazyClauses(dict):
    """`SiteKey -> Clause`, each traced on first use from the scope's clause factory."""

    def __init__(self, spec):
        super().__init__()
        self.spec = spec

    def __missing__(self, key: SiteKey):
        spec = self.spec
        consts = jax.tree_util.tree_unflatten(spec.const_tree, [
            jax.ShapeDtypeStruct(a.shape, a.dtype) for a in spec.const_avals])

        def factory(c):
            return spec.make_clauses(c, spec.region_info)[key.op]

        closed, closed_over = trace_clause(factory, key, spec.param_tree,
                                            list(spec.param_avals), _EMPTY, (),
                                            scope_consts=consts)
        if any(isinstance(x, jax.core.Tracer) for x in closed_over):
            raise UnsupportedHandlerError(
                f"A clause of the `with`-scoped handler `{spec.name}` closes over traced values; "
                f"pass them in the handler's constants instead.")
        if closed_over:  # concrete arrays the clause read: constants of its jaxpr
            fun = _compat.jaxpr_as_fun(closed)
            closed = _compat.trace_to_closed_jaxpr(
                lambda *xs: fun(*closed_over, *xs), closed.in_avals[len(closed_over):],
                "scoped clause")
        clause = Clause(closed, slice(0, len(spec.const_avals)), classify_clause(closed))
        if clause.kind is not ClauseKind.TAIL:
            raise UnsupportedHandlerError(
                f"The `with`-scoped handler `{spec.name}` has a clause for `{key.op.name}` that is "
                f"not tail-resumptive (it must end with `return resume(...)`); install it around "
                f"a function with `effects.handle(...)` instead of a `with` block.")
        self[key] = clause
        return clause


_EMPTY = jax.tree_util.tree_structure(())


@dataclasses.dataclass(eq=False)
class ScopeSpec:
    """The static part of a `with`-scoped handler (hashable by identity); quacks like
    `HandlerSpec` for the translator and the site walkers."""

    name: str
    ops: frozenset
    make_clauses: Callable
    const_tree: Any
    const_avals: tuple
    param_tree: Any
    param_avals: tuple
    setup: Callable | None = None
    region_info: Any = None
    prepared: bool = False
    ret: Any = None
    ret_consts: Any = None
    answer_avals: tuple = ()

    def __post_init__(self):
        self.clauses = _LazyClauses(self)
        self.n_params = len(self.param_avals)

    def handles(self, key) -> bool:
        """Whether a perform of signature `key` in the block is handled here."""
        return key.op in self.ops

    def prepare(self, region_eqns):
        """Called with the equations of the block before any clause is traced."""
        if not self.prepared:
            self.region_info = self.setup(region_eqns) if self.setup is not None else None
            self.prepared = True

    def jaxprs(self):
        yield from (c.jaxpr for c in self.clauses.values())

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"ScopeSpec({self.name})"


class scoped:
    """A handler for the operations performed inside a `with` block, compiled away.

    **Arguments:**
    - `clauses`: `clauses(consts, info) -> {op: clause}`, the clauses (as for `handle`, each
      ending with `return resume(...)`) given the handler's constants and `info`, what `setup`
      returned. It is called while tracing, possibly several times, with `consts` as values of
      the trace that asks: the clauses must read arrays from `consts`, not from a closure.
    - `params`: a pytree of arrays, the initial handler parameter.
    - `consts`: a pytree of arrays the clauses read.
    - `setup`: optional `setup(eqns) -> info`, called once with the block's jaxpr equations
      before any clause is traced (e.g. to analyse the operations performed in the block).

    Inside a function that is then translated (`eliminate`, `handle`), the block is handled as if
    its body were wrapped in `handle`. The block's final parameters are not returned.

    **Raises:** `UnsupportedHandlerError` for a clause that is not tail-resumptive, or a general
    clause of a handler outside the block performed inside it.

    **Example:** a counter in a block: each `get` reads the constant times the parameter and
    increments the parameter (2 * 10 + 3 * 10 + 1 = 51).

    >>> import jax, jax.numpy as jnp
    >>> from effppl.effects import Operation, eliminate, scoped
    >>> get = Operation("get", out=lambda: jax.ShapeDtypeStruct((), jnp.float32))
    >>> def f(x):
    ...     clauses = lambda consts, info: {get: lambda p, resume: resume(p + 1, p * consts)}
    ...     with scoped(clauses, params=jnp.float32(2.0), consts=jnp.float32(10.0)):
    ...         y = get() + get()
    ...     return y + x
    >>> eliminate(f)(1.0).tolist()
    51.0
    """

    def __init__(self, clauses: Callable, params: Any = (), consts: Any = (),
                 setup: Callable | None = None, name: str = "scoped"):
        self.make_clauses, self.params, self.consts = clauses, params, consts
        self.setup, self.name = setup, name

    def __enter__(self):
        c_leaves, c_tree = jax.tree_util.tree_flatten(self.consts)
        p_leaves, p_tree = jax.tree_util.tree_flatten(self.params)
        ops = frozenset(self.make_clauses(self.consts, None))
        self.spec = ScopeSpec(self.name, ops, self.make_clauses, c_tree,
                              tuple(abstractify(x) for x in c_leaves), p_tree,
                              tuple(abstractify(x) for x in p_leaves), self.setup)
        enter_p.bind(*c_leaves, *p_leaves, spec=self.spec, n_consts=len(c_leaves))
        self._region = _compat.handled_region()
        self._region.__enter__()
        return self

    def __exit__(self, exc_type, *exc):
        self._region.__exit__(exc_type, *exc)
        if exc_type is None:
            exit_p.bind(spec=self.spec)
        return False
