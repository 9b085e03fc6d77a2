"""Effect elimination (effppl) against NumPyro's tracing of its potential, side by side in one
process, on the harness models (issue 15, outcome 2: at most 1.5x).

For each model at quick size: the time from the framework's log-density function to its jaxpr
(`benchmarks._targets`: effppl's `effects.make_jaxpr`, NumPyro's `jax.make_jaxpr`; the "x" of the
paper's Table 2), the two frameworks alternating, `--repeats` times each after two untimed
rounds, this process's CPU seconds (less sensitive than wall time to other jobs on the
machine). Reported: median and best of each, and their ratios effppl / NumPyro. With `--sites`,
the same for `compile_bench`'s Python-loop model at that many sites: its potential energy at
an unconstrained point (both frameworks' `potential_energy`).

Usage: `python -m benchmarks.elimination [--models proportion_test,bnn] [--sites 200,1000]
[--repeats 15] [--json PATH]` (`--json`: write the rows as JSON; `--sites` alone leaves the
models out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from ._config import MODEL_NAMES

WARM_ROUNDS = 2
"""Untimed rounds first: the first traces fill JAX's and effppl's caches."""


def _flat_log_densities(name: str) -> dict:
    """`{framework: (make_jaxpr, flat log density, its arguments)}` of model `name` at quick size,
    at one random unconstrained point."""
    import jax
    import jax.numpy as jnp

    from . import _targets
    from ._measure import _flat, random_points

    module = _targets.load_model(name)
    args, kwargs = module.make_data("quick", 0)
    data = _targets.split_data(args, kwargs)
    point = random_points(module.latent_shapes(*args, **kwargs), 1, 0)[0]
    params = {site: jnp.asarray(value, jnp.result_type(float)) for site, value in point.items()}
    arrays = jax.device_put(data.arrays)
    out = {}
    for framework in ("effppl", "numpyro"):
        target = _targets.make_target(framework, module, data)
        flat_fn, leaves, _ = _flat(target.log_density, (params, arrays))
        out[framework] = (target.make_jaxpr, flat_fn, leaves)
    return out


def _loop_potentials(sites: int) -> dict:
    """`{framework: (make_jaxpr, potential energy, its arguments)}` of `compile_bench`'s
    Python-loop model at `sites` sites, at unconstrained zeros."""
    import jax
    import jax.numpy as jnp
    from numpyro.infer.util import potential_energy as numpyro_potential

    from effppl import effects as fx
    from effppl import handlers

    from . import compile_bench

    groups = compile_bench.groups_for(sites)
    y = jnp.asarray(compile_bench.data(groups))
    names = ["mu", "tau", *(f"{kind}_{g}" for g in range(groups) for kind in ("theta", "s"))]
    params = {name: jnp.zeros((), jnp.result_type(float)) for name in names}
    out = {}
    for framework, potential, make_jaxpr in (("effppl", handlers.potential_energy, fx.make_jaxpr),
                                             ("numpyro", numpyro_potential, jax.make_jaxpr)):
        model = compile_bench.model_for(compile_bench._namespace(framework))

        def fn(p, d, model=model, potential=potential):
            return potential(model, (d,), {}, p)
        out[framework] = (make_jaxpr, fn, (params, y))
    return out


def measure(name: str, repeats: int, sites: int | None = None) -> dict:
    """CPU seconds of each framework's trace of model `name` (or, with `sites`, of the
    Python-loop model at that many sites), alternating: `{"model", "effppl": [s, ...],
    "numpyro": [s, ...], "median_ratio", "best_ratio"}`."""
    from ._measure import _fresh

    fns = _flat_log_densities(name) if sites is None else _loop_potentials(sites)
    times: dict = {framework: [] for framework in fns}
    for round_ in range(WARM_ROUNDS + repeats):
        for framework, (make_jaxpr, flat_fn, leaves) in fns.items():
            fresh = _fresh(flat_fn)  # make_jaxpr caches by function identity
            start = time.process_time()
            make_jaxpr(fresh)(*leaves)
            if round_ >= WARM_ROUNDS:
                times[framework].append(time.process_time() - start)
    return {"model": name, **times,
            "median_ratio": statistics.median(times["effppl"])
            / statistics.median(times["numpyro"]),
            "best_ratio": min(times["effppl"]) / min(times["numpyro"])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.elimination")
    parser.add_argument("--models", default=None, help="names (default: all six)")
    parser.add_argument("--sites", default="", help="site counts of the Python-loop model")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args(argv)
    sites = [int(n) for n in args.sites.split(",") if n]
    models = args.models if args.models is not None else "" if sites else ",".join(MODEL_NAMES)
    cases = [(name, None) for name in models.split(",") if name]
    cases += [(f"loop_{n}_sites", n) for n in sites]
    rows = []
    print("| model | effppl median, ms | NumPyro median, ms | ratio (median) | ratio (best) |")
    print("|---|---|---|---|---|")
    for name, n in cases:
        row = measure(name, args.repeats, n)
        rows.append(row)
        print(f"| {name} | {1e3 * statistics.median(row['effppl']):.2f} | "
              f"{1e3 * statistics.median(row['numpyro']):.2f} | {row['median_ratio']:.2f}x | "
              f"{row['best_ratio']:.2f}x |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"repeats": args.repeats, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
