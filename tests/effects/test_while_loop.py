"""`effects.while_loop`: values, forward and reverse mode, batching, effects in its body.

Oracles: `lax.while_loop` with a counter (values), a `lax.scan` over `max_steps` iterations that
skips the finished ones (derivatives: JAX differentiates it in both modes, so it is an
independent oracle for the checkpointing), central finite differences.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import ClosedJaxpr, check_jaxpr, jaxpr_as_fun

from effppl import effects as fx
from effppl.effects import _bounded

from ._util import assert_translated

get = fx.Operation("get", out=lambda: jax.ShapeDtypeStruct((), jnp.float64))
put = fx.Operation("put", out=lambda x: ())


def _body(a):
    def body(c):
        i, x, acc = c
        x = x + 0.1 * jnp.sin(a * x) + 0.05
        return i + 1, x, acc + a * x ** 2
    return body


def _cond(c):
    return c[1] < 3.0


def looped(a, x0, max_steps=100, checkpoints=None):
    _, x, acc = fx.while_loop(_cond, _body(a), (jnp.int32(0), x0, 0.0), max_steps=max_steps,
                              checkpoints=checkpoints)
    return acc + x ** 3


def scanned(a, x0, max_steps=100):
    """The same loop as a `lax.scan` of `max_steps` iterations that skip once done."""
    def step(c, _):
        return jax.lax.cond(_cond(c), _body(a), lambda c: c, c), None
    (_, x, acc), _ = jax.lax.scan(step, (jnp.int32(0), x0, 0.0), length=max_steps)
    return acc + x ** 3


def iterations(a, x0, max_steps=100):
    return jax.lax.while_loop(lambda c: _cond(c) & (c[0] < max_steps), _body(a),
                              (jnp.int32(0), x0, 0.0))[0]


POINTS = [(1.3, 0.5), (0.7, 2.9), (2.0, 3.5)]  # many iterations, few, none


@pytest.mark.parametrize("a, x0", POINTS)
def test_values_match_lax_while_loop(a, x0):
    want = jax.lax.while_loop(lambda c: _cond(c) & (c[0] < 100), _body(a),
                              (jnp.int32(0), x0, 0.0))
    got = fx.while_loop(_cond, _body(a), (jnp.int32(0), x0, 0.0), max_steps=100)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-14)
    assert jax.jit(looped)(a, x0) == pytest.approx(float(scanned(a, x0)), rel=1e-13)


def test_stops_after_max_steps():
    i, _, _ = fx.while_loop(lambda c: True, _body(1.0), (jnp.int32(0), 0.0, 0.0), max_steps=7)
    assert int(i) == 7


@pytest.mark.slow
@pytest.mark.parametrize("checkpoints", [2, 4, 8, 100, None])
@pytest.mark.parametrize("a, x0", POINTS)
def test_gradient_matches_differentiated_scan(a, x0, checkpoints):
    """Every thinning of the checkpoints (2 keeps two carries and recomputes the rest; 100 keeps
    every carry) gives the scan's gradient, eagerly and under `jit`."""
    assert int(iterations(a, x0)) in (0, 1) or int(iterations(a, x0)) > 8  # thinned at 2, 4, 8
    want = jax.grad(scanned, (0, 1))(a, x0)
    for grad in (jax.grad(looped, (0, 1)), jax.jit(jax.grad(looped, (0, 1)), static_argnums=(2, 3))):
        got = grad(a, x0, 100, checkpoints)
        np.testing.assert_allclose(got, want, rtol=1e-10)


def test_gradient_matches_finite_differences_when_the_bound_stops_the_loop():
    a, x0, eps = 1.3, 0.5, 1e-6
    fd = (looped(a + eps, x0, 9) - looped(a - eps, x0, 9)) / (2 * eps)
    assert int(iterations(a, x0, 9)) == 9
    assert jax.grad(looped)(a, x0, 9, 2) == pytest.approx(float(fd), rel=1e-6)


@pytest.mark.parametrize("a, x0", POINTS)
def test_forward_mode_matches_differentiated_scan(a, x0):
    _, want = jax.jvp(lambda a, x0: scanned(a, x0), (a, x0), (1.0, -0.5))
    _, got = jax.jvp(lambda a, x0: looped(a, x0), (a, x0), (1.0, -0.5))
    assert got == pytest.approx(float(want), rel=1e-10)
    assert jax.jacfwd(looped)(a, x0) == pytest.approx(float(jax.grad(scanned)(a, x0)), rel=1e-10)


