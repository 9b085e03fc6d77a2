"""Run a function's jaxpr eagerly, its control flow in Python: `eager(fn)(*args)`.

`jax.make_jaxpr(fn)` traces the function (for an effppl entry point: the model, the handlers'
elimination, the derivatives), then each equation runs on concrete values: `scan`, `while`,
`cond` and calls as Python loops, branches and recursion, every other primitive as itself
(JAX's eager dispatch, one small cached executable per primitive and type). The random models
are many and small, each traced once: compiling each of their programs with XLA (as `jax.jit`,
or JAX's eager `cond`/`scan`, which compile their bodies) costs seconds per model, where this
costs milliseconds. `compare.check(..., compiled=True)` runs the compiled programs too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

_CALLS = {"pjit", "jit", "closed_call", "core_call", "remat", "checkpoint", "custom_jvp_call",
          "custom_vjp_call", "custom_vjp_call_jaxpr"}


def eager(fn):
    def run(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        out = eval_closed(closed, jax.tree.leaves(args))
        return jax.tree.unflatten(jax.tree.structure(shape), out)
    return run


def eval_closed(closed, args):
    return eval_jaxpr(closed.jaxpr, closed.consts, args)


def eval_jaxpr(jaxpr: Jaxpr, consts, args):
    env = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = _eval_eqn(eqn, ins)
        if not eqn.primitive.multiple_results:
            outs = [outs]
        for v, x in zip(eqn.outvars, outs):
            env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _sub(j, args):
    if isinstance(j, ClosedJaxpr):
        return eval_closed(j, args)
    return eval_jaxpr(j, [], args)


def _eval_eqn(eqn, ins):
    name, p = eqn.primitive.name, eqn.params
    if name == "scan":
        return _scan(eqn, ins)
    if name == "while":
        return _while(eqn, ins)
    if name == "cond":
        index = int(ins[0])
        branches = p["branches"]
        return _sub(branches[min(max(index, 0), len(branches) - 1)], ins[1:])
    if name in _CALLS:
        j = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
        if j is not None:
            return _sub(j, ins)
    with eqn.ctx.manager:
        return eqn.primitive.bind(*ins, **p)


def _scan(eqn, ins):
    p = eqn.params
    nc, nk, length = p["num_consts"], p["num_carry"], p["length"]
    consts, carry, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
    ys_avals = [v.aval for v in eqn.outvars[nk:]]
    steps = range(length - 1, -1, -1) if p["reverse"] else range(length)
    ys = [[None] * length for _ in ys_avals]
    for t in steps:
        out = _sub(p["jaxpr"], [*consts, *carry, *[x[t] for x in xs]])
        carry = out[:nk]
        for k, y in enumerate(out[nk:]):
            ys[k][t] = y
    stacked = [jnp.stack(y) if length else jnp.zeros(a.shape, a.dtype)
               for y, a in zip(ys, ys_avals)]
    return [*carry, *stacked]


def _while(eqn, ins):
    p = eqn.params
    cn, bn = p["cond_nconsts"], p["body_nconsts"]
    cc, bc, carry = ins[:cn], ins[cn:cn + bn], ins[cn + bn:]
    while bool(_sub(p["cond_jaxpr"], [*cc, *carry])[0]):
        carry = _sub(p["body_jaxpr"], [*bc, *carry])
    return carry
