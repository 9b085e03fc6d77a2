"""`effects.scoped`: a handler installed by a `with` block, compiled away like `handle`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from effppl import effects as fx

from ._util import assert_translated

tick = fx.Operation("tick", out=lambda x: jax.ShapeDtypeStruct((), jnp.float32))


def _counting(consts, info):
    # params: the running total; each tick adds its argument times the constant `w`
    def clause(total, x, *, resume):
        new = total + consts["w"] * x
        return resume(new, new)
    return {tick: clause}


def program(xs, w):
    """Ticks in a plain scan inside a `with` block; returns the scan's outputs."""
    with fx.scoped(_counting, params=jnp.float32(0.0), consts={"w": w}):
        _, ys = jax.lax.scan(lambda c, x: (c, tick(x)), 0.0, xs)
    return ys


def wrapped(xs, w):
    def body(xs):
        return jax.lax.scan(lambda c, x: (c, tick(x)), 0.0, xs)[1]
    return fx.handle(body, params=jnp.float32(0.0),
                     clauses=_counting({"w": w}, None))(xs)


def test_scoped_block_across_a_scan_matches_handle():
    xs, w = jnp.arange(1.0, 5.0, dtype=jnp.float32), jnp.float32(2.0)
    ours = fx.eliminate(program)(xs, w)
    np.testing.assert_allclose(ours, jnp.cumsum(2.0 * xs))
    np.testing.assert_allclose(ours, wrapped(xs, w))
    np.testing.assert_allclose(jax.jit(fx.eliminate(program))(xs, w), ours)
    np.testing.assert_allclose(jax.grad(lambda w: fx.eliminate(program)(xs, w).sum())(w),
                               jnp.sum(jnp.cumsum(xs)))
    np.testing.assert_allclose(jax.vmap(fx.eliminate(program), (0, None))(
        jnp.stack([xs, xs + 1]), w)[1], jnp.cumsum(2.0 * (xs + 1)))
    assert_translated(program, xs, w)


def test_scoped_blocks_nest_and_the_inner_one_wins():
    def prog(x):
        with fx.scoped(_counting, params=jnp.float32(0.0), consts={"w": jnp.float32(1.0)}):
            a = tick(x)
            with fx.scoped(_counting, params=jnp.float32(100.0),
                           consts={"w": jnp.float32(10.0)}):
                b = tick(x)
            c = tick(x)
        return a, b, c
    a, b, c = fx.eliminate(prog)(jnp.float32(1.0))
    assert (float(a), float(b), float(c)) == (1.0, 110.0, 2.0)


def test_a_perform_outside_the_block_is_unhandled():
    def prog(x):
        with fx.scoped(_counting, params=jnp.float32(0.0), consts={"w": jnp.float32(1.0)}):
            pass
        return tick(x)
    with pytest.raises(fx.UnhandledEffectError, match="tick"):
        fx.eliminate(prog)(jnp.float32(1.0))


def test_a_non_tail_resumptive_clause_is_refused():
    def aborting(consts, info):
        return {tick: lambda p, x, *, resume: ()}

    def prog(x):
        with fx.scoped(aborting):
            tick(x)
        return x
    with pytest.raises(fx.UnsupportedHandlerError, match="not tail-resumptive"):
        fx.eliminate(prog)(jnp.float32(1.0))