def test_linearize_and_forward_over_reverse():
    a, x0 = 1.3, 0.5
    _, lin = jax.linearize(lambda a: looped(a, x0, 100, 4), a)
    assert lin(1.0) == pytest.approx(float(jax.grad(scanned)(a, x0)), rel=1e-10)
    hess = jax.jacfwd(jax.grad(lambda a: looped(a, x0, 100, 4)))(a)
    assert hess == pytest.approx(float(jax.hessian(scanned)(a, x0)), rel=1e-8)


def test_vmap_runs_each_element_its_own_iterations():
    a, x0 = jnp.array([p[0] for p in POINTS]), jnp.array([p[1] for p in POINTS])
    i, x, acc = jax.vmap(lambda a, x0: fx.while_loop(
        _cond, _body(a), (jnp.int32(0), x0, 0.0), max_steps=100))(a, x0)
    np.testing.assert_array_equal(i, [int(iterations(*p)) for p in POINTS])
    np.testing.assert_allclose(jax.vmap(looped)(a, x0), [scanned(*p) for p in POINTS],
                               rtol=1e-13)


def test_gradients_under_vmap_both_ways():
    a, x0 = jnp.array([p[0] for p in POINTS]), jnp.array([p[1] for p in POINTS])
    want = jax.vmap(jax.grad(scanned))(a, x0)
    np.testing.assert_allclose(jax.vmap(jax.grad(looped))(a, x0), want, rtol=1e-10)
    got = jax.grad(lambda a: jnp.sum(jax.vmap(looped)(a, x0)))(a)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_gradient_inside_scan_and_cond():
    def outer(f):
        def run(a):
            def step(x, _):
                y = jax.lax.cond(x > 0.0, lambda: f(a, x), lambda: x)
                return 0.1 * y, y
            return jnp.sum(jax.lax.scan(step, 0.5, length=3)[1])
        return run
    np.testing.assert_allclose(jax.grad(outer(looped))(1.3), jax.grad(outer(scanned))(1.3),
                               rtol=1e-10)


def test_reverse_mode_memory_is_checkpoints_plus_recompute_slots():
    """The residuals of a 4096-step bound hold 66 checkpoints (and a 64-slot recompute buffer in
    the transpose), never a buffer of 4096 carries."""
    assert _bounded.default_checkpoints(4096) == 66
    assert _bounded.recompute_slots(4096, 66) == 64
    assert _bounded.recompute_slots(100, 100) == 1
    closed = jax.make_jaxpr(jax.grad(lambda a: looped(a, 0.5, 4096)))(1.3)
    check_jaxpr(closed.jaxpr)
    shapes = {v.aval.shape for eqn in closed.jaxpr.eqns for v in eqn.outvars}
    assert (66,) in shapes and not any(4096 in s for s in shapes)


def test_state_handler_in_the_body_and_gradient_of_the_handled_function():
    """A tail-resumptive state handler around the loop: its parameter becomes carry; the
    handled function is differentiated from outside (through the checkpointed loop)."""
    def body(a):
        def count():
            put(get() + a * get() * 0.1)
            return 0
        return fx.while_loop(lambda _: get() < 5.0, lambda i: i + 1 + count(), 0, max_steps=50)

    def run(a):
        handled = fx.handle(body, params=jnp.float64(1.0),
                            clauses={get: lambda p, resume: resume(p, p),
                                     put: lambda p, v, resume: resume(v, ())},
                            ret=lambda p, r: p)
        return handled(a)

    n = int(np.ceil(np.log(5.0) / np.log(1.13)))
    assert run(1.3) == pytest.approx(1.13 ** n)
    assert jax.grad(run)(1.3) == pytest.approx(n * 1.13 ** (n - 1) * 0.1, rel=1e-10)
    closed = assert_translated(run, 1.3)
    assert "bounded_while" in {e.primitive.name for e in closed.jaxpr.eqns}


