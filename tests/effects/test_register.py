"""`effects.internal.register`: a library adds the translation rule of its own higher-order
primitive, and the translator then compiles handlers away through it."""

import jax
import jax.numpy as jnp
import pytest
from jax.extend.core import Primitive, check_jaxpr

from effppl import effects as fx
from effppl.effects import internal

ask = fx.Operation("ask", out=lambda: jax.ShapeDtypeStruct((), jnp.float32))



def _call_primitive(name):
    """A library's own call-like primitive `p`: `p.bind(*args, jaxpr=...)` runs the jaxpr."""
    p = Primitive(name)
    p.multiple_results = True
    p.def_effectful_abstract_eval(lambda *avals, jaxpr: (jaxpr.out_avals, jaxpr.effects))
    p.def_impl(lambda *args, jaxpr: jax.core.eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *args))
    return p


def _handled(call_p):
    def body(x):
        (y,) = call_p.bind(x, jaxpr=jax.make_jaxpr(lambda v: [v * ask()])(x))
        return y + ask()

    def handled(x):
        return fx.handle(body, clauses={ask: lambda p, resume: resume(p, jnp.float32(3.0))})(x)
    return handled


def test_a_primitive_without_a_rule_is_an_error_naming_it():
    handled = _handled(_call_primitive("unregistered_call"))
    with pytest.raises(fx.UnsupportedHandlerError, match="unregistered_call"):
        fx.make_jaxpr(handled)(jnp.float32(2.0))


def test_a_registered_rule_compiles_the_handler_away_through_the_primitive():
    my_call_p = _call_primitive("registered_call")
    handled = _handled(my_call_p)

    @internal.register(my_call_p)
    def _my_call_rule(eqn, ins, H, K, resume, rest):
        sub = eqn.params["jaxpr"]

        def run_call(H, K):
            return internal.run(sub.jaxpr, sub.consts, ins, H, K, resume)

        return internal.inline(run_call, H, K, rest, region=sub.jaxpr)

    closed = fx.make_jaxpr(handled)(jnp.float32(2.0))
    check_jaxpr(closed.jaxpr)
    assert not closed.effects
    assert float(jax.jit(handled)(jnp.float32(2.0))) == 2.0 * 3.0 + 3.0
    assert float(jax.grad(handled)(jnp.float32(2.0))) == 3.0
