"""Conversion of `MCMC` results to `arviz.InferenceData`, with axes named after plates."""

import re

import jax
import jax.numpy as jnp
import numpy as np

from ._sharding import readable

__all__ = ["plate_dims", "to_inference_data"]


def to_inference_data(results, hidden: tuple = ()):
    """Build `arviz.InferenceData` from the `MCMCResults` stored by `MCMC.run`.

    Groups: `posterior` (constrained latent and deterministic sites, `[chain, draw, ...]`),
    `sample_stats` (`diverging`, `acceptance_rate`, `energy`, `n_steps`, `tree_depth` for NUTS,
    `lp`, `step_size`), `log_likelihood` (pointwise `log p(y_i | theta)` per observed site; left
    out for a model with enumerated sites, whose pointwise likelihood is not defined here) and
    `observed_data`; the `hidden` sites (a kernel's carriers) are left out of `posterior`.
    A site's axes that an enclosing `plate` spans are named after the plate (in
    every group; the other axes get arviz's default `<site>_dim_<i>`), as arviz's `from_numpyro`
    does.
    """
    import arviz as az

    samples, stats = results.samples, results.stats
    fns, dynamic, info = results.fns, results.dynamic, results.info
    num_chains, num_draws = next(iter(samples.values())).shape[:2]
    latent = {n: samples[n] for n in info.latent}
    flat = jax.tree.map(lambda x: x.reshape((num_chains * num_draws,) + x.shape[2:]), latent)
    loglik = fns.log_likelihood(flat, dynamic) if not info.enumerated else {}
    # Data sharded over several processes give process-spanning results: gathered once.
    loglik, observed = readable((loglik, fns.observed_values(dynamic)))
    loglik = {
        n: np.asarray(v).reshape((num_chains, num_draws) + v.shape[1:]) for n, v in loglik.items()
    }
    observed = {n: np.asarray(v) for n, v in observed.items()}
    posterior = {n: np.asarray(v) for n, v in samples.items() if n not in hidden}
    shapes = {n: v.shape[2:] for n, v in posterior.items()}
    shapes.update({n: v.shape for n, v in observed.items()})
    return az.from_dict(
        posterior=posterior,
        sample_stats={n: np.asarray(v) for n, v in stats.items()},
        log_likelihood=loglik or None,
        observed_data=observed or None,
        dims=_usable_dims([(s, d) for s, d in info.dims if s in shapes], shapes,
                          {*posterior, *stats, *loglik, *observed}),
    )


def _usable_dims(dims, shapes, variables):
    """arviz's `dims`: each site's plate-named axes (`SiteInfo.dims`), less the plate names arviz
    cannot use as dimensions, which would make xarray drop, merge or NaN-pad variables: the name of
    a variable (a site called like a plate), `chain`/`draw`, a default name `<variable>_dim_<i>`,
    or a name two plates of different sizes share. Those axes keep arviz's default names."""
    sizes = {}
    for site, names in dims:
        for axis, name in enumerate(names):
            if name is not None:
                sizes.setdefault(name, set()).add(shapes[site][axis])

    def usable(name):
        default = re.fullmatch(r"(.+)_dim_\d+", name)
        return (len(sizes[name]) == 1 and name not in variables | {"chain", "draw"}
                and not (default and default.group(1) in variables))

    return {site: [n if n is not None and usable(n) else None for n in names]
            for site, names in dims}


def plate_dims(site, loop_ndim: int = 0) -> tuple | None:
    """The names of the leading axes of `site`'s value: the enclosing plate's name where one sits
    (as arviz's `from_numpyro` names them), `None` elsewhere (the `loop_ndim` loop-stacking axes,
    `sample_shape`, axes of no plate); `None` for a site inside no plate.

    A sample site's plate dims count from the end of its distribution's batch shape; a
    deterministic value has none, so its plate axes are taken to lead, after the loop axes (as
    arviz does). An axis whose length is not its plate's size keeps `None`."""
    if not site.plates:
        return None
    shape = jnp.shape(site.value)
    if site.kind == "sample" and site.fn is not None:
        batch_end = len(shape) - len(site.fn.event_shape)
    else:
        batch_end = loop_ndim + max(-frame.dim for frame in site.plates)
    dims = [None] * min(batch_end, len(shape))
    for frame in site.plates:
        axis = batch_end + frame.dim
        if loop_ndim <= axis < len(dims) and shape[axis] == frame.size:
            dims[axis] = frame.name
    return tuple(dims)
