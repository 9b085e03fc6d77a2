"""The failure effect: `fail`, `fail_if`, `catch`, `fail_op`'s default (no handler: an error).

Oracles: hand-computed results of small programs, Python's own exceptions, and the resumable
handler's flag computed element by element.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from effppl import effects as fx

from ._util import assert_translated


def safe_log(x):
    fx.fail_if(x <= 0, "log of {} at index {}", x, 7)
    return jnp.log(x)


def flagged(fn):
    """A resuming handler: notes whether `fn` failed, and lets it go on."""
    def clause(failed, when, carry, values, *, resume, message):
        return resume(jnp.logical_or(failed, when), carry)
    return fx.handle(fn, params=jnp.bool_(False), clauses={fx.fail_op: clause},
                     ret=lambda failed, r: (r, failed))


def test_catch_returns_the_handlers_value_on_failure_only():
    caught = fx.catch(safe_log, lambda message, x, i: jnp.full_like(x, -1.0) * i)
    assert float(caught(2.0)) == pytest.approx(np.log(2.0))
    assert float(caught(-2.0)) == -7.0
    assert float(jax.jit(caught)(-2.0)) == -7.0
    assert_translated(caught, -2.0)


def test_catch_gets_the_static_message():
    caught = fx.catch(safe_log, lambda message, x, i: jnp.float64(len(message)))
    assert float(caught(-1.0)) == len("log of {} at index {}")


def test_unhandled_failure_raises_at_once_when_eager():
    with pytest.raises(fx.FailureError, match=r"log of -2.0 at index 7"):
        safe_log(-2.0)
    with pytest.raises(fx.FailureError, match="always"):
        fx.fail("always")
    assert float(safe_log(np.e)) == pytest.approx(1.0)


def test_unhandled_failure_raises_when_the_compiled_program_runs():
    run = jax.jit(safe_log)
    assert float(run(np.e)) == pytest.approx(1.0)
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"FailureError: log of -3.0 at index 7"):
        jax.block_until_ready(run(-3.0))


def checked_log(x):
    return jnp.log(fx.fail_if(x <= 0, "log of {}", x, carry=x))


def test_check_with_a_carry_outside_handlers_is_a_pure_callback():
    """No handler can be around: the check rides on the carry (no side effect in the program,
    so JAX dispatches it as a pure one), and still raises when it fails."""
    closed = jax.make_jaxpr(checked_log)(1.0)
    assert not closed.effects
    assert "pure_callback" in str(closed)
    run = jax.jit(checked_log)
    assert float(run(np.e)) == pytest.approx(1.0)
    # JAX reports an error in a pure callback as a ValueError naming it
    with pytest.raises((ValueError, RuntimeError), match=r"FailureError: log of -3.0"):
        jax.block_until_ready(run(-3.0))
    with pytest.raises((ValueError, RuntimeError), match=r"log of -1.0"):
        jax.block_until_ready(jax.jit(jax.vmap(checked_log))(jnp.array([1.0, -1.0])))


def test_check_with_a_carry_inside_a_handler_performs():
    _, failed = flagged(checked_log)(-1.0)
    assert bool(failed)
    n = []

    @jax.jit
    def traced(x):  # traced outside any handler first, then again inside one
        n.append(1)
        return checked_log(x)

    traced(1.0)
    _, failed = flagged(traced)(-1.0)
    assert bool(failed) and len(n) == 2


def test_unhandled_failure_under_vmap_names_the_element_that_failed():
    xs = jnp.array([1.0, 2.0, -5.0, 3.0])
    np.testing.assert_allclose(jax.vmap(safe_log)(jnp.abs(xs)), np.log(np.abs(xs)))
    with pytest.raises((jax.errors.JaxRuntimeError, fx.FailureError), match=r"log of -5.0"):
        jax.block_until_ready(jax.vmap(safe_log)(xs))


def test_default_in_an_eliminated_program_stays_right_under_vmap():
    """Eliminated with no handler for `fail`, then batched by JAX into a `select`: the default
    checks `when`, so the element that did not fail raises nothing."""
    get = fx.Operation("get", out=lambda: jax.ShapeDtypeStruct((), jnp.float64))
    prog = fx.eliminate(fx.handle(lambda x: safe_log(x + get()),
                                  params=jnp.float64(1.0),
                                  clauses={get: lambda p, resume: resume(p, p)}))
    np.testing.assert_allclose(jax.vmap(prog)(jnp.array([0.5, 1.0])), np.log([1.5, 2.0]))
    with pytest.raises((jax.errors.JaxRuntimeError, fx.FailureError), match=r"log of -1.0"):
        jax.block_until_ready(jax.vmap(prog)(jnp.array([0.5, -2.0])))


def test_resuming_handler_notes_the_failure_and_the_code_goes_on():
    out, failed = flagged(safe_log)(-1.0)
    assert bool(failed) and np.isnan(out)
    xs = jnp.array([1.0, -2.0, 3.0])
    out, failed = jax.vmap(flagged(safe_log))(xs)
    np.testing.assert_array_equal(failed, xs <= 0)
    out, failed = jax.jit(flagged(safe_log))(4.0)
    assert not bool(failed) and float(out) == pytest.approx(np.log(4.0))


def test_failure_under_vmap_inside_the_handler_is_one_failure():
    """`jax.vmap` *inside* the handled function: the batch fails if an element does (the
    operation's batching rule), else it does not."""
    _, failed = flagged(lambda xs: jax.vmap(safe_log)(xs))(jnp.array([1.0, -2.0]))
    assert bool(failed)
    _, failed = flagged(lambda xs: jax.vmap(lambda x: fx.fail("x {}", x))(xs))(jnp.ones(3))
    assert bool(failed)
    _, failed = flagged(lambda xs: jax.vmap(safe_log)(xs))(jnp.array([1.0, 2.0]))
    assert not bool(failed)


def test_abort_inside_loops_stops_them():
    def program(xs):
        def step(total, x):
            fx.fail_if(x < 0, "negative {}", x)
            return total + x, None
        return jax.lax.scan(step, 0.0, xs)[0]

    caught = fx.catch(program, lambda message, x: x * 100.0)
    assert float(caught(jnp.array([1.0, 2.0, 3.0]))) == 6.0
    assert float(caught(jnp.array([1.0, -2.0, -3.0]))) == -200.0  # the first failure
    assert float(jax.grad(lambda xs: caught(xs))(jnp.array([1.0, 2.0]))[0]) == 1.0


def test_gradient_through_fail_if_is_the_codes():
    assert float(jax.grad(safe_log)(2.0)) == pytest.approx(0.5)
    assert float(jax.grad(lambda x: flagged(safe_log)(x)[0])(2.0)) == pytest.approx(0.5)


def test_bad_arguments_are_type_errors():
    with pytest.raises(TypeError, match="message"):
        fx.fail(3)
    with pytest.raises(TypeError, match="bool scalar"):
        fx.fail_if(jnp.ones(2) > 0, "x")
    with pytest.raises(TypeError, match="bool scalar"):
        fx.fail_if(1.0, "x")
