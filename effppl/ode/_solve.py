"""`effppl.ode.solve`: the public entry point, its checks and its result."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.core
import jax.extend
import jax.numpy as jnp
import numpy as np

from .. import effects as fx
from .._errors import EffpplError
from ._concerns import PIDController, rms_norm
from ._loop import MAX_STEPS, NONFINITE, RESULTS, UNDERFLOW, Problem, integrate
from ._tableaus import TABLEAUS


class ODEInputError(EffpplError, ValueError):
    """An argument of `effppl.ode.solve` has a value it cannot solve with."""


class ODETypeError(EffpplError, TypeError):
    """An argument of `effppl.ode.solve` has a type it cannot solve with."""


class Solution(NamedTuple):
    """What `solve` returns (a pytree: it passes through `jit` and `vmap`).

    - `ts`: `(T,)` the output times.
    - `ys`: the solution at `ts`, `y0`'s pytree with a leading axis of length `T` (`inf` at the
      times a failed solve did not reach).
    - `stats`: `{"num_steps", "num_accepted_steps", "num_rejected_steps"}`, int32 scalars.
    - `result`: int32, an index into `RESULTS` (0: successful).
    """

    ts: jax.Array
    ys: Any
    stats: dict
    result: jax.Array


_MESSAGES = {
    MAX_STEPS: "effppl.ode.solve: max_steps={max_steps} reached at t = {{}} (t1 = {{}}): "
               "raise max_steps or loosen rtol/atol (the solution may blow up there, or the "
               "problem be stiff: an explicit solver then needs very small steps).",
    UNDERFLOW: "effppl.ode.solve: the step size underflowed at t = {{}}: the vector field or "
               "the solution is probably not finite there (a singularity, or a blow-up).",
    NONFINITE: "effppl.ode.solve: y0 or f(t0, y0, args) is not finite (t0 = {{}}).",
}


def solve(f: Callable, y0: Any, t0, t1, *, args: Any = None, ts=None, solver: str = "tsit5",
          rtol=1e-6, atol=1e-6, dt0=None, max_steps: int = 4096,
          controller: PIDController | None = None, checkpoints: int | None = None,
          throw: bool = True) -> Solution:
    """Solve the ODE `dy/dt = f(t, y, args)` from `y(t0) = y0` to `t1` with an adaptive
    explicit Runge-Kutta method, and return the solution at the times `ts`.

    The integration loop is written with `effppl.effects` (one handler per concern; see
    `effppl/ode/README.md`) and compiles to one bounded `while` loop, differentiable in forward
    and reverse mode (reverse mode by checkpointing: memory of about `2 sqrt(max_steps)` states).

    **Arguments:**
    - `f`: the vector field, `f(t, y, args) -> dy/dt` with `y`'s pytree structure (Diffrax's
      convention).
    - `y0`: a pytree of float arrays, the initial state.
    - `t0`, `t1`: float scalars, `t0 <= t1`.
    - `args`: a pytree of arrays passed to `f` (differentiable).
    - `ts`: `(T,)` increasing output times in `[t0, t1]`; default `[t1]`. Saved by each
      method's dense output (no step is shortened for them).
    - `solver`: `"tsit5"` (Tsitouras 5(4)), `"dopri5"` (Dormand-Prince 5(4)) or `"bosh3"`
      (Bogacki-Shampine 3(2)).
    - `rtol`, `atol`: tolerances of the step-size controller (float scalars, may be traced).
    - `dt0`: the first step size; default chosen from `f` (Hairer, Nørsett & Wanner, §II.4).
    - `max_steps`: static int, the most steps (accepted or rejected) taken.
    - `controller`: a `PIDController` (default: integral control, Diffrax's default).
    - `checkpoints`: static even int, carries kept for reverse mode (`effects.while_loop`).
    - `throw`: when the solve fails (`max_steps` reached, step size underflow, non-finite
      start), perform `effects.fail` naming the reason: outside any handler that raises
      `effects.FailureError` (eagerly) or an error when the compiled program runs; inside an
      `effppl` model the log density becomes `-inf`. With `throw=False`, only `result` says so.

    **Returns:** a `Solution` (`ts`, `ys`, `stats`, `result`).

    **Raises:** `ODETypeError`/`ODEInputError` for arguments it cannot solve with (named);
    `effects.FailureError` for a failed solve with `throw=True` outside any handler.

    **Example:** exponential decay, `y(1) = exp(-1)`:

    >>> import jax.numpy as jnp
    >>> from effppl import ode
    >>> sol = ode.solve(lambda t, y, k: -k * y, jnp.array([1.0]), 0.0, 1.0, args=1.0,
    ...                 ts=jnp.array([0.5, 1.0]), rtol=1e-8, atol=1e-8)
    >>> [round(float(v), 6) for v in sol.ys[:, 0]]
    [0.606531, 0.367879]

    **References:** Tsitouras (2011), Comput. Math. Appl. 62(2); Dormand & Prince (1980),
    J. Comp. Appl. Math. 6; Shampine (1986), Math. Comp. 46(173); Bogacki & Shampine (1989),
    Appl. Math. Lett. 2(4); Hairer, Nørsett & Wanner (1993), "Solving Ordinary Differential
    Equations I"; Kidger (2021), "On Neural Differential Equations" (Diffrax); the paper
    "Handling JAX" §7.1.
    """
    if not callable(f):
        raise ODETypeError(f"effppl.ode.solve(f, ...) expected a callable vector field "
                           f"`f(t, y, args)`, but got {type(f).__name__} {f!r:.60}.")
    if solver not in TABLEAUS:
        raise ODEInputError(f"effppl.ode.solve(..., solver={solver!r}) expected one of "
                            f"{sorted(TABLEAUS)}.")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ODEInputError(f"effppl.ode.solve(..., max_steps={max_steps!r}) expected a "
                            f"positive Python int.")
    controller = PIDController() if controller is None else controller
    if not isinstance(controller, PIDController):
        raise ODETypeError(f"effppl.ode.solve(..., controller=...) expected an "
                           f"effppl.ode.PIDController, but got {controller!r:.60}.")
    y0 = _check_y0(y0)
    t0, t1 = _scalar("t0", t0), _scalar("t1", t1)
    rtol, atol = _scalar("rtol", rtol), _scalar("atol", atol)
    ts = None if ts is None else _check_ts(ts)
    _check_order(t0, t1, t1[None] if ts is None else ts, rtol, atol)
    dt0 = None if dt0 is None else _scalar("dt0", dt0)
    sol, t = _solve(f, solver, controller, max_steps, checkpoints, dt0 is None,
                    y0, t0, t1, ts, args, rtol, atol, dt0)
    if throw:  # the solver's own failure, for whoever is outside to decide about
        ys = fx.fail_if(sol.result == RESULTS.index(MAX_STEPS),
                        _MESSAGES[MAX_STEPS].format(max_steps=max_steps), t, t1, carry=sol.ys)
        ys = fx.fail_if(sol.result == RESULTS.index(UNDERFLOW), _MESSAGES[UNDERFLOW].format(), t,
                        carry=ys)
        ys = fx.fail_if(sol.result == RESULTS.index(NONFINITE), _MESSAGES[NONFINITE].format(),
                        t0, carry=ys)
        sol = sol._replace(ys=ys)
    return sol


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4, 5))
def _solve(f, solver, pid, max_steps, checkpoints, choose_dt0, y0, t0, t1, ts, args, rtol,
           atol, dt0):
    tableau = TABLEAUS[solver]
    time = jnp.result_type(t0, t1, *([] if ts is None else [ts]))
    t0, t1 = t0.astype(time), t1.astype(time)
    ts = None if ts is None else ts.astype(time)
    f0 = f(t0, y0, args)
    _check_field(f0, y0)
    if choose_dt0:
        dt0 = _initial_step(f, t0, y0, f0, args, tableau.order, rtol, atol)
    dt0 = jax.lax.stop_gradient(jnp.asarray(dt0, time))

    unroll = (sum(x.size for x in jax.tree.leaves(y0)) <= UNROLL_MAX_SIZE
              and _size(jax.make_jaxpr(lambda: f(t0, y0, args))().jaxpr) <= UNROLL_MAX_EQNS)

    def run(y0, f0, args, t0, t1, dt0, ts, rtol, atol):
        return integrate(Problem(f, args, y0, f0, t0, t1, dt0, ts, tableau, pid, rtol, atol,
                                 max_steps, checkpoints, unroll))

    code, (t, _), (y, _), (ys, _), (steps, accepted, rejected) = fx.eliminate(run)(
        y0, f0, args, t0, t1, dt0, ts, rtol, atol)
    if ts is None:  # the final state alone, where the solve got to
        ts = t1[None]
        ys = jax.tree.map(lambda x: jnp.where(code == 0, x, jnp.inf)[None], y)
    stats = {"num_steps": steps, "num_accepted_steps": accepted,
             "num_rejected_steps": rejected}
    return Solution(ts, ys, stats, code), t


UNROLL_MAX_EQNS, UNROLL_MAX_SIZE = 64, 256
"""A small state (at most `UNROLL_MAX_SIZE` numbers) under a small vector field (at most
`UNROLL_MAX_EQNS` equations) has its Runge-Kutta stages unrolled: the step is a few fused
kernels, and a loop over the stages would cost more than they do. Otherwise the stages are a
loop (as Diffrax's): the vector field is compiled once, and XLA does not fuse a stage's state
into the next stage's vector field (which, for a stencil such as `jnp.roll`, recomputes it:
measured 4x slower on a 16 x 16 reaction-diffusion grid)."""


def _size(jaxpr) -> int:
    return sum(1 + sum(_size(sub) for sub in jax.extend.core.jaxprs_in_params(eqn.params))
               for eqn in jaxpr.eqns)


def _initial_step(f, t0, y0, f0, args, order, rtol, atol):
    """Hairer, Nørsett & Wanner (1993), §II.4 "Starting step size" (Diffrax's choice too)."""
    scale = jax.tree.map(lambda y: atol + jnp.abs(y) * rtol, y0)
    div = lambda a, b: jax.tree.map(lambda x, s: x / s, a, b)  # noqa: E731
    d0, d1 = rms_norm(div(y0, scale)), rms_norm(div(f0, scale))
    small = (d0 < 1e-5) | (d1 < 1e-5)
    h0 = jnp.where(small, 1e-6, 0.01 * (d0 / jnp.where(small, 1.0, d1)))
    y1 = jax.tree.map(lambda y, k: y + h0.astype(y.dtype) * k, y0, f0)
    f1 = f(t0 + h0.astype(t0.dtype), y1, args)
    d2 = rms_norm(div(jax.tree.map(jnp.subtract, f1, f0), scale)) / h0
    top = jnp.maximum(d1, d2)
    h1 = jnp.where(top <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3), (0.01 / top) ** (1.0 / order))
    return jnp.minimum(100 * h0, h1)


# --------------------------------------------------------------------------------------------
# Checks


def _check_y0(y0):
    leaves, tree = jax.tree_util.tree_flatten(y0)
    if not leaves:
        raise ODEInputError("effppl.ode.solve(f, y0, ...) expected y0 to hold at least one "
                            "array, but it is empty.")
    out = []
    for x in leaves:
        try:
            x = x if isinstance(x, jax.core.Tracer) else jnp.asarray(x)
        except TypeError:
            raise ODETypeError(f"effppl.ode.solve(f, y0, ...) expected y0 to be a pytree of "
                               f"float arrays, but it holds {type(x).__name__} {x!r:.40}.") \
                from None
        if jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_:
            x = x.astype(jnp.result_type(float))
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise ODETypeError(f"effppl.ode.solve(f, y0, ...) expected float arrays, but y0 "
                               f"holds one of dtype {x.dtype}.")
        out.append(x)
    return tree.unflatten(out)


def _scalar(name, x):
    x = x if isinstance(x, jax.core.Tracer) else jnp.asarray(x)
    if x.shape != () or not (jnp.issubdtype(x.dtype, jnp.floating)
                             or jnp.issubdtype(x.dtype, jnp.integer)):
        raise ODETypeError(f"effppl.ode.solve(..., {name}=...) expected a real scalar, but got "
                           f"an array of shape {x.shape} and dtype {x.dtype}.")
    return x.astype(jnp.result_type(x, float))


def _check_ts(ts):
    ts = ts if isinstance(ts, jax.core.Tracer) else jnp.asarray(ts)
    if ts.ndim != 1 or ts.shape[0] == 0:
        raise ODEInputError(f"effppl.ode.solve(..., ts=...) expected a non-empty 1-D array of "
                            f"output times, but got shape {ts.shape}.")
    return ts.astype(jnp.result_type(ts, float))


def _concrete(*xs):
    return not any(isinstance(x, jax.core.Tracer) for x in xs)


def _check_order(t0, t1, ts, rtol, atol):
    if _concrete(t0, t1) and not float(t0) <= float(t1):
        raise ODEInputError(f"effppl.ode.solve(f, y0, t0={float(t0)}, t1={float(t1)}) expected "
                            f"t0 <= t1 (integrating backwards in time is not supported).")
    if _concrete(t0, t1, ts):
        times = np.asarray(ts)
        if np.any(np.diff(times) < 0) or times[0] < float(t0) or times[-1] > float(t1):
            raise ODEInputError(f"effppl.ode.solve(..., ts=...) expected increasing times in "
                                f"[t0, t1] = [{float(t0)}, {float(t1)}], but got {times}.")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if _concrete(tol) and not float(tol) >= 0:
            raise ODEInputError(f"effppl.ode.solve(..., {name}={float(tol)}) expected a "
                                f"non-negative tolerance.")


def _check_field(f0, y0):
    want = jax.tree_util.tree_structure(y0)
    have = jax.tree_util.tree_structure(f0)
    shapes = [jnp.shape(a) == jnp.shape(b) for a, b in
              zip(jax.tree.leaves(f0), jax.tree.leaves(y0))] if have == want else [False]
    if not all(shapes):
        raise ODETypeError(f"effppl.ode.solve: f(t0, y0, args) must return a pytree of the "
                           f"structure and shapes of y0, {jax.tree.map(jnp.shape, y0)}, but it "
                           f"returned {jax.tree.map(jnp.shape, f0)}.")
