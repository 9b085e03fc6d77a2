"""NumPyro's `numpyro.contrib.control_flow` for effppl models: effppl models use JAX's own
`lax.scan`/`lax.cond` (its translator handles the sites inside), so these are thin aliases that
take NumPyro's arguments, for NumPyro programs ported by changing their imports."""

from jax import lax

from ..handlers.internal import SiteError

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
    return lax.scan(f, init, xs, length=length, reverse=reverse)


def cond(pred, true_fun, false_fun, operand):
    """`jax.lax.cond(pred, true_fun, false_fun, operand)` with NumPyro's signature."""
    return lax.cond(pred, true_fun, false_fun, operand)
