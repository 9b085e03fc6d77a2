"""End-to-end NUTS: effppl against NumPyro with the same warmup, samples and chains.

Per framework: wall time of the first `run` (tracing, elimination and XLA compilation included) and
of a repeated `run` with a new key and the same shapes (steady state), bulk ESS per second of the
repeated run (the smallest bulk ESS over all scalar latent components, `arviz.ess`), and the number
of divergent transitions. Then the posterior means of the two frameworks are compared in units of
their Monte Carlo standard errors.
"""

import contextlib
import time

import jax
import numpy as np
from jax import monitoring

from ._config import POSTERIOR_Z
from ._targets import Skipped


def _numpyro_mcmc(module, mode):
    from numpyro.infer import MCMC, NUTS

    def make(jit_model_args):
        kernel = NUTS(module.numpyro_model, max_tree_depth=mode.max_tree_depth)
        return MCMC(kernel, num_warmup=mode.num_warmup,
                    num_samples=mode.num_samples, num_chains=mode.num_chains,
                    chain_method="vectorized", progress_bar=False, jit_model_args=jit_model_args)

    def run(mcmc, rng_key, args, kwargs):
        mcmc.run(rng_key, *args, extra_fields=("diverging",), **kwargs)

    def diverging(mcmc):
        return mcmc.get_extra_fields(group_by_chain=True)["diverging"]

    return make, run, diverging


def _effppl_mcmc(module, mode):
    try:
        from effppl import infer
        mcmc_cls, nuts_cls = infer.MCMC, infer.NUTS
    except (ImportError, AttributeError) as err:
        return Skipped(f"effppl.infer.MCMC / NUTS are not available yet "
                       f"({type(err).__name__}: {err})")
    if not hasattr(module, "effppl_model"):
        return Skipped(f"{module.__name__} has no effppl_model")

    def make(jit_model_args):
        del jit_model_args  # effppl always passes data as arguments of its cached function
        kernel = nuts_cls(module.effppl_model, max_tree_depth=mode.max_tree_depth)
        return mcmc_cls(kernel, num_warmup=mode.num_warmup,
                        num_samples=mode.num_samples, num_chains=mode.num_chains,
                        progress_bar=False)

    def run(mcmc, rng_key, args, kwargs):
        mcmc.run(rng_key, *args, **kwargs)

    def diverging(mcmc):
        if hasattr(mcmc, "get_extra_fields"):
            fields = mcmc.get_extra_fields(group_by_chain=True)
            if "diverging" in fields:
                return fields["diverging"]
        return mcmc.to_arviz().sample_stats["diverging"].values

    return make, run, diverging


def run_nuts(framework, module, args, kwargs, mode, seed):
    """Runs NUTS twice for `framework` on one model.

    **Arguments:**
    - `framework`: `"effppl"` or `"numpyro"`.
    - `module`: the model module; `args`, `kwargs`: its data from `make_data`.
    - `mode`: a `benchmarks._config.Mode` (`num_warmup`, `num_samples`, `num_chains`).
    - `seed`: the first run uses `PRNGKey(seed)`, the repeated one `PRNGKey(seed + 1)`.

    **Returns:** `Skipped`, or `(figures, samples)`: `figures` a JSON-able dict with
    `first_wall_s`, `repeat_wall_s` (seconds), `min_bulk_ess`, `ess_per_s` (effective draws per
    second of the repeated run's wall time), `first_compile_s`, `repeat_compile_s` (seconds JAX
    spent tracing, lowering and compiling during each run: a repeated run that re-compiles shows
    it here), `repeat_sampling_s` and `ess_per_s_sampling` (the same without that compile time),
    `divergences` (count); `samples` dict site -> (chain, draw, ...).
    """
    builder = {"numpyro": _numpyro_mcmc, "effppl": _effppl_mcmc}[framework]
    built = builder(module, mode)
    if isinstance(built, Skipped):
        return built
    make, run, diverging = built
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    jit_model_args = all(isinstance(x, (np.ndarray, jax.Array)) for x in leaves)
    mcmc = make(jit_model_args)
    walls, compiles = [], []
    for offset in (0, 1):
        with _compile_seconds() as compiled:
            start = time.perf_counter()
            run(mcmc, jax.random.PRNGKey(seed + offset), args, kwargs)
            samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
            walls.append(time.perf_counter() - start)
        compiles.append(sum(compiled))
    latent = set(module.latent_shapes(*args, **kwargs))
    samples = {k: np.asarray(v, np.float64) for k, v in samples.items() if k in latent}
    ess = _min_bulk_ess(samples)
    figures = {
        "first_wall_s": walls[0],
        "repeat_wall_s": walls[1],
        "min_bulk_ess": ess,
        "ess_per_s": ess / walls[1],
        "first_compile_s": compiles[0],
        "repeat_compile_s": compiles[1],
        "repeat_sampling_s": max(walls[1] - compiles[1], 1e-9),
        "ess_per_s_sampling": ess / max(walls[1] - compiles[1], 1e-9),
        "divergences": int(np.sum(np.asarray(diverging(mcmc)))),
        "num_warmup": mode.num_warmup,
        "num_samples": mode.num_samples,
        "num_chains": mode.num_chains,
        "max_tree_depth": mode.max_tree_depth,
        "jit_model_args": jit_model_args,
    }
    return figures, samples


