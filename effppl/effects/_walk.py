"""The one owner of control flow outside the translator: where a program performs operations.

`iter_performs` walks an effectful jaxpr and yields each perform that reaches the handlers around
it, with the loops and `cond` branches it sits in; `iter_eqns` yields every equation at any
depth. Code built on `effppl.effects` (a site analysis, a batching rule) reads programs through
these two and never names `scan`, `while` or `cond` itself.

A perform handled by a handler nested in the program is not reported: its clause is walked
instead, in the perform's place (the clause's own performs go to the handlers outside, paper
§5.2), and they are reported with the loops and branches of the perform they stand for.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from . import _compat
from ._bounded import bounded_while_p
from ._core import SiteKey, handle_p, perform_p, site_key, split_scopes


class Loop(NamedTuple):
    """A loop around a perform: `length` iterations (`None` for a `while_loop`, whose number of
    iterations is not static), `reverse` for a `scan(..., reverse=True)`."""

    length: int | None
    reverse: bool = False


class Perform(NamedTuple):
    """One perform that reaches the handlers around the walked program.

    - `eqn`: the `perform` equation (the clause's own re-perform when a nested handler handled
      the program's perform).
    - `loops`: the `Loop`s around it, outermost first.
    - `branch`: `((cond_id, index), ...)`, the `cond` branches it sits in, outermost first;
      `cond_id` identifies one `cond` equation within the walk. Two performs are in mutually
      exclusive branches when they take different indices of one `cond` (`exclusive`).
    - `origin`: the program's own `perform` equation this one stands for (its source location
      names where the user performed the operation); `eqn` itself outside nested handlers.
    """

    eqn: Any
    loops: tuple[Loop, ...]
    branch: tuple[tuple[int, int], ...]
    origin: Any

    @property
    def op(self):
        return self.eqn.params["op"]

    @property
    def key(self) -> SiteKey:
        """The perform's signature: operation, argument types and static keyword arguments."""
        return site_key(self.eqn)

    @property
    def source(self) -> str:
        """`file:line` where the program performed the operation (`origin`)."""
        return _compat.summarize_source(self.origin.source_info)


def exclusive(a: Perform, b: Perform) -> bool:
    """Whether `a` and `b` sit in different branches of one `cond` (never both run)."""
    taken = dict(a.branch)
    return any(cond in taken and taken[cond] != index for cond, index in b.branch)


def iter_performs(program, ops=None, *, distinct: bool = False) -> Iterator[Perform]:
    """Each perform in `program` that reaches the handlers around it, in program order.

    **Arguments:**
    - `program`: a `Jaxpr`, or a sequence of its equations (e.g. the body of a `with` block).
    - `ops`: only performs of these operations (a collection of `Operation`s); default all.
    - `distinct`: walk a nested handler's clause once per perform signature (`SiteKey`), not
      once per perform. Enough for collecting signatures, and linear in the number of
      signatures rather than of performs; the loops and branches reported are then those of
      the first perform of each signature.
    """
    eqns = program.eqns if hasattr(program, "eqns") else program
    for perform in _walk(eqns, (), (), None, distinct):
        if ops is None or perform.op in ops:
            yield perform


def _walk(eqns: Sequence, loops, branch, origin, distinct) -> Iterator[Perform]:
    for eqn, block in split_scopes(eqns):
        prim, params = eqn.primitive, eqn.params
        if prim is perform_p:
            yield Perform(eqn, loops, branch, origin or eqn)
        elif block is None and not eqn.effects:
            continue  # performs nothing: every perform, handler or scope inside has an effect
        elif prim is handle_p or block is not None:
            spec = params["spec"]
            body = block if block is not None else params["body"].jaxpr.eqns
            walked = set()
            for inner in _walk(body, loops, branch, origin, distinct):
                if inner.op not in spec.ops:
                    yield inner
                    continue
                key = inner.key
                if not spec.handles(key):  # forwarded untraced (`forwards_when`)
                    yield inner
                    continue
                if distinct and key in walked:
                    continue
                walked.add(key)
                yield from _walk(spec.clauses[key].jaxpr.jaxpr.eqns, inner.loops, inner.branch,
                                 inner.origin, distinct)
            if spec.ret is not None:
                yield from _walk(spec.ret.jaxpr.eqns, loops, branch, origin, distinct)
        elif prim is _compat.scan_p:
            loop = Loop(params["length"], params["reverse"])
            yield from _walk(params["jaxpr"].jaxpr.eqns, loops + (loop,), branch, origin,
                             distinct)
        elif prim is _compat.while_p or prim is bounded_while_p:
            for sub in (params["cond_jaxpr"], params["body_jaxpr"]):
                yield from _walk(sub.jaxpr.eqns, loops + (Loop(None),), branch, origin, distinct)
        elif prim is _compat.cond_p:
            for index, sub in enumerate(params["branches"]):
                yield from _walk(sub.jaxpr.eqns, loops, branch + ((id(eqn), index),), origin,
                                 distinct)
        else:
            for sub in _compat.jaxprs_in_params(params):
                yield from _walk(sub.eqns, loops, branch, origin, distinct)


def iter_eqns(jaxpr) -> Iterator[Any]:
    """Every equation of `jaxpr` at any depth, each before those nested in it: the equations of
    loop bodies, branches and called jaxprs, and of the clauses and return clause of a handler
    installed in it."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in _compat.jaxprs_in_params(eqn.params):
            yield from iter_eqns(sub)
        if eqn.primitive is handle_p:
            for closed in eqn.params["spec"].jaxprs():
                yield from iter_eqns(closed.jaxpr)
