"""NumPyro's `numpyro.contrib.control_flow` for effppl models: effppl models use JAX's own
`lax.scan`/`lax.cond` (its translator handles the sites inside), so these are thin aliases that
take NumPyro's arguments, for NumPyro programs ported by changing their imports.

Under `with` blocks of handlers entered outside any model (NumPyro's eager use, `with seed(
rng_seed=0), trace() as tr: model()`), a `scan` or `cond` runs whole under the blocks' handlers,
so its sites are recorded stacked, as with NumPyro's `scan`; a plain `lax.scan` there raises a
`SiteError` (those blocks handle one site at a time)."""

from jax import lax

from ..handlers.internal import SiteError, run_in_blocks

__all__ = ["scan", "cond"]


def scan(f, init, xs, length=None, reverse=False, history=1):
    """`jax.lax.scan(f, init, xs, length, reverse)` with NumPyro's signature. Sample sites in
    `f` are stacked along the loop axis, as with NumPyro's `scan`.

    Discrete sites in `f` marked for enumeration are summed out by the forward algorithm (see
    `effppl.handlers.enum`) over a chain whose order effppl reads from the carry: a carry
    holding the enumerated values of the last k steps (NumPyro's `history=k`, e.g. `(x_prev,
    x_curr)` for k = 2) gives a k-th order chain, at a cost of O(T K^(k+1)) for K joint states
    per step. So `history` is accepted for NumPyro's programs (an int >= 0), not needed.

    **Raises:** `SiteError` for a `history` that is not an int >= 0; `enum` raises a
    `SiteError` for a carry whose history has no bound (e.g. a running sum of enumerated
    values)."""
    if isinstance(history, bool) or not isinstance(history, int) or history < 0:
        raise SiteError(f"effppl.contrib.control_flow.scan(..., history={history!r}) expected "
                        f"an int >= 0 (NumPyro's number of previous steps a step depends on).")

    def run(init, xs):
        return lax.scan(f, init, xs, length=length, reverse=reverse)
    return run_in_blocks(run, init, xs)


def cond(pred, true_fun, false_fun, operand):
    """`jax.lax.cond(pred, true_fun, false_fun, operand)` with NumPyro's signature."""
    def run(pred, operand):
        return lax.cond(pred, true_fun, false_fun, operand)
    return run_in_blocks(run, pred, operand)
