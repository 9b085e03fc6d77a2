"""The integration loop, in direct style: each concern is a handler (`_concerns.py`).

`integrate` is the whole loop: a body that takes a step, lets the controller accept or reject it
and pick the next step size, counts it, saves what it covers, and fails on a step size that
stopped moving or on running out of steps. Nothing of that is threaded by hand: the state lives
in the handlers, the failure leaves the loop by `effects.fail` (caught around it, as a code).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .. import effects as fx
from ._concerns import (
    CLOCK,
    SOLUTION,
    WINDOW,
    PIDController,
    adapt,
    controller,
    count,
    save,
    saver,
    statistics,
    stepper,
    try_step,
)
from ._tableaus import Tableau

MAX_STEPS, UNDERFLOW, NONFINITE = "max_steps", "step size underflow", "non-finite initial state"
RESULTS = ("successful", MAX_STEPS, UNDERFLOW, NONFINITE)
_MAX_STEPS, _UNDERFLOW = RESULTS.index(MAX_STEPS), RESULTS.index(UNDERFLOW)
STOPPED = "the loop stopped: {}"  # with the reason's index into `RESULTS` (`solve` says it)


class Problem(NamedTuple):
    """Everything `integrate` needs (arrays traced, the rest static)."""

    f: object          # f(t, y, args)
    args: object
    y0: object         # pytree of arrays
    f0: object         # f(t0, y0, args)
    t0: jax.Array
    t1: jax.Array
    dt0: jax.Array
    ts: jax.Array | None  # (T,) output times in [t0, t1]; None: t1 only, the final state
    tableau: Tableau
    pid: PIDController
    rtol: jax.Array
    atol: jax.Array
    max_steps: int
    checkpoints: int | None
    unroll: bool = True  # the Runge-Kutta stages unrolled, or a scan (`_concerns.rk_step`)


def integrate(p: Problem):
    """Solve; returns `(code, (t, t_next), (y, f), (ys, saved), (steps, accepted, rejected))`,
    `code` an index into `RESULTS`."""
    t1, floor = p.t1, _floor(p.t1)
    stages = p.tableau.stages

    def attempt(going):
        t, t_next = clock.get()
        y, f0 = solution.get()
        y_next, f_next, error, k = try_step(t, t_next, y, f0, stages=stages)
        accept, dt_next = adapt(y, y_next, error, t_next - t)
        steps = count(accept)
        solution.put(jax.tree.map(lambda a, b: jnp.where(accept, a, b), (y_next, f_next), (y, f0)))
        if p.ts is not None:  # else only the final state is returned
            jax.lax.cond(accept, lambda: save(t, t_next, y, y_next, k), lambda: ())
        t = jnp.where(accept, jnp.minimum(t_next, t1), t)
        t_next = _clip_to_end(t, t + dt_next, t1, floor, accept)
        clock.put((t, t_next))
        going = t < t1
        stuck, spent = ~(t_next > t) & going, (steps >= p.max_steps) & going
        fx.fail_if(stuck | spent, STOPPED, jnp.where(stuck, _UNDERFLOW, _MAX_STEPS), t)
        return going

    def loop():
        fx.fail_if(~_finite((p.y0, p.f0)), NONFINITE, p.t0)
        fx.while_loop(lambda going: going, attempt, p.t0 < t1, max_steps=p.max_steps,
                      checkpoints=p.checkpoints)
        return jnp.int32(0)

    clock = CLOCK.bind((p.t0, jnp.minimum(p.t0 + p.dt0, t1)))
    solution = SOLUTION.bind((p.y0, p.f0))
    caught = fx.catch(loop, _code)
    program = stepper(caught, p.f, p.args, p.tableau, p.unroll)
    program = controller(program, p.pid, p.rtol, p.atol, p.tableau.order, _real(p.y0))
    program = clock.handle(solution.handle(program))
    if p.ts is None:
        (((code, sol), tclock), stats) = statistics(program)()
        return code, tclock, sol, (None, None), stats
    ys0 = jax.tree.map(lambda x: jnp.full((len(p.ts), *x.shape), jnp.inf, x.dtype), p.y0)
    initial = p.ts <= p.t0  # saved before the first step: y0
    ys0 = jax.tree.map(lambda b, x: jnp.where(initial.reshape((-1,) + (1,) * x.ndim), x, b),
                       ys0, p.y0)
    windows = -(-len(p.ts) // WINDOW) if len(p.ts) > WINDOW else 1
    program = saver(program, p.ts, ys0, jnp.sum(initial).astype(jnp.int32), p.tableau.dense,
                    windows)
    ((((code, sol), tclock), saved), stats) = statistics(program)()
    return code, tclock, sol, saved, stats


def _code(message, *values):
    """The result code of a caught failure: the loop's reason, or the start's."""
    if message == STOPPED:
        return jnp.asarray(values[0], jnp.int32)
    return jnp.int32(RESULTS.index(message))


def _finite(tree):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def _real(y):
    return jnp.result_type(*jax.tree.leaves(y))


def _floor(t1, ulps=100):
    """`t1` less `ulps` ULPs (`nextafter` towards -inf, `ulps` times): a step ending past it
    ends at `t1` (no sliver of a last step). On the integer image of the floats, whose order
    is theirs: a magnitude's bits count its ULPs from zero."""
    bits = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[t1.dtype.itemsize]
    mag = jax.lax.bitcast_convert_type(jnp.abs(t1), bits)
    down = jax.lax.bitcast_convert_type(mag - jnp.minimum(mag, ulps), t1.dtype)  # towards 0
    across = -jax.lax.bitcast_convert_type(ulps - jnp.minimum(mag, ulps), t1.dtype)
    up = -jax.lax.bitcast_convert_type(mag + ulps, t1.dtype)  # away from 0, below 0
    return jnp.where(t1 > 0, jnp.where(mag >= ulps, down, across), up)


def _clip_to_end(t, t_next, t1, floor, accept):
    """Diffrax's rule: past `floor`, an accepted step's successor ends at `t1`; after a rejected
    one, halfway to `t1`."""
    return jnp.where(t_next > floor, jnp.where(accept, t1, t + 0.5 * (t1 - t)), t_next)
