"""Shared checks for translated jaxprs."""

import jax.numpy as jnp
from jax.extend.core import check_jaxpr, jaxprs_in_params

from effppl import effects as fx

EFFECT_PRIMITIVES = {"perform", "handle", "resume"}


def all_primitive_names(jaxpr):
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for sub in jaxprs_in_params(eqn.params):
            names |= all_primitive_names(sub)
    return names


def assert_translated(f, *args):
    """`fx.make_jaxpr(f)(*args)` is a valid plain jaxpr: no effect primitive, no effects."""
    closed = fx.make_jaxpr(f)(*args)
    check_jaxpr(closed.jaxpr)
    assert not closed.effects, closed.effects
    assert not (all_primitive_names(closed.jaxpr) & EFFECT_PRIMITIVES)
    return closed


def state_handler(ops, body, init):
    get, put = ops
    return fx.handle(body, params=jnp.float64(init),
                     clauses={get: lambda p, resume: resume(p, p),
                              put: lambda p, v, resume: resume(v, ())},
                     ret=lambda p, r: (p, r))
