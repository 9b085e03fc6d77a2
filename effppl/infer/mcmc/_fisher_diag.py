"""nutpie's per-draw warmup of a diagonal inverse mass matrix (`mass_matrix="fisher_diag"`),
inside the compiled sampler, O(d) per draw.

The rule and schedule are nuts-rs's (`pymc-devs/nuts-rs`, read at 5332136: `adapt_strategy.rs`
`GlobalStrategy::adapt`, `transform/adapt/diagonal.rs`, `math/cpu_math.rs`
`array_update_var_inv_std_draw_grad`, `stepsize/dual_avg.rs`):

- Two running estimates of the draws' and gradients' variances, a foreground and a background,
  both fed every kept draw (a draw is kept when the chain moved; nuts-rs keeps a draw whose
  index in its trajectory is not 0). Both start with the initial point.
- A *switch* makes the background the foreground and starts an empty background: when the
  background holds `switch_freq` draws and another window still ends before the last 15% of the
  warmup. `switch_freq` is 10 in the first 30% of the warmup, then 80 (or the background's count
  at that draw, if larger) growing to `max(n + 1, round(1.5 n))` after each switch.
- The inverse mass matrix is re-estimated from the foreground after every draw of the first 85%
  of the warmup (at a switch, and whenever the last change is a draw old), once it holds 3 draws:
  `sqrt(S_x / S_g)` per coordinate, clipped to `[1e-20, 1e20]`; a coordinate where it is 0 or not
  finite keeps its value. `S` is nuts-rs's running sum `sum_k (v_k - mean_{k-1})^2`, in which
  draw k counts `k / (k - 1)` times as much as in the unbiased sum: kept as nuts-rs has it.
- The step size follows one dual-averaging run (Hoffman & Gelman 2014, nuts-rs's form: `t0` 10,
  `gamma` 0.05, `kappa` 0.75, the step size capped at pi) over the whole warmup, restarted once,
  when the first estimate replaces the gradient-based start; the step size in force during the
  warmup is the last iterate, and its running average is the one used after the warmup.

Where effppl differs from nuts-rs: the restart begins at the current step size, where nuts-rs
searches anew from 0.1 by doubling or halving single leapfrog steps around the target acceptance;
the acceptance statistic is blackjax's mean over the trajectory throughout (nuts-rs switches to a
symmetrised one once no switch remains); a divergent transition's draw is kept when the chain
moved (nuts-rs: when it lies more than 4 steps from the start); no step-size jitter; a zero
gradient at the initial point starts its coordinate at 1, not at nuts-rs's 1e20; and with fewer
than 20 warmup draws left at the first estimate (a warmup of about 20 draws or less) dual
averaging is not restarted: its first iterate after a restart, `log(10 * step)`, has weight 1 in
the running average, and with a few iterates left the final step size stayed near the cap (pi
after a warmup of 5: a quarter of the draws divergent on a normal).
"""

from typing import Any, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np

__all__ = ["FisherDiagState", "fisher_diag_engine", "fisher_diag_schedule"]

EARLY_WINDOW = 0.3  # share of the warmup with windows of EARLY_SWITCH_FREQ draws
STEP_SIZE_WINDOW = 0.15  # the last share of the warmup: the step size alone
EARLY_SWITCH_FREQ = 10
SWITCH_FREQ = 80
WINDOW_GROWTH = 1.5
_CLIP = (1e-20, 1e20)
_MIN_DRAWS = 3  # an estimate needs this many draws in the foreground
_MIN_RESTART_DRAWS = 20  # dual averaging restarts only with this many warmup draws left
_T0, _GAMMA, _KAPPA, _MAX_STEP_SIZE = 10.0, 0.05, 0.75, np.pi


class DualAverage(NamedTuple):
    """nuts-rs's `DualAverage`: the last and the averaged log step size, the averaged error,
    the shrinkage target `mu` and the iteration count (from 1)."""

    log_step: Any
    log_step_adapted: Any
    hbar: Any
    mu: Any
    count: Any


def _da_new(step_size):
    log = jnp.log(step_size)
    return DualAverage(log, log, jnp.zeros_like(log), jnp.log(10.0 * step_size),
                       jnp.ones((), jnp.int32))


