"""NumPyro's `numpyro.contrib.control_flow` for effppl models: effppl models use JAX's own
`lax.scan`/`lax.cond` (its translator handles the sites inside), so these are thin aliases that
take NumPyro's arguments, for NumPyro programs ported by changing their imports.

Under `with` blocks of handlers entered outside any model (NumPyro's eager use, `with seed(
rng_seed=0), trace() as tr: model()`), a `scan` or `cond` runs whole under the blocks' handlers,
so its sites are recorded stacked, as with NumPyro's `scan`; a plain `lax.scan` there raises a
`SiteError` (those blocks handle one site at a time)."""

from jax import lax

from ..handlers.internal import SiteError, keep_weak_types, run_in_blocks

__all__ = ["scan", "cond"]


def scan(f, init, xs, length=None, reverse=False, history=1):
    """`jax.lax.scan(f, init, xs, length, reverse)` with NumPyro's signature. Sample sites in
    `f` are stacked along the loop axis, as with NumPyro's `scan`.

    Discrete sites in `f` marked for enumeration are summed out by the forward algorithm (see
    `effppl.handlers.enum`) over a chain whose order effppl reads from the carry: a carry
    holding the enumerated values of the last k steps (NumPyro's `history=k`, e.g. `(x_prev,
    x_curr)` for k = 2) gives a k-th order chain, at a cost of O(T K^(k+1)) for K joint states
    per step. So `history` is accepted for NumPyro's programs (an int >= 0), not needed.

    The carry is promoted as NumPyro's `scan` (that is, `lax.scan`) promotes it: a leaf of
    `init` that is weakly typed (a Python scalar such as `0` or `0.0`, also one passed as the
    model's argument, or a `jnp.asarray` of one) takes the dtype of the body's carry (e.g. an
    int `init` of a float carry); None leaves are empty, as in JAX.

    **Raises:** `TypeError` naming `f` and the carry leaf when the body's carry has another
    shape, structure, or a dtype a strongly typed `init` leaf does not have (as NumPyro's);
    `SiteError` for a `history` that is not an int >= 0; `enum` raises a
    `SiteError` for a carry whose history has no bound (e.g. a running sum of enumerated
    values)."""
    if isinstance(history, bool) or not isinstance(history, int) or history < 0:
        raise SiteError(f"effppl.contrib.control_flow.scan(..., history={history!r}) expected "
                        f"an int >= 0 (NumPyro's number of previous steps a step depends on).")

    def run(init, xs):
        init = keep_weak_types(init)
        try:
            return lax.scan(f, init, xs, length=length, reverse=reverse)
        except TypeError as e:
            if "carry input and carry output" not in str(e):
                raise
            raise TypeError(
                f"effppl.contrib.control_flow.scan({getattr(f, '__name__', 'f')}, init, ...): "
                f"{e}\nAs with NumPyro's `scan` (and `lax.scan`), a carry leaf may change only "
                f"from a weakly typed `init` (a Python scalar) to the body's dtype: give `init` "
                f"the dtype and shape the body returns.") from None
    return run_in_blocks(run, init, xs)


def cond(pred, true_fun, false_fun, operand):
    """`jax.lax.cond(pred, true_fun, false_fun, operand)` with NumPyro's signature."""
    def run(pred, operand):
        return lax.cond(pred, true_fun, false_fun, operand)
    return run_in_blocks(run, pred, operand)
