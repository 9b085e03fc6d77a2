"""The integration loop's concerns: one operation (or two) and one handler each.

Each handler is an `effects.handle` whose clauses end with `resume(...)` (tail-resumptive), so
the translator inlines them into the loop and their parameters become the loop's carry:

| concern              | operations                  | handler parameters            |
|----------------------|-----------------------------|-------------------------------|
| time and step size   | `State.get`, `State.put`    | `(t, t_next)`                 |
| solution             | `State.get`, `State.put`    | `(y, f(t, y))` (first stage)  |
| taking a step        | `try_step`                  | none: holds `f` and a tableau |
| adapting the step    | `adapt`                     | the PID controller's memory   |
| saved outputs        | `save`                      | `(ys, next index into ts)`    |
| statistics           | `count`                     | steps, accepted, rejected     |

Early termination is `effects.fail`, caught around the loop (`_loop.py`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import effects as fx

tree_map = jax.tree_util.tree_map


class Like(NamedTuple):
    """The static type of a pytree of arrays (hashable: a static argument of an operation)."""

    tree: Any
    avals: tuple

    @classmethod
    def of(cls, value):
        leaves, tree = jax.tree_util.tree_flatten(value)
        return cls(tree, tuple((jnp.shape(x), jnp.result_type(x).name) for x in leaves))

    def structs(self):
        return self.tree.unflatten([jax.ShapeDtypeStruct(s, d) for s, d in self.avals])


class State:
    """A state handler for one concern: `get()` reads the state, `put(value)` replaces it."""

    def __init__(self, name: str):
        self.get_op = fx.Operation(f"{name}.get", out=lambda *, like: like.structs())
        self.put_op = fx.Operation(f"{name}.put", out=lambda value: ())

    def bind(self, init) -> BoundState:
        return BoundState(self, init, Like.of(init))


class BoundState(NamedTuple):
    """A `State` with its initial value: what the loop body calls, and its handler."""

    state: State
    init: Any
    like: Like

    def get(self):
        return self.state.get_op(like=self.like)

    def put(self, value):
        self.state.put_op(value)

    def handle(self, fn):
        """`fn` under this state's handler; returns `(fn's result, final state)`."""
        return fx.handle(fn, params=self.init, clauses={
            self.state.get_op: lambda s, resume, like: resume(s, s),
            self.state.put_op: lambda s, value, resume: resume(value, ())},
            ret=lambda s, r: (r, s))


CLOCK = State("clock")
SOLUTION = State("solution")


def _stages_like(y, stages):
    return tree_map(lambda x: jax.ShapeDtypeStruct((stages, *x.shape), x.dtype), y)


try_step = fx.Operation(
    "try_step", out=lambda t, t_next, y, f0, *, stages: (y, y, y, _stages_like(y, stages)))
"""`try_step(t, t_next, y, f(t, y), stages=s) -> (y_next, f(t_next, y_next), error, k)`: one
Runge-Kutta step from `t` to `t_next` (`k`: the stages, stacked along a leading axis)."""

adapt = fx.Operation(
    "adapt", out=lambda y, y_next, error, dt: (jax.ShapeDtypeStruct((), jnp.bool_), dt))
"""`adapt(y, y_next, error, dt) -> (accept, dt_next)`: the step-size controller's decision."""

save = fx.Operation("save", out=lambda t, t_next, y, y_next, k: ())
"""`save(t, t_next, y, y_next, k)`: an accepted step; save the outputs it covers."""

count = fx.Operation("count", out=lambda accepted: jax.ShapeDtypeStruct((), jnp.int32))
"""`count(accepted) -> steps`: one more step (accepted or rejected); the number so far."""


# --------------------------------------------------------------------------------------------
# Taking a step: the tableau's stages.


def rk_step(tableau, f, args, t, t_next, y, f0, unroll=True):
    """One step of the explicit Runge-Kutta pair `tableau` (FSAL): `(y_next, f(t_next, y_next),
    error estimate, stacked stages)`. With `unroll`, each stage is its own code (XLA fuses
    across them: fastest for a small vector field); else the stages are a `lax.scan` over the
    tableau's rows, so that the vector field is traced and compiled once (as Diffrax's stage
    loop: a large vector field compiles several times faster)."""
    if not unroll:
        return _rk_step_scanned(tableau, f, args, t, t_next, y, f0)
    dt = t_next - t
    ks = [f0]
    for i in range(1, tableau.stages):
        row = tableau.a[i]
        yi = tree_map(lambda y0, *k, row=row: y0 + (dt * _dot(row, k)).astype(y0.dtype), y,
                      *ks)
        ks.append(f(t + tableau.c[i] * dt if tableau.c[i] != 1.0 else t_next, yi, args))
    y_next = yi  # FSAL: the last stage is taken at the new state
    error = tree_map(lambda *k: (dt * _dot(tableau.b_error, k)).astype(k[0].dtype), *ks)
    stacked = tree_map(lambda *k: jnp.stack(k), *ks)
    return y_next, ks[-1], error, stacked


def _rk_step_scanned(tableau, f, args, t, t_next, y, f0):
    dt = t_next - t

    def combine(weights, ks):
        return tree_map(lambda y0, k: y0 + (dt * jnp.tensordot(weights.astype(k.dtype), k,
                                                               axes=1)).astype(y0.dtype), y, ks)

    def stage(ks, i):
        c = jnp.asarray(tableau.c)[i]
        ti = jnp.where(c == 1.0, t_next, t + c.astype(t.dtype) * dt)
        k = f(ti, combine(jnp.asarray(tableau.a)[i], ks), args)
        return tree_map(lambda K, ki: K.at[i].set(ki), ks, k), None

    ks = tree_map(lambda k: jnp.zeros((tableau.stages, *k.shape), k.dtype).at[0].set(k), f0)
    ks, _ = jax.lax.scan(stage, ks, jnp.arange(1, tableau.stages))
    y_next = combine(jnp.asarray(tableau.b), ks)  # the last stage's state (FSAL)
    error = tree_map(lambda k: (dt * jnp.tensordot(jnp.asarray(tableau.b_error, k.dtype), k,
                                                   axes=1)).astype(k.dtype), ks)
    return y_next, tree_map(lambda k: k[-1], ks), error, ks


def _dot(weights, ks):
    """`sum_i weights[i] * ks[i]` over the nonzero weights (Python floats: `ks`' dtype)."""
    terms = [float(w) * k for w, k in zip(weights, ks) if w != 0.0]
    out = terms[0]
    for term in terms[1:]:
        out = out + term
    return out


def stepper(fn, f, args, tableau, unroll=True):
    """`fn` with `try_step` taking steps of `tableau` on the vector field `f(t, y, args)`."""
    def clause(params, t, t_next, y, f0, *, resume, stages):
        return resume(params, rk_step(tableau, f, args, t, t_next, y, f0, unroll))
    return fx.handle(fn, clauses={try_step: clause})


# --------------------------------------------------------------------------------------------
# Adapting the step size: a PID controller with Diffrax's `PIDController` semantics.


class PIDController(NamedTuple):
    """Coefficients of the PID step-size controller (Diffrax's names and defaults: an integral
    controller). The step is accepted when the RMS norm of `error / (atol + rtol * max(|y|,
    |y_next|))` is below 1; the next step is `dt` times `safety * e_n^(-(i + p + d) / order) *
    e_{n-1}^((p + 2 d) / order) * e_{n-2}^(-d / order)`, clipped to `[factormin, factormax]`
    (to `[factormin, safety]` after a rejection, and at least 1 after an acceptance), then to
    `dtmax`.

    **Example:** a PI controller (coefficients Diffrax's docs list for moderately hard problems):

    >>> import jax.numpy as jnp
    >>> from effppl import ode
    >>> sol = ode.solve(lambda t, y, a: -y, jnp.array([1.0]), 0.0, 1.0,
    ...                 controller=ode.PIDController(pcoeff=0.4, icoeff=0.3))
    >>> round(float(sol.ys[0, 0]), 5)
    0.36788

    **References:** Söderlind (2003), "Digital filters in adaptive time-stepping", ACM TOMS
    29(1); Hairer, Nørsett & Wanner (1993), "Solving Ordinary Differential Equations I", §II.4;
    Diffrax's `PIDController`.
    """

    pcoeff: float = 0.0
    icoeff: float = 1.0
    dcoeff: float = 0.0
    factormin: float = 0.2
    factormax: float = 10.0
    safety: float = 0.9
    dtmax: float | None = None


def rms_norm(tree):
    """`sqrt(mean(x^2))` over every element of a pytree (`|x|` for a single element)."""
    leaves = jax.tree_util.tree_leaves(tree)
    size = sum(x.size for x in leaves)
    if size == 1:
        return jnp.abs(leaves[0].reshape(()))
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in leaves) / size)


def _scaled_error(y, y_next, error, rtol, atol):
    def scale(y0, y1, e):
        y1 = jnp.where(jnp.isnan(y1).any(), y0, y1)  # a NaN candidate: scale by the old state
        e = jnp.where(jnp.isnan(e), jnp.inf, e)
        return e / (atol + jnp.maximum(jnp.abs(y0), jnp.abs(y1)) * rtol)
    return rms_norm(tree_map(scale, y, y_next, error))


def controller(fn, pid: PIDController, rtol, atol, order: int, dtype):
    """`fn` with `adapt` answered by the PID controller; its memory (the inverse scaled errors
    of the last two accepted steps) is the handler's parameter."""
    one = jnp.ones((), dtype)

    def clause(memory, y, y_next, error, dt, *, resume):
        prev, prev_prev = memory
        scaled = _scaled_error(y, y_next, error, rtol, atol)
        accept = scaled < 1
        inv = jax.lax.stop_gradient(1 / scaled)
        factor = pid.safety * _power(inv, (pid.icoeff + pid.pcoeff + pid.dcoeff) / order) \
            * _power(prev, -(pid.pcoeff + 2 * pid.dcoeff) / order) \
            * _power(prev_prev, pid.dcoeff / order)
        factor = jnp.clip(factor, jnp.where(accept, 1.0, pid.factormin),
                          jnp.where(accept, pid.factormax, pid.safety))
        dt_next = dt * jax.lax.stop_gradient(factor).astype(dt.dtype)
        if pid.dtmax is not None:
            dt_next = jnp.minimum(dt_next, pid.dtmax)
        inv = jnp.where((inv == 0) | jnp.isinf(inv), 1.0, inv).astype(dtype)
        memory = (jnp.where(accept, inv, prev), jnp.where(accept, prev, prev_prev))
        return resume(memory, (accept, dt_next))

    return fx.handle(fn, params=(one, one), clauses={adapt: clause})


def _power(x, p):
    return 1.0 if p == 0 else x ** p


# --------------------------------------------------------------------------------------------
# Saved outputs: dense output at the requested times, a window of them per accepted step.

WINDOW = 16  # output times interpolated at once; more in one step take more windows


def saver(fn, ts, ys, first, dense, max_windows):
    """`fn` with `save` writing, for each accepted step from `t` to `t_next`, the dense output at
    the times `ts[j]` in `(t, t_next]` (`j` from `first`, the handler's index into `ts`) into
    `ys`. Returns `(fn's result, (ys, j))`."""
    window = min(len(ts), WINDOW)

    def write(ys, j, t, t_next, y, y_next, k):
        """The window of outputs from `j`: `(ys, j + how many were in the step)`."""
        start = jnp.minimum(j, len(ts) - window)
        times = jax.lax.dynamic_slice_in_dim(ts, start, window)
        index = start + jnp.arange(window)
        due = (index >= j) & (times <= t_next)
        theta = ((times - t) / (t_next - t)).astype(jnp.result_type(*jax.tree.leaves(y)))
        powers = theta[:, None] ** jnp.arange(1, dense.shape[1] + 1)
        weights = powers @ dense.T.astype(theta.dtype)  # (window, stages)
        dt = t_next - t

        def leaf(buf, y0, y1, kk):
            values = y0 + (dt * jnp.tensordot(weights, kk, axes=1)).astype(y0.dtype)
            end = (times == t_next).reshape((window,) + (1,) * y0.ndim)
            values = jnp.where(end, y1, values)  # exactly the step's end point
            old = jax.lax.dynamic_slice_in_dim(buf, start, window)
            keep = due.reshape((window,) + (1,) * y0.ndim)
            return jax.lax.dynamic_update_slice_in_dim(buf, jnp.where(keep, values, old),
                                                       start, 0)

        ys = tree_map(leaf, ys, y, y_next, k)
        return ys, j + jnp.sum(due).astype(j.dtype)

    def pending(j, t_next):
        return (j < len(ts)) & (ts[jnp.minimum(j, len(ts) - 1)] <= t_next)

    def clause(state, t, t_next, y, y_next, k, *, resume):
        ys, j = state
        step = lambda s: write(s[0], s[1], t, t_next, y, y_next, k)  # noqa: E731
        if max_windows == 1:
            ys, j = jax.lax.cond(pending(j, t_next), step, lambda s: s, (ys, j))
        else:
            ys, j = fx.while_loop(lambda s: pending(s[1], t_next), step, (ys, j),
                                  max_steps=max_windows, checkpoints=2)
        return resume((ys, j), ())

    return fx.handle(fn, params=(ys, first), clauses={save: clause}, ret=lambda s, r: (r, s))


# --------------------------------------------------------------------------------------------
# Statistics


def statistics(fn):
    """`fn` with `count` tallying steps; returns `(fn's result, (steps, accepted, rejected))`."""
    zero = np.int32(0)

    def clause(stats, accepted, *, resume):
        steps, acc, rej = stats
        ok = accepted.astype(jnp.int32)
        return resume((steps + 1, acc + ok, rej + 1 - ok), steps + 1)

    return fx.handle(fn, params=(zero, zero, zero), clauses={count: clause},
                     ret=lambda stats, r: (r, stats))