def _da_advance(da: DualAverage, accept, target):
    count = da.count.astype(da.hbar.dtype)
    w = 1.0 / (count + _T0)
    hbar = (1.0 - w) * da.hbar + w * (target - accept)
    log_step = jnp.minimum(da.mu - hbar * jnp.sqrt(count) / _GAMMA, np.log(_MAX_STEP_SIZE))
    mk = count ** -_KAPPA
    return DualAverage(log_step, mk * log_step + (1.0 - mk) * da.log_step_adapted, hbar,
                       da.mu, da.count + 1)


class Running(NamedTuple):
    """nuts-rs's `RunningVariance` of the draws and of the gradients: count, means, sums."""

    count: Any
    mean_x: Any
    sum_x: Any
    mean_g: Any
    sum_g: Any


def _running_empty(d, dtype, count=0):
    zeros = jnp.zeros(d, dtype)
    return Running(jnp.asarray(count, jnp.int32), zeros, zeros, zeros, zeros)


def _running_add(r: Running, x, g):
    count = r.count + 1
    first = count == 1

    def step(mean, total, v):
        diff = v - mean
        return (jnp.where(first, v, mean + diff / count.astype(v.dtype)),
                jnp.where(first, total, total + diff * diff))

    mean_x, sum_x = step(r.mean_x, r.sum_x, x)
    mean_g, sum_g = step(r.mean_g, r.sum_g, g)
    return Running(count, mean_x, sum_x, mean_g, sum_g)


def fisher_diag_estimate(running: Running, current):
    """`sqrt(S_x / S_g)` clipped to `[1e-20, 1e20]`; `current` where that is 0 or not finite."""
    val = jnp.sqrt(running.sum_x / running.sum_g)
    ok = jnp.isfinite(val) & (val != 0)
    return jnp.where(ok, jnp.clip(val, *_CLIP), current)


class FisherDiagState(NamedTuple):
    """Warmup state of one chain. `draw`: transitions adapted so far; `window`: the main phase's
    switch frequency; `last_update`: the draw of the last change of the matrix; `fresh`: no
    estimate has replaced the gradient-based start yet; `early_end`, `final_window`,
    `num_warmup`: the phases' bounds (draws); `switches`, `updates`: counts, for tests."""

    dual_average: DualAverage
    step_size: Any
    inverse_mass_matrix: Any
    foreground: Running
    background: Running
    last_position: Any
    draw: Any
    window: Any
    last_update: Any
    fresh: Any
    early_end: Any
    final_window: Any
    num_warmup: Any
    switches: Any
    updates: Any


def _bounds(num_warmup: int) -> tuple[int, int]:
    """`(early_end, final_window)`: the first draw of the main phase, of the step-size phase."""
    return int(EARLY_WINDOW * num_warmup), num_warmup - int(STEP_SIZE_WINDOW * num_warmup)


def _grown(window):
    return jnp.maximum(window + 1, jnp.floor(window * WINDOW_GROWTH + 0.5).astype(window.dtype))


