"""Warmup adaptation: ESS per gradient evaluation and wall time to a target ESS, effppl's
adaptation schemes (`NUTS(mass_matrix=...)`) beside NumPyro's NUTS on the same models.

Per model x sampler x seed, in one process (NumPyro and effppl side by side, float64, vectorized
chains): `mcmc.warmup(key, *data, collect_warmup=True, extra_fields=("num_steps",))`, whose
recorded `num_steps` are the warmup's gradient evaluations (the public API of both libraries),
then `mcmc.run(...)` from `post_warmup_state`. Figures: the smallest bulk ESS over scalar
latents (`arviz.ess`), gradients of the warmup and of the sampling, ESS per 1,000 gradients
(post-warmup only, and including the warmup), the seconds of each phase, and the wall time to an
ESS of 400, `warmup_s + sample_s * 400 / ess`, with the seconds JAX spent compiling (traced by
`jax.monitoring`) left out (`s_to_ess_400`) and counted (`s_to_ess_400_with_compile`: NumPyro
compiles its sampler anew at each `warmup` and `run` call, effppl once per model structure).
Medians over seeds; ratios to NumPyro's median.

Models: eight schools (non-centred, posteriordb's data), logistic regression (500 x 10), a 20-d
Gaussian with eigenvalues 1e-2..1e2 in a random basis, a radon-like hierarchical regression
(89 parameters), and posteriordb's `sblrc-blr` and `arma-arma11` (data from `tests/data`).

No nutpie column yet: nutpie 0.16.8 installs beside jax 0.10.2 (`pip install --dry-run
nutpie==0.16.8` in this project's venv adds only nutpie, pyarrow, arro3-core and obstore), but
the runner that would give it these log densities (`nutpie.from_pyfunc`) is not written.

Usage: `python -m benchmarks.adaptation_bench [--quick] [--seeds 0,1,2] [--models a,b]
[--methods diag,fisher_diag,low_rank] [--json PATH]`.
"""

import argparse
import json
import pathlib
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from ._nuts import _compile_seconds

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "posteriordb"
TARGET_ESS = 400


# -- models, written once against a PPL namespace (effppl's or NumPyro's) --------------------

def eight_schools(p, sigma, y):
    mu = p.sample("mu", p.dist.Normal(0.0, 5.0))
    tau = p.sample("tau", p.dist.HalfCauchy(5.0))
    with p.plate("J", sigma.shape[0]):
        theta_trans = p.sample("theta_trans", p.dist.Normal(0.0, 1.0))
        p.sample("y", p.dist.Normal(mu + tau * theta_trans, sigma), obs=y)


