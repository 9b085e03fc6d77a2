"""Chains that explore different regions: the check after `MCMC.run`'s draws.

A chain can end its warmup sound (a positive mass matrix, a step size that moves it) yet in a
region of much lower log density than the other chains reach: a minor mode, or a ridge it is
still climbing (an ODE model whose solution oscillates at the wrong period, for instance). Its
draws then look like a converged chain's. Across chains it shows: the rank-normalised split
R-hat (arviz) of the log density is far above 1, and the chain's log density lies many
within-chain standard deviations below the best chain's. Such chains are named in a
`ChainMixingWarning`. A chain that still drifts (a single chain too, split in halves) shows in
the split R-hat of its sites' values: on models of at most `MAX_CHECKED` scalars, with at least
`MIN_DRAWS` draws, sites whose split R-hat exceeds `RHAT_LIMIT` are named too (arviz's
rank-normalised split R-hat; Vehtari et al. 2021, "Rank-normalization, folding, and
localization", Bayesian Analysis 16(2)). Larger models get the log-density check only (arviz's
R-hat costs about 10 ms per scalar).
"""

import warnings

import arviz as az
import numpy as np

__all__ = ["ChainMixingWarning", "RHAT_LIMIT", "GAP_SDS", "MAX_CHECKED", "MIN_DRAWS",
           "lagging_chains", "unmixed_sites", "warn_mixing"]

RHAT_LIMIT = 1.1  # split R-hat of the log density above which the chains disagree
GAP_SDS = 6.0  # how many within-chain sds below the best chain's mean a lagging chain lies
MAX_CHECKED = 64  # models with at most this many scalars get their sites checked too
MIN_DRAWS = 100  # draws per chain below which sites are not checked (R-hat too noisy)


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


def _split_rhat(x: np.ndarray) -> float:
    """arviz's rank-normalised split R-hat of `x[chain, draw]`; one chain is split in halves
    first (arviz needs two)."""
    if x.shape[0] == 1:
        half = x.shape[1] // 2
        x = np.stack([x[0, :half], x[0, half:2 * half]])
    return float(az.rhat(x))


def unmixed_sites(samples: dict, lp: np.ndarray, exact: bool = True) -> dict:
    """`{name: split R-hat}` of the log density ("log density", when `exact`) and, on models of
    at most `MAX_CHECKED` scalars, of each site's scalars (the largest), where it exceeds
    `RHAT_LIMIT`.

    **Arguments:** `samples`: `{site: float[chain, draw, ...]}`; `lp`: `float[chain, draw]`;
    `exact`: False when `lp` is an estimate (`HMCECS`'s, from a subsample that changes slowly):
    it is not checked.
    """
    lp = np.asarray(lp, np.float64)
    if lp.ndim != 2 or lp.shape[1] < MIN_DRAWS:
        return {}
    columns = {"log density": lp[..., None]} if exact else {}
    values = {k: np.asarray(v, np.float64).reshape(lp.shape + (-1,)) for k, v in samples.items()
              if np.issubdtype(np.asarray(v).dtype, np.floating)}
    if sum(v.shape[-1] for v in values.values()) <= MAX_CHECKED:
        columns.update(values)
    out = {}
    for name, v in columns.items():
        rhats = [_split_rhat(v[..., j]) for j in range(v.shape[-1])
                 if np.all(np.isfinite(v[..., j])) and np.ptp(v[..., j]) > 0]
        if rhats and max(rhats) > RHAT_LIMIT:
            out[name] = max(rhats)
    return out


def warn_mixing(model: str, stats: dict, samples: dict, exact: bool = True) -> None:
    """A `ChainMixingWarning` naming the chains of `stats["lp"]` (`[chain, draw]`) that
    `lagging_chains` finds, or else the sites `unmixed_sites` finds (none: no warning);
    `exact=False`: the log density is an estimate, and only the sites are checked."""
    if "lp" not in stats:
        return
    lp = np.asarray(stats["lp"])
    rhat, lagging = lagging_chains(lp) if exact else (float("nan"), {})
    if not lagging:
        unmixed = unmixed_sites(samples, lp, exact)
        if unmixed:
            names = ", ".join(f"{k} {r:.3g}" for k, r in sorted(unmixed.items()))
            what = ("its two halves disagree" if lp.shape[0] == 1 else "the chains disagree")
            warnings.warn(
                f"effppl.infer.MCMC.run: the draws of model `{model}` have not mixed: {what} "
                f"(split R-hat above {RHAT_LIMIT}: {names}). The chains are still drifting or "
                "explore different regions, so the draws do not describe the posterior. Run "
                "longer warmups and more chains, or give init_strategy a better point.",
                ChainMixingWarning, stacklevel=4)
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
