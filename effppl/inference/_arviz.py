"""Conversion of `MCMC` results to `arviz.InferenceData`."""

import jax
import numpy as np

__all__ = ["to_inference_data"]


def to_inference_data(results: dict):
    """Build `arviz.InferenceData` from the results stored by `MCMC.run`.

    Groups: `posterior` (constrained latent and deterministic sites, `[chain, draw, ...]`),
    `sample_stats` (`diverging`, `acceptance_rate`, `energy`, `n_steps`, `tree_depth` for NUTS,
    `lp`, `step_size`), `log_likelihood` (pointwise `log p(y_i | theta)` per observed site) and
    `observed_data`. A site's axes that an enclosing `plate` spans are named after the plate (in
    every group; the other axes get arviz's default `<site>_dim_<i>`), as arviz's `from_numpyro`
    does.
    """
    import arviz as az

    samples, stats = results["samples"], results["stats"]
    fns, dynamic, info = results["fns"], results["dynamic"], results["info"]
    num_chains, num_draws = next(iter(samples.values())).shape[:2]
    latent = {n: samples[n] for n in info.latent}
    flat = jax.tree.map(lambda x: x.reshape((num_chains * num_draws,) + x.shape[2:]), latent)
    loglik = fns.log_likelihood(flat, dynamic)
    loglik = {
        n: np.asarray(v).reshape((num_chains, num_draws) + v.shape[1:]) for n, v in loglik.items()
    }
    observed = {n: np.asarray(v) for n, v in fns.observed_values(dynamic).items()}
    return az.from_dict(
        posterior={n: np.asarray(v) for n, v in samples.items()},
        sample_stats={n: np.asarray(v) for n, v in stats.items()},
        log_likelihood=loglik or None,
        observed_data=observed or None,
        dims={name: list(names) for name, names in info.dims},
    )
