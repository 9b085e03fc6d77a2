"""Sampling efficiency over several seeds: effppl's NUTS against NumPyro's on one benchmark model.

A single run's smallest bulk ESS over thousands of components is a noisy figure; this runs the
first `MCMC.run` (warmup and sampling, the mode's settings) for each seed in both frameworks and
records, per run: wall time (seconds, compilation included), the smallest bulk ESS and the bulk
ESS of each scalar site (`arviz.ess(method="bulk")`), the smallest and median bulk ESS of each
vector site, the mean number of leapfrog steps per draw, divergences and the adapted step sizes.

Usage: `python -m benchmarks.nuts_seeds --model stochastic_volatility --size paper --seeds 2,3,4
[--json PATH]`; the JSON is rewritten after every run.
"""

import argparse
import json
import time

import jax
import numpy as np

from ._config import MODEL_NAMES, MODES
from ._nuts import _effppl_mcmc, _numpyro_mcmc
from ._targets import load_model


def one_run(framework, module, args, kwargs, mode, seed):
    """The figures of one NUTS run (see the module docstring), a JSON-able dict."""
    import arviz as az

    make, run, diverging = {"effppl": _effppl_mcmc, "numpyro": _numpyro_mcmc}[framework](module, mode)
    mcmc = make(True)
    start = time.perf_counter()
    if framework == "numpyro":
        mcmc.run(jax.random.PRNGKey(seed), *args, extra_fields=("diverging", "num_steps"), **kwargs)
        step_size = mcmc.last_state.adapt_state.step_size
    else:
        run(mcmc, jax.random.PRNGKey(seed), args, kwargs)
        step_size = mcmc.last_state.step_size
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    wall = time.perf_counter() - start
    latent = module.latent_shapes(*args, **kwargs)
    samples = {k: np.asarray(samples[k], np.float64) for k in latent}
    ess = az.ess(az.from_dict(posterior=samples), method="bulk")
    fields = mcmc.get_extra_fields(group_by_chain=True)
    steps = fields["num_steps" if framework == "numpyro" else "n_steps"]
    sites = {}
    for k in latent:
        values = np.asarray(ess[k].values)
        sites[k] = float(values) if values.ndim == 0 else {
            "min": float(values.min()), "median": float(np.median(values))}
    return {
        "wall_s": wall,
        "min_bulk_ess": float(min(np.nanmin(ess[k].values) for k in latent)),
        "bulk_ess": sites,
        "mean_leapfrog_steps": float(np.mean(np.asarray(steps))),
        "divergences": int(np.sum(np.asarray(diverging(mcmc)))),
        "step_size": np.asarray(step_size).tolist(),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nuts_seeds",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODEL_NAMES, default="stochastic_volatility")
    parser.add_argument("--size", choices=sorted(MODES), default="quick")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    module, mode = load_model(args.model), MODES[args.size]
    data, kwargs = module.make_data(args.size)
    out = {"model": args.model, "size": args.size, "num_warmup": mode.num_warmup,
           "num_samples": mode.num_samples, "num_chains": mode.num_chains,
           "max_tree_depth": mode.max_tree_depth, "runs": {}}
    for seed in [int(s) for s in args.seeds.split(",")]:
        for framework in ("effppl", "numpyro"):
            row = one_run(framework, module, data, kwargs, mode, seed)
            out["runs"][f"{seed}/{framework}"] = row
            print(f"seed {seed} {framework:8s} wall {row['wall_s']:7.1f} s  min bulk ESS "
                  f"{row['min_bulk_ess']:7.1f}  leapfrog/draw {row['mean_leapfrog_steps']:6.1f}  "
                  f"divergences {row['divergences']}", flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
