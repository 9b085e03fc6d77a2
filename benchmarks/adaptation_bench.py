"""Warmup adaptation: ESS per gradient evaluation and wall time to a target ESS, effppl's
adaptation schemes (`NUTS(mass_matrix=...)`) beside NumPyro's NUTS on the same models.

Per model x sampler x seed, in one process (NumPyro and effppl side by side, float64, vectorized
chains): `mcmc.warmup(key, *data, collect_warmup=True, extra_fields=("num_steps",))`, whose
recorded `num_steps` are the warmup's gradient evaluations (the public API of both libraries),
then `mcmc.run(...)` from `post_warmup_state`. Figures: the smallest bulk ESS over scalar
latents (`arviz.ess`), gradients of the warmup and of the sampling, ESS per 1,000 gradients
(post-warmup only, and including the warmup), the seconds of each phase, and the wall time to an
ESS of 400, `warmup_s + sample_s * 400 / ess`, with the seconds of compilation left out
(`s_to_ess_400`) and counted (`s_to_ess_400_with_compile`). NumPyro compiles its sampler anew at
each `warmup` and `run` call: its compile seconds are those `jax.monitoring` traces, subtracted
from each phase. effppl compiles once per model and scheme, partly by loading stored
executables that `jax.monitoring` does not see: the first seed's warmup and run are done twice
with the same keys, the second pass is timed, and the first pass's extra seconds are its
compile seconds (later seeds compile nothing).
Medians over seeds; ratios to NumPyro's median.

Models: eight schools (non-centred, posteriordb's data), logistic regression (500 x 10), a 20-d
Gaussian with eigenvalues 1e-2..1e2 in a random basis, a radon-like hierarchical regression
(89 parameters), and posteriordb's `sblrc-blr` and `arma-arma11` (data from `tests/data`).

nutpie column (optional): `nutpie:diag` (nutpie's default, the gradient-based diagonal,
i.e. what effppl calls `fisher_diag`) and `nutpie:low_rank` (`low_rank_modified_mass_matrix=True`),
nutpie 0.16.x, run only where `import nutpie` works (`pip install -e ".[nutpie]"`); otherwise
they are skipped with a one-line message. nutpie samples NumPyro's own log density of the NumPyro
model, in the same unconstrained space: `numpyro.infer.util.initialize_model` gives the
`potential_fn` and `postprocess_fn`, the unconstrained dict is flattened by
`jax.flatten_util.ravel_pytree`, and a jitted float64 `value_and_grad` of `-potential_fn` is
handed to `nutpie.compiled_pyfunc.from_pyfunc` (checked once per model and sampler: |logp +
potential| < 1e-8 at NumPyro's initial point); the draws are expanded to the constrained latent
sites, so the min bulk ESS is over the same scalars as the others. Gradients are the summed
`n_steps` of `warmup_sample_stats` and `sample_stats`, divergences the post-warmup `diverging`.
nutpie adapts and samples in one `nutpie.sample(..., save_warmup=True)` call, so that call's
seconds are split into `warmup_s` and `sample_s` by the share of gradients in each phase (the
call also expands every draw to the constrained sites and builds the arviz result). The jit's
first calls (logp and expand) run untimed before sampling, and their compile seconds are
`compile_s` of the model's first seed, as for effppl. Chains run on one thread
(`NUTPIE_CORES = 1`), one after another, and every gradient is a Python call into a jitted JAX
function, so nutpie's seconds here carry a per-gradient dispatch cost its compiled backends
(Stan, numba) do not have: its gradient counts and ESS are the fair comparison, its wall times
are an upper bound.

Usage: `python -m benchmarks.adaptation_bench [--quick] [--seeds 0,1,2] [--models a,b]
[--methods diag,fisher_diag,low_rank] [--nutpie diag,low_rank] [--json PATH]` (`--nutpie ""`:
no nutpie samplers; a method `diag+heuristic` is `"diag"` with NumPyro's
`find_heuristic_step_size=True`).
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
NUTPIE_SETTINGS = ("diag", "low_rank")
NUTPIE_CORES = 1


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
    """A fresh MCMC object for `sampler` (`"numpyro"` or `"effppl:<mass_matrix>"`, with
    `+heuristic` for `find_heuristic_step_size=True`)."""
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
    scheme, _, heuristic = sampler.split(":")[1].partition("+")  # (`diag+heuristic`)
    return infer.MCMC(infer.NUTS(fn, mass_matrix=scheme,
                                 find_heuristic_step_size=heuristic == "heuristic"), **kwargs)


def _min_ess(samples):
    import arviz as az
    draws = {k: np.asarray(v, np.float64) for k, v in samples.items()}
    ess = az.ess(az.from_dict(posterior=draws), method="bulk")
    return float(min(np.min(ess[k].values) for k in draws))


def one_run(mcmc, sampler, args, seed):
    """The figures of one warmup + sampling (module docstring), a JSON-able dict."""
    steps = "num_steps"
    key_w, key_s = jax.random.split(jax.random.PRNGKey(seed))

    def timed():
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
        return warm_grads, samples, t0, t1, t2, warm_compile, sample_compile

    first = None
    if sampler != "numpyro" and not getattr(mcmc, "_bench_compiled", False):
        # effppl compiles once per model and scheme (partly through its stored executables,
        # which `jax.monitoring` does not see): an untimed first pass compiles, and its extra
        # seconds over the timed second pass are the compile seconds
        first = timed()
        mcmc._bench_compiled = True
    warm_grads, samples, t0, t1, t2, warm_compile, sample_compile = timed()
    compile_s = warm_compile + sample_compile
    if sampler != "numpyro":  # the timed pass compiled nothing
        warm_compile = sample_compile = 0.0
        compile_s = 0.0 if first is None else max((first[4] - first[2]) - (t2 - t0), 0.0)
    fields = mcmc.get_extra_fields()
    grads = int(np.sum(np.asarray(fields[steps])))
    ess = _min_ess(samples)
    out = {"seed": seed, "min_bulk_ess": ess, "warmup_grads": warm_grads, "sample_grads": grads,
           "ess_per_1k_grads": 1000 * ess / grads,
           "ess_per_1k_grads_incl_warmup": 1000 * ess / (grads + warm_grads),
           "warmup_s": t1 - t0 - warm_compile, "sample_s": t2 - t1 - sample_compile,
           "compile_s": compile_s,
           "divergences": int(np.sum(np.asarray(fields["diverging"])))}
    out["s_to_ess_400"] = out["warmup_s"] + out["sample_s"] * TARGET_ESS / max(ess, 1e-9)
    out["s_to_ess_400_with_compile"] = out["s_to_ess_400"] + out["compile_s"]
    if sampler == "numpyro":
        mcmc.post_warmup_state = None
    return out


# -- nutpie (optional) ------------------------------------------------------------------

def _nutpie_missing():
    """None where `import nutpie` works, else why not (one line)."""
    try:
        import nutpie  # noqa: F401
    except ImportError as e:
        return str(e).splitlines()[0] or type(e).__name__
    return None


def _nutpie_model(model, args):
    """nutpie's model of NumPyro's log density of `model` (module docstring): a namespace of the
    `from_pyfunc` model, the latent site names, and the compile seconds of the jit's first
    calls (not yet charged to a run)."""
    import functools
    import types

    import numpyro.infer.util
    from jax.flatten_util import ravel_pytree
    from nutpie.compiled_pyfunc import from_pyfunc

    fn = functools.partial(model, _ppl("numpyro"))
    info = numpyro.infer.util.initialize_model(jax.random.PRNGKey(0), fn, model_args=args)
    z = info.param_info.z
    x0, unravel = ravel_pytree(z)
    x0 = np.asarray(x0, np.float64)
    names = sorted(z)

    def logp(x):
        return -info.potential_fn(unravel(x))

    value_and_grad = jax.jit(jax.value_and_grad(logp))
    expand = jax.jit(lambda x: {k: v for k, v in info.postprocess_fn(unravel(x)).items()
                                if k in names})
    with _compile_seconds() as compiling:  # the jit's first calls, untimed
        value, grad = jax.block_until_ready(value_and_grad(x0))
        values = jax.block_until_ready(expand(x0))
    potential = float(info.potential_fn(z))
    assert abs(float(value) + potential) < 1e-8, (float(value), potential)
    assert np.asarray(grad).shape == x0.shape

    def make_logp_fn():
        def logp_fn(x, **shared):
            v, g = value_and_grad(x)
            return float(v), np.asarray(g, dtype=np.float64, order="C")
        return logp_fn

    def make_expand_fn(seed1, seed2, chain):
        def expand_fn(x, **shared):
            return {k: np.asarray(v, dtype=np.float64, order="C") for k, v in expand(x).items()}
        return expand_fn

    compiled = from_pyfunc(
        x0.size, make_logp_fn, make_expand_fn,
        [np.dtype("float64")] * len(names), [tuple(np.shape(values[k])) for k in names], names)
    return types.SimpleNamespace(compiled=compiled, names=names, compile_s=sum(compiling))


def nutpie_run(nut, sampler, mode, seed):
    """`one_run`'s figures for nutpie (`sampler` `"nutpie:diag"` or `"nutpie:low_rank"`) on
    `_nutpie_model`'s `nut`: one `nutpie.sample` call, its seconds split into warmup and sampling
    by their gradients (module docstring)."""
    import nutpie
    with _compile_seconds() as compiling:
        t0 = time.perf_counter()
        trace = nutpie.sample(
            nut.compiled, draws=mode["num_samples"], tune=mode["num_warmup"],
            chains=mode["num_chains"], cores=NUTPIE_CORES, seed=seed, progress_bar=False,
            save_warmup=True, low_rank_modified_mass_matrix=sampler == "nutpie:low_rank")
        seconds = time.perf_counter() - t0
    compile_s, nut.compile_s = nut.compile_s + sum(compiling), 0.0
    seconds -= sum(compiling)
    warm_grads = int(np.sum(trace.warmup_sample_stats["n_steps"].values))
    grads = int(np.sum(trace.sample_stats["n_steps"].values))
    ess = _min_ess({k: trace.posterior[k].values for k in nut.names})
    out = {"seed": seed, "min_bulk_ess": ess, "warmup_grads": warm_grads, "sample_grads": grads,
           "ess_per_1k_grads": 1000 * ess / grads,
           "ess_per_1k_grads_incl_warmup": 1000 * ess / (grads + warm_grads),
           "warmup_s": seconds * warm_grads / (warm_grads + grads),
           "sample_s": seconds * grads / (warm_grads + grads),
           "compile_s": compile_s,
           "divergences": int(np.sum(trace.sample_stats["diverging"].values))}
    out["s_to_ess_400"] = out["warmup_s"] + out["sample_s"] * TARGET_ESS / max(ess, 1e-9)
    out["s_to_ess_400_with_compile"] = out["s_to_ess_400"] + out["compile_s"]
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
    parser.add_argument("--nutpie", default=",".join(NUTPIE_SETTINGS),
                        help="nutpie samplers (diag, low_rank; '' for none), used only where "
                             "`import nutpie` works")
    parser.add_argument("--json", default=None)
    a = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    mode = dict(num_warmup=300, num_samples=300, num_chains=2) if a.quick else \
        dict(num_warmup=1000, num_samples=1000, num_chains=4)
    seeds = [int(s) for s in (a.seeds or ("0" if a.quick else "0,1,2")).split(",")]
    models = make_data()
    names = a.models.split(",") if a.models else list(models)
    samplers = ["numpyro"] + [f"effppl:{m}" for m in a.methods.split(",")]
    nutpie_samplers = [f"nutpie:{m}" for m in a.nutpie.split(",") if m]
    if bad := [m for m in nutpie_samplers if m.split(":")[1] not in NUTPIE_SETTINGS]:
        parser.error(f"unknown nutpie samplers {bad}; choose from {NUTPIE_SETTINGS}")
    if nutpie_samplers and (why := _nutpie_missing()):
        print(f"skipping {', '.join(nutpie_samplers)}: nutpie not importable ({why})")
        nutpie_samplers = []
    samplers += nutpie_samplers
    path = pathlib.Path(a.json or ROOT / "benchmarks" / "results" /
                        f"adaptation_{'quick' if a.quick else 'full'}_cpu.json")
    results = {"mode": mode, "seeds": seeds, "target_ess": TARGET_ESS, "models": {}}
    for name in names:
        model, args = models[name]
        results["models"][name] = {}
        for sampler in samplers:
            if sampler.startswith("nutpie:"):
                nut = _nutpie_model(model, args)
                runs = [nutpie_run(nut, sampler, mode, seed) for seed in seeds]
            else:
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
    print(summary_lines(results))
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


def summary_lines(results) -> str:
    """Per sampler, the ESS per 1,000 gradients including warmup as a ratio to NumPyro's
    (median over the models, minimum, each model's); then, per model, whether effppl's
    `low_rank` reaches nutpie's `low_rank` on that figure (where both ran)."""
    incl = "ess_per_1k_grads_incl_warmup"
    per_model = results["models"]
    samplers = [s for s in dict.fromkeys(s for per in per_model.values() for s in per)
                if s != "numpyro"]
    lines = []
    for s in samplers:
        ratios = [per[s]["median"][incl] / per["numpyro"]["median"][incl]
                  for per in per_model.values() if s in per]
        lines.append(f"{s} median ratio {statistics.median(ratios):.2f} min {min(ratios):.2f} "
                     f"{[round(r, 2) for r in ratios]}")
    mine, theirs = "effppl:low_rank", "nutpie:low_rank"
    both = {name: (per[mine]["median"][incl], per[theirs]["median"][incl])
            for name, per in per_model.items() if mine in per and theirs in per}
    for name, (a, b) in both.items():
        lines.append(f"{name}: {mine} {a:.3g} {'>=' if a >= b else '<'} {theirs} {b:.3g} "
                     "ESS/1k grads incl. warmup")
    if both:
        wins = sum(a >= b for a, b in both.values())
        lines.append(f"{mine} >= {theirs} on {wins} of {len(both)} models")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