_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")


@contextlib.contextmanager
def _compile_seconds():
    """Collects the seconds JAX spends tracing, lowering and compiling while the block runs."""
    seconds = []

    def listener(event, duration, **kwargs):
        if event in _COMPILE_EVENTS:
            seconds.append(duration)

    monitoring.register_event_duration_secs_listener(listener)
    try:
        yield seconds
    finally:
        monitoring.unregister_event_duration_listener(listener)


def _min_bulk_ess(samples):
    import arviz as az

    ess = az.ess(az.from_dict(posterior=samples), method="bulk")
    return float(min(np.nanmin(ess[k].values) for k in ess.data_vars))


MIN_ESS = 20
"""Below this bulk ESS the Monte Carlo standard errors are themselves unreliable."""


def compare_posteriors(samples_a, samples_b, z=POSTERIOR_Z, min_ess=None):
    """Posterior means of two runs, compared in Monte Carlo standard errors.

    **Arguments:** `samples_a`, `samples_b`: dicts site -> (chain, draw, ...); `z`: threshold in
    combined MCSEs; `min_ess`: the smaller of the two runs' minimum bulk ESS, if known.

    **Returns:** dict with `ok` (every scalar component within `z` combined MCSEs, or at least 99%
    of them when there are 100 or more; `None`, inconclusive, when `min_ess < MIN_ESS`), `max_z`,
    `frac_within`, `num_components`, `min_ess`.
    """
    import arviz as az

    sites = sorted(set(samples_a) & set(samples_b))
    if not sites:
        return {"ok": False, "reason": "no latent site in common", "max_z": None,
                "frac_within": None, "num_components": 0}
    zs = []
    for samples in (samples_a, samples_b):
        mcse = az.mcse(az.from_dict(posterior={k: samples[k] for k in sites}), method="mean")
        zs.append({k: (samples[k].mean(axis=(0, 1)), mcse[k].values) for k in sites})
    scores = []
    for k in sites:
        (mean_a, se_a), (mean_b, se_b) = zs[0][k], zs[1][k]
        scale = np.sqrt(se_a**2 + se_b**2)
        scores.append(np.ravel(np.abs(mean_a - mean_b) / np.maximum(scale, 1e-300)))
    scores = np.concatenate(scores)
    within = float(np.mean(scores < z))
    needed = 1.0 if scores.size < 100 else 0.99
    conclusive = min_ess is None or min_ess >= MIN_ESS
    return {
        "ok": bool(within >= needed) if conclusive else None,
        "min_ess": min_ess,
        "max_z": float(np.max(scores)),
        "frac_within": within,
        "num_components": int(scores.size),
        "z": z,
    }
