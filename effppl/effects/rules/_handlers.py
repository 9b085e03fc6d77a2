"""effppl's own primitives (paper §4, App. B): `perform` is handled by the innermost frame whose
handler handles it, in place for a tail-resumptive clause (E-Hop2) and by continuation-passing
otherwise (E-Hop); `handle` installs a frame around its body (E-Handle); `resume` in a clause
continues the handled computation; a `with`-scoped handler's `enter`/`exit` markers push and pop
its frame."""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import _compat
from .._core import ClauseKind, enter_p, exit_p, handle_p, perform_p, resume_p, site_key
from .._errors import UnhandledEffectError, UnsupportedHandlerError
from .._scope import ScopeSpec
from .._translate import (
    BARRIER,
    RET,
    Cont,
    CrossesBarrier,
    Done,
    Frame,
    inline,
    register,
    ret_index,
    run,
)


class _Perform(NamedTuple):
    """A perform and the frame whose clause handles it."""

    eqn: Any
    ins: list  # the operation's arguments
    index: int  # of the handling frame in `H`
    clause: Any  # `Clause`
    where: str  # source of the perform, for messages

    def clause_ins(self, H):
        frame = H[self.index]
        return [*frame.consts[self.clause.consts], *frame.params, *self.ins]

    def resumed(self, vals, H_outer, H):
        """The handler context after the clause resumed with `vals` (new params, then the
        operation's value): the handling frame reinstalled with its new parameters."""
        frame = H[self.index]
        new = frame._replace(params=tuple(vals[:frame.spec.n_params]))
        return H_outer + (new,) + H[self.index + 1:]


@register(perform_p)
def _perform_translate_rule(eqn, ins, H, K, resume, rest):
    op = eqn.params["op"]
    where = _compat.summarize_source(eqn.source_info)
    key = site_key(eqn)
    i = next((i for i in range(len(H) - 1, -1, -1) if H[i].spec.handles(key)), None)
    if i is None and op.default is not None:  # no handler: the operation's default, in place
        return op.run_default(ins, eqn.params["in_tree"], eqn.params["static"]), H
    if i is None:
        raise UnhandledEffectError(
            f"Operation `{op.name}` (performed at {where}) is not handled by any enclosing handler. "
            f"{op.how_to_handle(eqn.params['static'])}")
    perform = _Perform(eqn, ins, i, H[i].spec.clauses[key], where)
    kind = perform.clause.kind
    if kind == ClauseKind.TAIL:
        try:
            return _perform_in_place(perform, H)
        except CrossesBarrier as exc:
            # An operation of the clause needs the rest: translate it as a general clause. If
            # that operation aborts and the clause always performs it (at its top level, before
            # its resume), this perform never comes back either: abortive for the region.
            top_level = any(e is exc.eqn for e in perform.clause.jaxpr.jaxpr.eqns)
            aborts = exc.kind == ClauseKind.ABORTIVE and top_level
            kind = ClauseKind.ABORTIVE if aborts else ClauseKind.GENERAL
    return _perform_with_continuation(perform, kind, H, K, rest)


def _perform_in_place(perform, H):
    """A tail-resumptive clause (E-Hop2, R-Let): run in a region of its own under the handlers
    outside its frame; its `resume` ends it. Returns `(value, H)` for the rest of the jaxpr."""
    n_params = H[perform.index].spec.n_params
    clause = perform.clause.jaxpr
    vals, H_outer = run(clause.jaxpr, clause.consts, perform.clause_ins(H), H[:perform.index],
                        (BARRIER,), _resume_in_place)
    return vals[n_params:], perform.resumed(vals, H_outer, H)


def _perform_with_continuation(perform, kind, H, K, rest):
    """Any other clause (E-Hop): the continuation list is split at the frame's `RET`; the clause
    runs under the handlers and continuations outside it, and its `resume` translates the rest
    of the program up to that `RET` (`rest`, then the inner continuations). Raises
    `CrossesBarrier` when that `RET` lies beyond the region's barrier."""
    i, op = perform.index, perform.eqn.params["op"]
    scoped = next((f.spec for f in H[i + 1:] if isinstance(f.spec, ScopeSpec)), None)
    if scoped is not None:
        raise UnsupportedHandlerError(
            f"Operation `{op.name}` (performed at {perform.where}) is handled by a clause that is "
            f"not tail-resumptive, outside the `with`-scoped handler `{scoped.name}` around it; "
            f"wrap that code in the handler (`handler(fn)`) instead of a `with` block.")
    j = ret_index(K, len(H) - 1 - i)
    if j is None:
        raise CrossesBarrier(site_key(perform.eqn), kind, perform.where, perform.eqn)
    K_outer, K_inner = K[:j], K[j:]
    n_params = H[i].spec.n_params

    def resume_general(vals, H_cur, K_cur):
        return rest(vals[n_params:], perform.resumed(vals, H_cur, H), K_cur + K_inner)

    clause = perform.clause.jaxpr
    return Done(run(clause.jaxpr, clause.consts, perform.clause_ins(H), H[:i], K_outer,
                    resume_general))


def _resume_in_place(vals, H, K):
    return vals, H


@register(resume_p)
def _resume_translate_rule(eqn, ins, H, K, resume, rest):
    if resume is None:
        raise UnsupportedHandlerError(
            f"`resume` is called inside a loop or a nested handler of a clause (traced at "
            f"{_compat.summarize_source(eqn.source_info)}); call it at the clause's top level.")
    return Done(resume(ins, H, K + (Cont(rest),)))


@register(handle_p)
def _handle_translate_rule(eqn, ins, H, K, resume, rest):
    spec, body = eqn.params["spec"], eqn.params["body"]
    body_consts, frame_consts, params, args = _compat.split_list(
        ins, [eqn.params["n_body_consts"], eqn.params["n_frame_consts"], spec.n_params])
    frame = Frame(spec, tuple(params), tuple(frame_consts))

    def run_body(H, K):
        return run(body.jaxpr, body.consts, [*body_consts, *args], H + (frame,), K + (RET,))

    return inline(run_body, H, K, rest, region=body.jaxpr)


@register(enter_p)
def _enter_translate_rule(eqn, ins, H, K, resume, rest):
    """A `with`-scoped handler's block begins: install its frame (its constants, then params)."""
    spec, n = eqn.params["spec"], eqn.params["n_consts"]
    jaxpr, i = rest.args[0], rest.args[1]  # the block: the equations up to the matching exit
    depth = 0
    for j in range(i, len(jaxpr.eqns)):
        depth += (jaxpr.eqns[j].primitive is enter_p) - (jaxpr.eqns[j].primitive is exit_p)
        if depth == 0:
            spec.prepare(jaxpr.eqns[i + 1:j])
            break
    return (), H + (Frame(spec, tuple(ins[n:]), tuple(ins[:n])),)


@register(exit_p)
def _exit_translate_rule(eqn, ins, H, K, resume, rest):
    if not H or H[-1].spec is not eqn.params["spec"]:
        raise UnsupportedHandlerError(
            f"The `with`-scoped handler `{eqn.params['spec'].name}` ends where it was not the "
            f"innermost handler (traced at {_compat.summarize_source(eqn.source_info)}).")
    return (), H[:-1]
