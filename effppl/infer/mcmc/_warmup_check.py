"""What went wrong with a chain's warmup, in words: the checks after `MCMC`'s warmup.

A chain's warmup is degenerate when its adapted inverse mass matrix is not finite and positive,
its step size is not finite and positive or too small to move any coordinate in floating point
(a "collapsed" step size: each leapfrog step changes the position by less than a few units in
its last place), or it ended the warmup stuck (its position unchanged over its last
transitions). `MCMC` redraws the initial point of such a chain and warms it up again; a chain
still degenerate after that is named in a `StuckChainWarning`.
"""

import warnings

import jax
import numpy as np
from blackjax.mcmc.metrics import LowRankInverseMassMatrix
from jax.flatten_util import ravel_pytree

from .._sharding import readable
from ._adaptation import imm_problems
from ._results import DivergenceWarning

__all__ = ["StuckChainWarning", "MaxTreeDepthWarning", "warmup_problems", "stuck_threshold",
           "degenerate_chains", "warn_degenerate", "warn_tree_depth", "warn_divergences"]


class StuckChainWarning(UserWarning):
    """A chain's warmup ended degenerate (collapsed step size, invalid mass matrix, or stuck)."""


class MaxTreeDepthWarning(UserWarning):
    """Many post-warmup NUTS transitions stopped at the maximum tree depth."""


def stuck_threshold(num_warmup: int) -> int:
    """Consecutive unmoved warmup transitions, up to the last, that make a chain stuck: a
    tenth of the warmup, at least 25 (a NUTS chain at a sound step size moves at nearly every
    transition: it picks among the trajectory's points, not between two)."""
    return max(25, num_warmup // 10)


def _movement(step_size: float, imm, chain: int) -> np.ndarray:
    """Per-coordinate scale of one leapfrog step's move at unit momentum."""
    if isinstance(imm, LowRankInverseMassMatrix):
        scale = np.asarray(imm.sigma, np.float64)[chain]
        scale = scale * np.sqrt(max(1.0, float(np.max(np.asarray(imm.lam)[chain]))))
    else:
        m = np.asarray(imm, np.float64)[chain]
        scale = np.sqrt(np.abs(np.diagonal(m) if m.ndim == 2 else m))
    return step_size * scale


def warmup_problems(chain_state, num_warmup: int, flat_positions: np.ndarray) -> dict:
    """`{chain index: [problem, ...]}` of the chains whose warmup is degenerate.

    **Arguments:** `chain_state`: the `ChainState` after warmup (leading chain axis);
    `num_warmup`: the warmup's length; `flat_positions`: `float[chain, d]`, the final positions.
    """
    step = np.asarray(chain_state.step_size, np.float64)
    imm = chain_state.inverse_mass_matrix
    stuck_for = np.asarray(chain_state.stuck_for)
    eps = np.finfo(flat_positions.dtype).eps
    out = {}
    if flat_positions.shape[-1] == 0:  # no coordinate (a one-category Dirichlet): none to move
        return out
    for c in range(step.shape[0]):
        problems = [f"inverse mass matrix has {p}" for p in imm_problems(imm, c)]
        if not np.isfinite(step[c]) or step[c] <= 0:
            problems.append(f"step size is {step[c]:.3g}")
        elif not problems:
            move = _movement(float(step[c]), imm, c)
            room = 16 * eps * np.maximum(np.abs(flat_positions[c]), np.finfo(np.float64).tiny)
            if np.all(move < room):
                problems.append(
                    f"step size collapsed to {step[c]:.3g}: a leapfrog step moves no coordinate "
                    f"by more than a few units in its last place")
        if num_warmup >= stuck_threshold(num_warmup) and stuck_for[c] >= stuck_threshold(num_warmup):
            problems.append(f"its position did not change in its last {int(stuck_for[c])} "
                            f"warmup transitions (step size {step[c]:.3g})")
        if problems:
            out[c] = problems
    return out


def degenerate_chains(chain_state, num_warmup: int) -> dict:
    """`warmup_problems` of a `ChainState` after a warmup of `num_warmup` transitions (empty
    when every chain is sound, or there was no warmup)."""
    if num_warmup == 0:
        return {}
    flat = jax.vmap(lambda p: ravel_pytree(p)[0])(chain_state.state.position)
    # (read to the host, also from chains split over processes)
    step, imm, stuck, flat = readable((chain_state.step_size, chain_state.inverse_mass_matrix,
                                       chain_state.stuck_for, flat))
    checked = chain_state._replace(step_size=step, inverse_mass_matrix=imm, stuck_for=stuck)
    return warmup_problems(checked, num_warmup, np.asarray(flat))


def warn_degenerate(model: str, num_chains: int, bad: dict, retries: int) -> None:
    """A `StuckChainWarning` naming each chain of `bad` (`{chain: [problem, ...]}`), after
    `retries` restarts (0: the user gave the initial points, none was redrawn)."""
    lines = "; ".join(f"chain {c}: {', '.join(p)}" for c, p in sorted(bad.items()))
    after = (f"also after {retries} restarts from new initial points" if retries else
             "from the initial points given (init_params), which are not redrawn")
    warnings.warn(
        f"effppl.infer.MCMC: the warmup of {len(bad)} of {num_chains} chains of model "
        f"`{model}` degenerated, {after} ({lines}). Their draws do not describe the posterior. "
        "Check the model's log density for regions where it is finite but numerically useless "
        "(overflowing recursions, failed ODE solves), give init_strategy=init_to_value(...) a "
        "sound point, or reparameterise.", StuckChainWarning, stacklevel=5)


def warn_tree_depth(model: str, stats: dict, max_tree_depth: int | None) -> None:
    """A `MaxTreeDepthWarning` when more than a tenth of the draws `stats["tree_depth"]`
    (`[chain, draw]`) stopped at `max_tree_depth` (None: not NUTS, no warning)."""
    if max_tree_depth is None or "tree_depth" not in stats:
        return
    hits = np.asarray(stats["tree_depth"]) >= max_tree_depth
    if hits.mean() > 0.1:
        chains = [int(c) for c in np.flatnonzero(hits.mean(axis=1) > 0.1)]
        warnings.warn(
            f"effppl.infer.MCMC.run: {int(hits.sum())} of {hits.size} post-warmup transitions of "
            f"model `{model}` stopped at the maximum tree depth ({max_tree_depth}; chains "
            f"{chains}): their trajectories were cut short, so the chains explore slowly and may "
            "not have converged. Check the adapted step sizes (`mcmc.last_state.step_size`), "
            "reparameterise, or raise max_tree_depth.", MaxTreeDepthWarning, stacklevel=4)


def warn_divergences(model: str, stats: dict, num_draws: int) -> None:
    """A `DivergenceWarning` when any of the `num_draws` post-warmup draws `stats["diverging"]`
    (`[chain, draw]`, all chains) diverged."""
    n_div = int(np.sum(np.asarray(stats["diverging"])))
    if n_div:
        warnings.warn(
            f"effppl.infer.MCMC.run: {n_div} of {num_draws} post-warmup draws of model "
            f"`{model}` were divergent (or had a non-finite log density). The draws may be "
            "biased; increase target_accept_prob or reparameterise.",
            DivergenceWarning, stacklevel=5,
        )