def fisher_diag_engine(target_accept_prob: float):
    """`(init, update, final, seed)`, with `_adaptation.Scheme`'s signatures; `update` ignores
    its schedule row (the engine counts its draws; `fisher_diag_schedule` is the schedule it
    follows when every draw is kept)."""

    def init(position, step_size, num_warmup):
        flat = jax.flatten_util.ravel_pytree(position)[0]
        d, dtype = flat.shape[0], flat.dtype
        step_size = jnp.asarray(step_size, dtype)
        early_end, final_window = _bounds(num_warmup)
        i32 = lambda v: jnp.asarray(v, jnp.int32)  # noqa: E731
        # the initial point is the estimators' first draw (its gradient comes with `seed`)
        first = _running_empty(d, dtype, count=1)._replace(mean_x=flat)
        return FisherDiagState(_da_new(step_size), step_size, jnp.ones(d, dtype), first, first,
                               flat, i32(0), i32(SWITCH_FREQ), i32(0), jnp.asarray(True),
                               i32(early_end), i32(final_window), i32(num_warmup), i32(0), i32(0))

    def seed(state, grad):
        # nuts-rs `update_diag_grad`: M^-1 = 1 / |grad| (clipped); here 1 where it vanishes
        g = jax.flatten_util.ravel_pytree(grad)[0].astype(state.inverse_mass_matrix.dtype)
        a = jnp.abs(g)
        imm = jnp.where(a > 0, 1.0 / jnp.clip(a, *_CLIP), 1.0)
        return state._replace(inverse_mass_matrix=imm,
                              foreground=state.foreground._replace(mean_g=g),
                              background=state.background._replace(mean_g=g))

    def adapt_mass_matrix(state, x, g):
        """One draw of the first 85%: nuts-rs `GlobalStrategy::adapt`'s mass-matrix branch."""
        draw, early = state.draw, state.draw < state.early_end
        window = jnp.where(draw == state.early_end,
                           jnp.maximum(state.window, state.background.count), state.window)
        kept = jnp.any(x != state.last_position)
        fg, bg = (jax.tree.map(lambda a, b: jnp.where(kept, a, b), _running_add(r, x, g), r)
                  for r in (state.foreground, state.background))
        next_window = jnp.where(early, EARLY_SWITCH_FREQ, _grown(window))
        switch_freq = jnp.where(early, EARLY_SWITCH_FREQ, window)
        switch = (bg.count >= switch_freq) & (next_window + draw <= state.final_window)
        fg = jax.tree.map(lambda a, b: jnp.where(switch, a, b), bg, fg)
        bg = jax.tree.map(lambda a, b: jnp.where(switch, a, b),
                          _running_empty(x.shape[0], x.dtype), bg)
        window = jnp.where(switch & ~early, next_window, window)
        change = (switch | (draw - state.last_update >= 1)) & (fg.count >= _MIN_DRAWS)
        imm = jnp.where(change, fisher_diag_estimate(fg, state.inverse_mass_matrix),
                        state.inverse_mass_matrix)
        return state._replace(
            inverse_mass_matrix=imm, foreground=fg, background=bg, window=window,
            last_update=jnp.where(change, draw, state.last_update),
            switches=state.switches + switch.astype(jnp.int32),
            updates=state.updates + change.astype(jnp.int32)), change

    def update(state, stage, position, grad, acceptance_rate):
        del stage
        dtype = state.step_size.dtype
        x = jax.flatten_util.ravel_pytree(position)[0].astype(dtype)
        g = jax.flatten_util.ravel_pytree(grad)[0].astype(dtype)
        adapting = state.draw < state.final_window
        new, change = jax.lax.cond(adapting, adapt_mass_matrix,
                                   lambda s, x, g: (s, jnp.asarray(False)), state, x, g)
        da = _da_advance(state.dual_average, jnp.asarray(acceptance_rate, dtype),
                         target_accept_prob)
        restart = change & new.fresh & (new.num_warmup - new.draw > _MIN_RESTART_DRAWS)
        step = jnp.exp(da.log_step)
        # the first estimate: dual averaging restarts from the step size in force
        da = jax.tree.map(lambda a, b: jnp.where(restart, a, b), _da_new(step), da)
        last = new.draw == new.num_warmup - 1
        step = jnp.where(last & ~adapting, jnp.exp(da.log_step_adapted), jnp.exp(da.log_step))
        return new._replace(dual_average=da, step_size=step.astype(dtype),
                            fresh=new.fresh & ~change, last_position=x, draw=new.draw + 1)

    def final(state):
        step = jnp.exp(state.dual_average.log_step_adapted).astype(state.step_size.dtype)
        return step, state.inverse_mass_matrix

    return init, update, final, seed


def fisher_diag_schedule(num_warmup: int) -> np.ndarray:
    """The schedule `fisher_diag_engine` follows when every draw is kept, `int32[num_warmup, 2]`:
    rows `(the inverse mass matrix changes after this draw?, the estimators switch?)`."""
    early_end, final_window = _bounds(num_warmup)
    out = np.zeros((num_warmup, 2), np.int32)
    fg = bg = 1  # the initial point
    window, last_update = SWITCH_FREQ, 0
    for draw in range(min(final_window, num_warmup)):
        early = draw < early_end
        if draw == early_end:
            window = max(window, bg)
        fg, bg = fg + 1, bg + 1
        next_window = EARLY_SWITCH_FREQ if early else max(window + 1,
                                                          int(np.floor(window * 1.5 + 0.5)))
        switch = bg >= (EARLY_SWITCH_FREQ if early else window) and \
            next_window + draw <= final_window
        if switch:
            fg, bg = bg, 0
            window = window if early else next_window
        change = (switch or draw - last_update >= 1) and fg >= _MIN_DRAWS
        if change:
            last_update = draw
        out[draw] = (change, switch)
    return out
