"""`_compile._windows.windows_as_updates`, the rewrite `log_likelihood` runs its program through:
the scatters `vmap` makes of a loop's row writes become slice updates (no scatter left in the
loops), with the same values bit for bit, an out-of-range write dropped as the scatter drops it."""

import jax
import jax.numpy as jnp
import numpy as np

from effppl.effects import internal
from effppl.infer._compile._windows import windows_as_updates


def _writes_rows(x, index_shift=0):
    """A `[T]` buffer carried through a scan, row t written (added to) at step t as `trace`
    writes a site's row: a `scatter_add` of a one-row window."""
    numbers = jax.lax.ScatterDimensionNumbers(update_window_dims=(0,), inserted_window_dims=(),
                                              scatter_dims_to_operand_dims=(0,))

    def step(buf, t):
        row = (jnp.sin(x[t]) * 2.0)[None]
        buf = jax.lax.scatter_add(buf, jnp.reshape(t + index_shift, (1,)), row, numbers,
                                  mode=jax.lax.GatherScatterMode.FILL_OR_DROP)
        return buf, None
    return jax.lax.scan(step, jnp.zeros_like(x), jnp.arange(x.shape[0]))[0]


def _scatters(fn, *args):
    closed = jax.make_jaxpr(fn)(*args)
    return sum(e.primitive in (jax.lax.scatter_p, jax.lax.scatter_add_p)
               for e in internal.iter_eqns(closed.jaxpr))


def test_rows_written_in_a_vmapped_scan_become_slice_updates_with_the_same_values():
    x = jnp.linspace(-1.0, 2.0, 5 * 7).reshape(5, 7)
    plain = jax.vmap(_writes_rows)
    assert _scatters(plain, x) >= 1
    rewritten = windows_as_updates(plain)
    assert _scatters(rewritten, x) == 0
    np.testing.assert_array_equal(jax.jit(rewritten)(x), jax.jit(plain)(x))


def test_a_write_out_of_range_is_dropped_as_the_scatter_drops_it():
    x = jnp.linspace(-1.0, 2.0, 3 * 4).reshape(3, 4)
    plain = jax.vmap(lambda r: _writes_rows(r, index_shift=2))  # the last two writes fall out
    out = jax.jit(windows_as_updates(plain))(x)
    np.testing.assert_array_equal(out, jax.jit(plain)(x))
    np.testing.assert_array_equal(out[:, :2], 0.0)  # rows no step writes
    np.testing.assert_allclose(out[:, 2:], 2.0 * jnp.sin(x[:, :2]), rtol=1e-15)


def test_a_custom_jvp_function_beside_the_writes_is_bound_as_it_was():
    """A call primitive in the program (`jax.nn.relu` is a `custom_jvp`) is re-bound with its
    parameters as bound (the rewrite once raised `KeyError: 'subfuns'` on a `LogNormal` site's
    `log_likelihood`)."""
    x = jnp.linspace(-1.0, 2.0, 3 * 4).reshape(3, 4)
    plain = jax.vmap(lambda r: jax.nn.relu(_writes_rows(r)))
    np.testing.assert_array_equal(jax.jit(windows_as_updates(plain))(x), jax.jit(plain)(x))
