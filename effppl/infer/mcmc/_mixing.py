"""Chains that explore different regions: the check after `MCMC.run`'s draws.

A chain can end its warmup sound (a positive mass matrix, a step size that moves it) yet in a
region of much lower log density than the other chains reach: a minor mode, or a ridge it is
still climbing (an ODE model whose solution oscillates at the wrong period, for instance). Its
draws then look like a converged chain's. Across chains it shows: the rank-normalised split
R-hat (arviz) of the log density is far above 1, and the chain's log density lies many
within-chain standard deviations below the best chain's. Such chains are named in a
`ChainMixingWarning`. A single chain cannot be checked this way: run several.
"""

import warnings

import arviz as az
import numpy as np

__all__ = ["ChainMixingWarning", "RHAT_LIMIT", "GAP_SDS", "lagging_chains", "warn_mixing"]

RHAT_LIMIT = 1.1  # split R-hat of the log density above which the chains disagree
GAP_SDS = 6.0  # how many within-chain sds below the best chain's mean a lagging chain lies


class ChainMixingWarning(UserWarning):
    """Some chains' draws lie in a region of much lower log density than other chains'."""


def lagging_chains(lp: np.ndarray) -> tuple[float, dict]:
    """`(split R-hat of the log density, {chain: its mean log density})` of the chains whose
    draws lie in a region of much lower log density than the best chain's (empty when the
    chains agree).

    **Arguments:** `lp`: `float[chain, draw]`, the draws' log densities.
    """
    lp = np.asarray(lp, np.float64)
    if lp.ndim != 2 or lp.shape[0] < 2 or lp.shape[1] < 4 or not np.all(np.isfinite(lp)):
        return float("nan"), {}
    rhat = float(az.rhat(lp))
    if not rhat > RHAT_LIMIT:
        return rhat, {}
    means = lp.mean(axis=1)
    sd = float(np.median(lp.std(axis=1)))
    gap = GAP_SDS * max(sd, 1e-3 * max(1.0, float(np.max(np.abs(means)))))
    return rhat, {c: float(m) for c, m in enumerate(means) if means.max() - m > gap}


def warn_mixing(model: str, stats: dict) -> None:
    """A `ChainMixingWarning` naming the chains of `stats["lp"]` (`[chain, draw]`) that
    `lagging_chains` finds (none: no warning)."""
    if "lp" not in stats:
        return
    lp = np.asarray(stats["lp"])
    rhat, lagging = lagging_chains(lp)
    if not lagging:
        return
    best = int(np.argmax(lp.mean(axis=1)))
    names = "; ".join(f"chain {c}: mean log density {m:.4g}" for c, m in sorted(lagging.items()))
    warnings.warn(
        f"effppl.infer.MCMC.run: the chains of model `{model}` disagree (split R-hat of the log "
        f"density {rhat:.3g}): {names}, far below chain {best}'s {lp[best].mean():.4g}. These "
        "chains explore a region of much lower density (a minor mode, or they have not "
        "converged), so the pooled draws do not describe the posterior. Run longer warmups, "
        "give init_strategy a better point, or drop these chains after checking them.",
        ChainMixingWarning, stacklevel=4)
