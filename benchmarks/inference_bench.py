"""End-to-end NUTS: `effppl.infer` against NumPyro, first run and repeated run.

For a logistic regression (N = 10,000 rows) and eight schools (non-centred), with the same
warmup, samples and chains in both frameworks, print side by side:

- wall time of the first `run` (tracing, handler elimination and XLA compilation included) and
  of a repeated `run` on *new data of the same shapes* (a fresh key too);
- the number of XLA compilations during the repeated run (effppl caches its compiled sampler by
  structure and passes the data as arguments; NumPyro's default re-traces and re-compiles);
- bulk ESS per second of wall time: the smallest bulk ESS over all scalar latent components
  (`arviz.ess(method="bulk")`), divided by the wall time of that run;
- the number of divergent transitions after warmup.

NumPyro is run twice: with its defaults, and with `jit_model_args=True` (its opt-in to reuse the
compiled sampler across data of the same shapes), so the comparison is fair to both.

Usage: `python -m benchmarks.inference_bench [--warmup 500] [--samples 500] [--chains 4]
[--ppl effppl|numpyro-shim] [--json out.json]`. `--ppl numpyro-shim` runs effppl's driver on
NumPyro's handlers (for when `effppl.handlers` is unavailable).
"""

import argparse
import contextlib
import json
import time
import types
import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_EIGHT_SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
_EIGHT_SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