def logistic(p, X, y):
    beta = p.sample("beta", p.dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
    with p.plate("N", X.shape[0]):
        p.sample("y", p.dist.Bernoulli(logits=X @ beta), obs=y)


def gaussian(p, scale_tril):
    p.sample("x", p.dist.MultivariateNormal(jnp.zeros(scale_tril.shape[0]),
                                            scale_tril=scale_tril))


def radon(p, county, floor, y, num_counties):
    mu_a = p.sample("mu_a", p.dist.Normal(0.0, 10.0))
    sigma_a = p.sample("sigma_a", p.dist.HalfNormal(5.0))
    beta = p.sample("beta", p.dist.Normal(0.0, 10.0))
    sigma_y = p.sample("sigma_y", p.dist.HalfNormal(5.0))
    with p.plate("counties", num_counties.shape[0]):
        a_raw = p.sample("a_raw", p.dist.Normal(0.0, 1.0))
    a = mu_a + sigma_a * a_raw
    with p.plate("N", y.shape[0]):
        p.sample("y", p.dist.Normal(a[county] + beta * floor, sigma_y), obs=y)


def blr(p, X, y):
    beta = p.sample("beta", p.dist.Normal(0.0, 10.0).expand([X.shape[1]]).to_event(1))
    sigma = p.sample("sigma", p.dist.HalfNormal(10.0))
    with p.plate("N", X.shape[0]):
        p.sample("y", p.dist.Normal(X @ beta, sigma), obs=y)


def arma11(p, y):
    mu = p.sample("mu", p.dist.Normal(0.0, 10.0))
    phi = p.sample("phi", p.dist.Normal(0.0, 2.0))
    theta = p.sample("theta", p.dist.Normal(0.0, 2.0))
    sigma = p.sample("sigma", p.dist.HalfCauchy(2.5))

    def step(err_prev, t):
        err = y[t] - (mu + phi * y[t - 1] + theta * err_prev)
        return err, err

    err1 = y[0] - (mu + phi * mu)
    _, errs = jax.lax.scan(step, err1, jnp.arange(1, y.shape[0]))
    err = jnp.concatenate([err1[None], errs])
    p.factor("err", p.dist.Normal(0.0, sigma).log_prob(err).sum())


def _posteriordb(name):
    return json.loads((DATA / name / "data.json").read_text())


def make_data():
    """`{model name: (model, args)}`, float64 arrays (fixed seeds)."""
    rng = np.random.default_rng(20260303)
    es = _posteriordb("eight_schools-eight_schools_noncentered")
    X = rng.normal(size=(500, 10))
    y_log = (rng.uniform(size=500) < 1 / (1 + np.exp(-X @ rng.normal(size=10)))).astype(float)
    q, _ = np.linalg.qr(rng.normal(size=(20, 20)))
    cov = q @ np.diag(np.logspace(-2, 2, 20)) @ q.T
    num_counties, n = 85, 919
    county = rng.integers(0, num_counties, n)
    floor = (rng.uniform(size=n) < 0.2).astype(float)
    a = 1.5 + 0.3 * rng.normal(size=num_counties)
    y_radon = a[county] - 0.7 * floor + 0.75 * rng.normal(size=n)
    b = _posteriordb("sblrc-blr")
    arma = _posteriordb("arma-arma11")
    f = jnp.asarray
    return {
        "eight_schools": (eight_schools, (f(es["sigma"], float), f(es["y"], float))),
        "logistic_500x10": (logistic, (f(X), f(y_log))),
        "gaussian_20d": (gaussian, (f(np.linalg.cholesky(cov)),)),
        "radon_89": (radon, (f(county), f(floor), f(y_radon), f(np.zeros(num_counties)))),
        "posteriordb_blr": (blr, (f(b["X"], float), f(b["y"], float))),
        "posteriordb_arma11": (arma11, (f(arma["y"], float),)),
    }


# -- samplers ---------------------------------------------------------------------------

def _ppl(name):
    import types

    import numpyro.distributions as dist
    if name == "numpyro":
        import numpyro
        return types.SimpleNamespace(sample=numpyro.sample, plate=numpyro.plate,
                                     factor=numpyro.factor, dist=dist)
    import effppl
    return types.SimpleNamespace(sample=effppl.sample, plate=effppl.plate,
                                 factor=effppl.factor, dist=dist)


def _mcmc(sampler, model, mode):
    """A fresh MCMC object for `sampler` (`"numpyro"` or `"effppl:<mass_matrix>"`)."""
    import functools
    kwargs = dict(num_warmup=mode["num_warmup"], num_samples=mode["num_samples"],
                  num_chains=mode["num_chains"], progress_bar=False)
    if sampler == "numpyro":
        import numpyro.infer
        fn = functools.partial(model, _ppl("numpyro"))
        return numpyro.infer.MCMC(numpyro.infer.NUTS(fn), chain_method="vectorized",
                                  jit_model_args=True, **kwargs)
    from effppl import infer
    fn = functools.partial(model, _ppl("effppl"))
    return infer.MCMC(infer.NUTS(fn, mass_matrix=sampler.split(":")[1]), **kwargs)


def _min_ess(samples):
    import arviz as az
    draws = {k: np.asarray(v, np.float64) for k, v in samples.items()}
    ess = az.ess(az.from_dict(posterior=draws), method="bulk")
    return float(min(np.min(ess[k].values) for k in draws))


def one_run(mcmc, sampler, args, seed):
    """The figures of one warmup + sampling (module docstring), a JSON-able dict."""
    steps = "num_steps"
    key_w, key_s = jax.random.split(jax.random.PRNGKey(seed))
    with _compile_seconds() as compiling:
        t0 = time.perf_counter()
        mcmc.warmup(key_w, *args, collect_warmup=True, extra_fields=(steps,))
        warm_grads = int(np.sum(np.asarray(mcmc.get_extra_fields()[steps])))
        t1 = time.perf_counter()
        warm_compile = sum(compiling)
        mcmc.run(key_s, *args, extra_fields=(steps,))
        samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
        t2 = time.perf_counter()
        sample_compile = sum(compiling) - warm_compile
    fields = mcmc.get_extra_fields()
    grads = int(np.sum(np.asarray(fields[steps])))
    ess = _min_ess(samples)
    out = {"seed": seed, "min_bulk_ess": ess, "warmup_grads": warm_grads, "sample_grads": grads,
           "ess_per_1k_grads": 1000 * ess / grads,
           "ess_per_1k_grads_incl_warmup": 1000 * ess / (grads + warm_grads),
           "warmup_s": t1 - t0 - warm_compile, "sample_s": t2 - t1 - sample_compile,
           "compile_s": warm_compile + sample_compile,
           "divergences": int(np.sum(np.asarray(fields["diverging"])))}
    out["s_to_ess_400"] = out["warmup_s"] + out["sample_s"] * TARGET_ESS / max(ess, 1e-9)
    out["s_to_ess_400_with_compile"] = out["s_to_ess_400"] + out["compile_s"]
    if sampler == "numpyro":
        mcmc.post_warmup_state = None
    return out


def _median(runs, key):
    return statistics.median(r[key] for r in runs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="300 + 300 transitions, 2 chains, seed 0 (a few minutes)")
    parser.add_argument("--seeds", default=None)
    parser.add_argument("--models", default=None)
    parser.add_argument("--methods", default="diag,fisher_diag,low_rank")
    parser.add_argument("--json", default=None)
    a = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    mode = dict(num_warmup=300, num_samples=300, num_chains=2) if a.quick else \
        dict(num_warmup=1000, num_samples=1000, num_chains=4)
    seeds = [int(s) for s in (a.seeds or ("0" if a.quick else "0,1,2")).split(",")]
    models = make_data()
    names = a.models.split(",") if a.models else list(models)
    samplers = ["numpyro"] + [f"effppl:{m}" for m in a.methods.split(",")]
    path = pathlib.Path(a.json or ROOT / "benchmarks" / "results" /
                        f"adaptation_{'quick' if a.quick else 'full'}_cpu.json")
    results = {"mode": mode, "seeds": seeds, "target_ess": TARGET_ESS, "models": {}}
    for name in names:
        model, args = models[name]
        results["models"][name] = {}
        for sampler in samplers:
            mcmc = _mcmc(sampler, model, mode)
            runs = [one_run(mcmc, sampler, args, seed) for seed in seeds]
            summary = {k: _median(runs, k) for k in (
                "ess_per_1k_grads", "ess_per_1k_grads_incl_warmup", "warmup_grads",
                "s_to_ess_400", "s_to_ess_400_with_compile", "min_bulk_ess", "divergences")}
            results["models"][name][sampler] = {"median": summary, "runs": runs}
            print(f"{name:20s} {sampler:22s} " + " ".join(
                f"{k}={v:.4g}" for k, v in summary.items()), flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1))
    print(table(results))
    return results


def table(results) -> str:
    """The markdown table of `results`: per model and sampler, the medians and the ratios to
    NumPyro's."""
    lines = ["| model | sampler | ESS/1k grads, post / incl. warmup | ratio to NumPyro (incl.) "
             "| warmup grads | s to ESS 400 (no compile) | ratio | with compile | ratio "
             "| divergences |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, per in results["models"].items():
        ref = per["numpyro"]["median"]
        for sampler, r in per.items():
            m = r["median"]
            incl = "ess_per_1k_grads_incl_warmup"
            lines.append(
                f"| {name} | {sampler} | {m['ess_per_1k_grads']:.3g} / {m[incl]:.3g} | "
                f"{m[incl] / ref[incl]:.2f} | {m['warmup_grads']:.0f} | "
                f"{m['s_to_ess_400']:.2f} | {m['s_to_ess_400'] / ref['s_to_ess_400']:.2f} | "
                f"{m['s_to_ess_400_with_compile']:.2f} | "
                f"{m['s_to_ess_400_with_compile'] / ref['s_to_ess_400_with_compile']:.2f} | "
                f"{m['divergences']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
