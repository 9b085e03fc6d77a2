"""NumPyro's `numpyro.contrib.control_flow` for effppl models: effppl models use JAX's own
`lax.scan`/`lax.cond` (its translator handles the sites inside), so these are thin aliases that
take NumPyro's arguments, for NumPyro programs ported by changing their imports."""

from jax import lax

__all__ = ["scan", "cond"]


def scan(f, init, xs, length=None, reverse=False, history=1):
    """`jax.lax.scan(f, init, xs, length, reverse)` with NumPyro's signature. Sample sites in
    `f` are stacked along the loop axis, as with NumPyro's `scan`.

    Discrete sites in `f` marked for enumeration are summed out by the forward algorithm over a
    first-order chain (see `effppl.handlers.enum`), as NumPyro's `scan` does with `history=1`.

    **Raises:** `NotImplementedError` for `history != 1` (NumPyro's markov history for
    enumeration)."""
    if history != 1:
        raise NotImplementedError(
            f"effppl.contrib.control_flow.scan(..., history={history}): only history=1 is "
            f"supported (enumerated discrete sites form a first-order chain across steps).")
    return lax.scan(f, init, xs, length=length, reverse=reverse)


def cond(pred, true_fun, false_fun, operand):
    """`jax.lax.cond(pred, true_fun, false_fun, operand)` with NumPyro's signature."""
    return lax.cond(pred, true_fun, false_fun, operand)