def test_abort_in_the_body_stops_the_loop_and_keeps_the_outer_state():
    """`fail` in the body, caught outside the loop: the App. B.2 rewrite keeps the bounded
    loop (so the handled function still has a reverse-mode derivative)."""
    def program(x):
        def body(c):
            fx.fail_if(c > 5.0, "too big: {}", c)
            put(get() + 1.0)
            return 2.0 * c
        return fx.while_loop(lambda c: c < 1e3, body, x, max_steps=20)

    def run(x):
        caught = fx.catch(program, lambda message, c: -1.0)
        return fx.handle(caught, params=jnp.float64(0.0),
                         clauses={get: lambda p, resume: resume(p, p),
                                  put: lambda p, v, resume: resume(v, ())},
                         ret=lambda p, r: (p, r))(x)

    steps, out = run(1.0)  # 1, 2, 4, 8 -> fails at 8 after three puts
    assert (float(steps), float(out)) == (3.0, -1.0)
    steps, out = run(0.25)  # ... 4 -> 8 fails after five puts
    assert (float(steps), float(out)) == (5.0, -1.0)
    closed = assert_translated(run, 1.0)
    assert "bounded_while" in {e.primitive.name for e in closed.jaxpr.eqns}
    assert jax.grad(lambda x: run(x)[1])(2e3) == 1.0  # no failure: the loop runs no iteration
    assert jax.grad(lambda x: run(x)[1])(1.0) == 0.0  # the failure's constant


@pytest.mark.parametrize("bad, match", [
    (dict(max_steps=0), "max_steps"), (dict(max_steps=2.0), "max_steps"),
    (dict(max_steps=10, checkpoints=3), "checkpoints"),
])
def test_bad_bounds_are_value_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        fx.while_loop(lambda c: c < 1.0, lambda c: c + 1.0, 0.0, **bad)


def test_bad_body_and_condition_are_type_errors():
    with pytest.raises(TypeError, match="body_fun"):
        fx.while_loop(lambda c: c < 1.0, lambda c: (c, c), 0.0, max_steps=3)
    with pytest.raises(TypeError, match="cond_fun"):
        fx.while_loop(lambda c: c, lambda c: c + 1.0, 0.0, max_steps=3)


@pytest.mark.parametrize("bounded", [True, False])
def test_gradient_through_an_iteration_that_fails_after_reading_the_checked_value(bounded):
    """`fail_if(..., carry=c)` in the body, its result read by the rest of the body (a `log` of
    it): the iteration that fails contributes nothing, so the caught function's derivative is
    that of its failure value (0 here), and, when nothing fails, that of the loop (analytic:
    x -> 2 x + a log x, once from x = 1.0 at a threshold that stops it after one step)."""
    def program(a, x, limit):
        def body(c):
            y = fx.fail_if(c > 5.0, "too big {}", c, carry=c)
            return 2.0 * y + a * jnp.log(y)
        if bounded:
            return fx.while_loop(lambda c: c < limit, body, x, max_steps=20)
        return jax.lax.while_loop(lambda c: c < limit, body, x)

    def run(a, limit):
        return fx.catch(lambda a: program(a, 1.0, limit), lambda message, c: 0.0 * a - 1.0)(a)

    derivative = jax.grad(run) if bounded else jax.jacfwd(run)  # (no reverse mode for lax's)
    assert float(run(0.1, 1e3)) == -1.0  # 1 -> 2 -> 4.07 -> 8.3: fails
    assert float(derivative(0.1, 1e3)) == 0.0
    # two steps, no failure: 1 -> 2 -> 4 + a log 2
    assert float(run(0.1, 3.0)) == pytest.approx(4.0 + 0.1 * np.log(2.0), rel=1e-14)
    assert float(derivative(0.1, 3.0)) == pytest.approx(np.log(2.0), rel=1e-14)


def test_dead_code_elimination_keeps_the_carry_that_outputs_and_condition_read():
    """Only `x` is used after the loop and the condition reads `z`: dead code elimination keeps
    those two carry leaves and drops `y` (its doubling); the pruned program computes the same."""
    from effppl.effects.internal import dce

    def f(x):
        return fx.while_loop(lambda c: c[0] < 5.0 + c[2],
                             lambda c: (c[0] + 1.0, c[1] * 2.0, c[2]), (x, x, 0.5 * x),
                             max_steps=10)[0]

    closed = jax.make_jaxpr(f)(1.0)
    pruned = dce(closed)
    check_jaxpr(pruned)
    (loop,) = [e for e in pruned.eqns if e.primitive.name == "bounded_while"]
    assert len(loop.outvars) == 2
    assert "mul" not in {e.primitive.name for e in loop.params["body_jaxpr"].jaxpr.eqns}
    for x, want in ((1.0, 6.0), (3.2, 7.2)):  # x + 1 until x >= 5 + x0 / 2
        assert float(jaxpr_as_fun(ClosedJaxpr(pruned, closed.consts))(x)[0]) == \
            pytest.approx(want)
