"""The warmup's adaptation schemes, by the name `NUTS(..., mass_matrix=...)` gives them.

- `"diag"`, `"dense"`: Stan's window adaptation (Stan Reference Manual, "HMC algorithm
  parameters": a 75-draw initial buffer, doubling windows from 25 draws, a 50-draw final buffer;
  Welford estimates of the draws' variances or covariance, shrunk towards 1e-3 with weight
  5 / (n + 5); dual averaging of the step size restarted at each window's end), one step at a
  time (`_window`).
- `"fisher_diag"`: nutpie's Fisher-divergence adaptation of a diagonal, re-estimated after every
  draw on nuts-rs's schedule (`_fisher_diag`).
- `"low_rank"`: nutpie's low-rank Fisher-divergence adaptation, re-estimated at window ends
  (`_fisher`).

Each scheme is `(init, update, final, seed, schedule)`: `init(position, step_size, num_warmup)`,
`update(state, (stage, window end), position, grad, acceptance_rate)`,
`final(state) -> (step_size, inverse_mass_matrix)`, `seed(state, grad)` (the state at the
initial point, given its log-density gradient), `schedule(num_warmup) -> int32[n, 2]`;
Stan's schemes also `restart(state, step_size)` (the step size's adaptation started anew).
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from blackjax.adaptation.window_adaptation import build_schedule
from blackjax.mcmc.metrics import LowRankInverseMassMatrix

from . import _fisher, _fisher_diag
from ._window import window_adaptation

__all__ = ["MASS_MATRICES", "Scheme", "scheme_for", "warmup_schedule", "identity_like",
           "imm_problems"]

MASS_MATRICES = ("diag", "dense", "fisher_diag", "low_rank")


class Scheme(NamedTuple):
    init: Callable
    update: Callable
    final: Callable
    seed: Callable
    schedule: Callable
    restart: Callable | None = None  # (Stan's: the step size's adaptation from a new one)


@functools.lru_cache(maxsize=64)
def _table(build: Callable, num_warmup: int) -> np.ndarray:
    """`build(num_warmup)`'s schedule as a read-only `int32[max(num_warmup, 1), 2]` (one row of
    zeros for no warmup), computed once per `(build, num_warmup)`."""
    if num_warmup == 0:
        sched = np.zeros((1, 2), np.int32)
    else:
        with jax.ensure_compile_time_eval():
            sched = np.asarray(build(num_warmup), dtype=np.int32).reshape(num_warmup, 2)
    sched.setflags(write=False)
    return sched


def warmup_schedule(num_warmup: int) -> np.ndarray:
    """Stan's warmup schedule, `int32[max(num_warmup, 1), 2]`, rows `(slow?, ends a window?)`."""
    return _table(build_schedule, num_warmup)


def _stan(dense, target_accept_prob: float, adapt_mass_matrix: bool, structure,
          regularize: bool = True) -> Scheme:
    init, update, final, restart = window_adaptation(dense, target_accept_prob,
                                                     adapt_mass_matrix, structure,
                                                     regularize=regularize)
    return Scheme(lambda position, step_size, num_warmup: init(position, step_size),
                  update, final, lambda state, grad: state, warmup_schedule, restart)


def _nutpie(low_rank: bool, target_accept_prob: float) -> Scheme:
    if not low_rank:
        init, update, final, seed = _fisher_diag.fisher_diag_engine(target_accept_prob)
        return Scheme(init, update, final, seed,
                      functools.partial(_table, _fisher_diag.fisher_diag_schedule))
    init, update, final, seed = _fisher.fisher_engine(target_accept_prob)
    return Scheme(init, update, final, seed, functools.partial(_table, _fisher.fisher_schedule))


def scheme_for(mass_matrix: str, target_accept_prob: float, *, dense_mass=None,
               adapt_mass_matrix: bool = True, structure=None, regularize: bool = True) -> Scheme:
    """The adaptation scheme named `mass_matrix` (one of `MASS_MATRICES`). For Stan's schemes:
    `dense_mass` (True, or NumPyro's site groups of a block-structured matrix), whether to adapt
    the matrix at all, `structure(position) -> (block mask, initial matrix)` (`_mass`), and
    whether to regularise each window's covariance as Stan does (NumPyro's
    `regularize_mass_matrix`; False: the sample covariance itself)."""
    if mass_matrix in ("diag", "dense"):
        dense = (dense_mass or True) if mass_matrix == "dense" else False
        return _stan(dense, target_accept_prob, adapt_mass_matrix, structure, regularize)
    return _nutpie(mass_matrix == "low_rank", target_accept_prob)


def identity_like(imm):
    """The identity in `imm`'s representation (for `adapt_mass_matrix=False`)."""
    if isinstance(imm, LowRankInverseMassMatrix):
        return LowRankInverseMassMatrix(jnp.ones_like(imm.sigma), jnp.zeros_like(imm.U),
                                        jnp.ones_like(imm.lam))
    return jnp.eye(imm.shape[0], dtype=imm.dtype) if imm.ndim == 2 else jnp.ones_like(imm)


def imm_problems(imm, chain: int) -> list[str]:
    """What is wrong with chain `chain`'s inverse mass matrix (leading chain axis): non-finite
    or non-positive entries, in words; empty when it is a valid one."""
    if isinstance(imm, LowRankInverseMassMatrix):
        parts = {"scale": np.asarray(imm.sigma)[chain], "eigenvalues": np.asarray(imm.lam)[chain]}
        factors = np.asarray(imm.U)[chain]
        out = [] if np.all(np.isfinite(factors)) else ["non-finite low-rank factors"]
    else:
        m = np.asarray(imm)[chain]
        parts = {"diagonal": np.diagonal(m) if m.ndim == 2 else m}
        out = [] if np.all(np.isfinite(m)) else ["non-finite entries"]
    for name, v in parts.items():
        if not np.all(np.isfinite(v)):
            out.append(f"non-finite {name}")
        elif np.any(v <= 0):
            out.append(f"{name} not positive (min {float(np.min(v)):.3g})")
    return sorted(set(out))
