"""Reads of a handler's packed buffer are forwarded to its writes when the program is translated
(`effects._buffer_reads.forward_reads`): the buffer leaves the program, so its gradient moves no
buffer. Oracles: the same program without forwarding (`jax.make_jaxpr`, evaluated by JAX) for
values and gradients; the equations left for the forwarding itself."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import check_jaxpr, jaxpr_as_fun

from effppl import effects as fx
from effppl.effects._buffer_reads import forward_reads

record = fx.Operation("record", out=lambda x, **static: jax.ShapeDtypeStruct(
    jnp.shape(x), jnp.result_type(x)))
N = 8  # buffer length


def _recording(reads):
    """A program whose handler writes each recorded value into one buffer at a constant offset
    (`at`), then reads `reads` (`(start, stop)` slices) of the final buffer."""
    def clause(buf, x, *, resume, at):
        flat = jnp.ravel(x)
        return resume(jax.lax.dynamic_update_slice(buf, flat, (at,)), x)

    def body(x):
        a = record(jnp.sin(x) * jnp.ones(2), at=0)  # [0, 2)
        b = record(x ** 2 * jnp.ones(3), at=2)  # [2, 5)
        c = record(a[0] + b[1] * jnp.ones(2), at=1)  # [1, 3): overwrites the end of a, start of b
        return c.sum()

    def program(x):
        buf, result = fx.handle(body, params=jnp.zeros(N), clauses={record: clause},
                                ret=lambda p, r: (p, r))(x)
        return result + sum(jnp.sum(buf[s:e] * (k + 1.0)) for k, (s, e) in enumerate(reads))

    return program


READS = [(1, 3), (3, 5), (0, 1), (0, 2), (5, 8), (2, 5)]  # written, after the last, unwritten...


def _primitives(closed):
    return [e.primitive.name for e in closed.jaxpr.eqns]


def test_forwarded_reads_give_the_same_values_and_gradients():
    program = _recording(READS)
    x = jnp.float32(0.7)
    closed = fx.make_jaxpr(program)(x)
    check_jaxpr(closed.jaxpr)
    reference = jax.jit(jax.value_and_grad(lambda x: fx.eliminate(program)(x)))
    # oracle: the slices of the buffer, computed by hand from what each write wrote
    s, q = np.sin(0.7), 0.7 ** 2
    a, b = [s, s], [q, q, q]
    c = [s + q, s + q]
    buf = np.zeros(N)
    buf[0:2], buf[2:5], buf[1:3] = a, b, c
    want = sum(c) + sum(buf[st:e].sum() * (k + 1.0) for k, (st, e) in enumerate(READS))
    got, grad = reference(x)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(jaxpr_as_fun(closed)(x)[0], want, rtol=1e-6)
    eps = 1e-3
    numeric = (fx.eliminate(program)(x + eps) - fx.eliminate(program)(x - eps)) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=1e-2)


def test_an_exact_read_of_the_last_write_leaves_no_buffer():
    closed = fx.make_jaxpr(_recording([(1, 3)]))(jnp.float32(0.7))
    assert "dynamic_update_slice" not in _primitives(closed)
    grad_jaxpr = jax.make_jaxpr(jax.grad(lambda x: jaxpr_as_fun(closed)(x)[0]))(jnp.float32(0.7))
    assert f"[{N}]" not in str(grad_jaxpr)  # no array of the buffer's length


def test_a_read_overlapping_a_write_it_is_not_keeps_the_buffer():
    closed = fx.make_jaxpr(_recording([(0, 2)]))(jnp.float32(0.7))  # a's range, since cut by c
    assert "dynamic_update_slice" in _primitives(closed)
    np.testing.assert_allclose(jaxpr_as_fun(closed)(jnp.float32(0.7))[0],
                               jax.jit(_recording([(0, 2)]))(jnp.float32(0.7)), rtol=1e-6)


def test_forward_reads_returns_the_jaxpr_itself_when_nothing_is_forwarded():
    jaxpr = jax.make_jaxpr(lambda b, v: jax.lax.dynamic_update_slice(b, v, (2,))[1:4])(
        jnp.zeros(N), jnp.ones(2)).jaxpr
    assert forward_reads(jaxpr) is jaxpr  # [1, 4) overlaps [2, 4) without being it
    disjoint = jax.make_jaxpr(lambda b, v: jax.lax.dynamic_update_slice(b, v, (2,))[5:7])(
        jnp.zeros(N), jnp.ones(2))
    forwarded = forward_reads(disjoint.jaxpr)
    assert forwarded is not disjoint.jaxpr
    slice_eqn = [e for e in forwarded.eqns if e.primitive.name == "slice"][0]
    assert slice_eqn.invars[0] is forwarded.invars[0]  # reads the buffer from before the write


def test_a_clamped_write_is_forwarded_where_it_lands():
    # `dynamic_update_slice` clamps a start past the end: a write of 2 at 7 lands at [6, 8)
    f = jax.make_jaxpr(lambda b, v: jax.lax.dynamic_update_slice(b, v, (7,))[6:8])
    closed = f(jnp.zeros(N), jnp.arange(2.0))
    forwarded = forward_reads(closed.jaxpr)
    assert forwarded.outvars[0] is forwarded.invars[1]


def test_reads_of_earlier_versions_rewrites_and_forks_keep_their_values():
    """Reads of intermediate buffers, a range written twice, and two writes on one version
    (a fork): the forwarded program computes what JAX computes from the unforwarded one."""
    def program(b, u, v, w):
        b1 = jax.lax.dynamic_update_slice(b, u, (0,))  # [0, 2)
        b2 = jax.lax.dynamic_update_slice(b1, v, (4,))  # [4, 6)
        b3 = jax.lax.dynamic_update_slice(b2, w, (0,))  # [0, 2) again
        fork = jax.lax.dynamic_update_slice(b2, w * 10.0, (4,))  # another write on version 2
        return (b1[0:2], b2[0:2], b3[0:2], b3[4:6], b3[2:4], b3[1:5], fork[4:6], fork[0:2],
                b[0:2])

    args = (jnp.arange(8.0), jnp.array([1.0, 2.0]), jnp.array([3.0, 4.0]), jnp.array([5.0, 6.0]))
    closed = jax.make_jaxpr(program)(*args)
    forwarded = forward_reads(closed.jaxpr)
    check_jaxpr(forwarded)
    want = jax.jit(program)(*args)
    got = jax.core.eval_jaxpr(forwarded, closed.consts, *args)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)
    slices = [e for e in forwarded.eqns if e.primitive.name == "slice"]
    # left: [2, 4) (unwritten: from `b`), [1, 5) (across two writes), `b[0:2]`, and the fork's
    # [0, 2) (a fork starts a chain of its own: read from `b2`, not forwarded further)
    assert len(slices) == 4 and not any(e.primitive.name == "slice" and e.invars[0] is
                                        forwarded.invars[0] and e.params["start_indices"] == (4,)
                                        for e in forwarded.eqns)