@contextlib.contextmanager
def _count_compilations():
    count = [0]

    def listener(event, duration, **kwargs):
        if event == _COMPILE_EVENT:
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield count
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def _models(p):
    """The two models written against a PPL namespace `p` (sample, plate, deterministic, dist)."""

    def logistic(X, y):
        alpha = p.sample("alpha", p.dist.Normal(0.0, 1.0))
        beta = p.sample("beta", p.dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
        with p.plate("n", X.shape[0]):
            p.sample("y", p.dist.Bernoulli(logits=alpha + X @ beta), obs=y)

    def eight_schools(sigma, y):
        mu = p.sample("mu", p.dist.Normal(0.0, 5.0))
        tau = p.sample("tau", p.dist.HalfCauchy(5.0))
        with p.plate("J", sigma.shape[0]):
            theta_trans = p.sample("theta_trans", p.dist.Normal(0.0, 1.0))
            theta = p.deterministic("theta", mu + tau * theta_trans)
            p.sample("y", p.dist.Normal(theta, sigma), obs=y)

    return {"logistic regression (N=10k)": logistic, "eight schools (noncentered)": eight_schools}


def _data(name, seed):
    """Data for `name`; a different `seed` gives new data of the same shapes."""
    rng = np.random.default_rng(seed)
    if name.startswith("logistic"):
        X = rng.normal(size=(10_000, 5)).astype(np.float32)
        logits = 0.3 + X @ np.array([1.0, -0.5, 0.25, 0.0, 2.0], np.float32)
        y = (rng.uniform(size=10_000) < 1 / (1 + np.exp(-logits))).astype(np.float32)
        return jnp.asarray(X), jnp.asarray(y)
    y = _EIGHT_SCHOOLS_Y + (0.0 if seed == 0 else rng.normal(size=8))
    return jnp.asarray(_EIGHT_SCHOOLS_SIGMA, jnp.float32), jnp.asarray(y, jnp.float32)


def _min_bulk_ess(samples_by_chain, latent):
    """Smallest bulk ESS over every scalar component of the latent sites (`[chain, draw, ...]`)."""
    dataset = az.convert_to_dataset({k: np.asarray(samples_by_chain[k]) for k in latent})
    ess = az.ess(dataset, method="bulk")
    return min(float(np.min(ess[k].values)) for k in latent)


def _timed(run, get_samples):
    with _count_compilations() as count:
        start = time.perf_counter()
        run()
        samples = jax.block_until_ready(get_samples())
        wall = time.perf_counter() - start
    return wall, count[0], samples


def _bench_effppl(model, name, args, latent):
    from effppl import infer

    mcmc = infer.MCMC(infer.NUTS(model), num_warmup=args.warmup, num_samples=args.samples,
                      num_chains=args.chains, progress_bar=False)
    rows = []
    for label, seed in (("first", 0), ("repeat", 1)):
        data = _data(name, seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", infer.DivergenceWarning)
            wall, compiles, samples = _timed(
                lambda: mcmc.run(jax.random.key(seed), *data),
                lambda: mcmc.get_samples(group_by_chain=True),
            )
        divergences = int(np.sum(np.asarray(mcmc.get_extra_fields()["diverging"])))
        rows.append(dict(framework="effppl", run=label, wall_s=wall, compiles=compiles,
                         min_bulk_ess=_min_bulk_ess(samples, latent), divergences=divergences))
    return rows


def _bench_numpyro(model, name, args, latent, jit_model_args):
    from numpyro.infer import MCMC, NUTS

    def make():
        return MCMC(NUTS(model), num_warmup=args.warmup, num_samples=args.samples,
                    num_chains=args.chains, chain_method="vectorized", progress_bar=False,
                    jit_model_args=jit_model_args)

    mcmc = make()
    framework = "numpyro" + (" (jit_model_args)" if jit_model_args else "")
    rows = []
    for label, seed in (("first", 0), ("repeat", 1)):
        data = _data(name, seed)
        if seed and not jit_model_args:
            # NumPyro 0.22 fails on a second vectorized `run` of the same MCMC object with its
            # default jit_model_args=False; a new object is what users write there anyway.
            mcmc = make()
        wall, compiles, samples = _timed(
            lambda: mcmc.run(jax.random.PRNGKey(seed), *data, extra_fields=("diverging",)),
            lambda: mcmc.get_samples(group_by_chain=True),
        )
        divergences = int(np.sum(np.asarray(mcmc.get_extra_fields()["diverging"])))
        rows.append(dict(framework=framework, run=label, wall_s=wall, compiles=compiles,
                         min_bulk_ess=_min_bulk_ess(samples, latent), divergences=divergences))
    return rows


def _effppl_namespace(ppl):
    import numpyro.distributions as dist

    if ppl == "effppl":
        import effppl

        return types.SimpleNamespace(sample=effppl.sample, plate=effppl.plate,
                                     deterministic=effppl.deterministic, dist=dist)
    import numpyro
    import numpyro.handlers
    import numpyro.infer.util

    from effppl.infer import _model

    _model._backend = types.SimpleNamespace(  # the test shim's mapping, benchmark-local
        potential_energy=numpyro.infer.util.potential_energy,
        constrain_fn=numpyro.infer.util.constrain_fn,
        unconstrain_fn=numpyro.infer.util.unconstrain_fn,
        seed=numpyro.handlers.seed, substitute=numpyro.handlers.substitute,
        trace=numpyro.handlers.trace,
    )
    return types.SimpleNamespace(sample=numpyro.sample, plate=numpyro.plate,
                                 deterministic=numpyro.deterministic, dist=dist)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.inference_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--ppl", choices=("effppl", "numpyro-shim"), default="effppl")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)

    import numpyro

    numpyro.set_host_device_count(1)
    ours = _models(_effppl_namespace(args.ppl))
    theirs = _models(types.SimpleNamespace(
        sample=numpyro.sample, plate=numpyro.plate, deterministic=numpyro.deterministic,
        dist=numpyro.distributions))
    latent = {"logistic regression (N=10k)": ("alpha", "beta"),
              "eight schools (noncentered)": ("mu", "tau", "theta_trans")}

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; warmup={args.warmup} "
          f"samples={args.samples} chains={args.chains}; effppl PPL: {args.ppl}")
    header = f"{'model':30s} {'framework':26s} {'run':7s} {'wall [s]':>9s} {'compiles':>9s} " \
             f"{'min bulk ESS':>13s} {'ESS/s':>9s} {'divergent':>10s}"
    print(header)
    print("-" * len(header))
    all_rows = []
    for name in ours:
        rows = _bench_effppl(ours[name], name, args, latent[name])
        rows += _bench_numpyro(theirs[name], name, args, latent[name], jit_model_args=False)
        rows += _bench_numpyro(theirs[name], name, args, latent[name], jit_model_args=True)
        for row in rows:
            row["model"] = name
            row["ess_per_s"] = row["min_bulk_ess"] / row["wall_s"]
            print(f"{name:30s} {row['framework']:26s} {row['run']:7s} {row['wall_s']:9.2f} "
                  f"{row['compiles']:9d} {row['min_bulk_ess']:13.0f} {row['ess_per_s']:9.1f} "
                  f"{row['divergences']:10d}")
        all_rows += rows
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(warmup=args.warmup, samples=args.samples, chains=args.chains,
                           ppl=args.ppl, rows=all_rows), f, indent=1)
    return all_rows


if __name__ == "__main__":
    main()
