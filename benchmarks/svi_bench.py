"""SVI: `effppl.infer.SVI` against NumPyro's, first run and steady steps per second.

Four models, the same guide, loss and optimiser (`optax.adam(0.01)`) in both frameworks,
`progress_bar=False` (each `run` is one compiled loop) unless said below:

- logistic regression, N = 10,000 rows, 10 covariates (`AutoNormal`, `Trace_ELBO()`);
- a local-level state space model, T = 200 latent states in a scan (plain `lax.scan` in effppl,
  `numpyro.contrib.control_flow.scan` in NumPyro, which its autoguides support; `AutoNormal`,
  `Trace_ELBO()`);
- `gmm`: a 3-component Gaussian mixture, N = 1,000 points, its component `z` in a plate summed out
  by `TraceEnum_ELBO(max_plate_nesting=1)` (maximum likelihood: weights and locations are
  `param` sites of the model, the guide is empty);
- `hmm`: a 3-state HMM, T = 100 steps, its states summed out by `TraceEnum_ELBO` (a plain
  `lax.scan` in effppl, whose forward algorithm effppl derives; in NumPyro a Python loop under
  `markov`, NumPyro's documented way: its `contrib.control_flow.scan` with enumerated sites gave
  a different loss from the hand-written forward algorithm, 17.73 against 8.56 on a 5-step
  series, and a `KeyError` without params), params and empty guide as for `gmm`.

Per framework and model, in one process, print:
- first run: wall time of `svi.run(key, num_steps, ...)` on a fresh SVI object, tracing,
  handler elimination and XLA compilation included;
- repeat run: the same `svi.run` on new data of the same shapes, its time and its number of XLA
  compilations (effppl caches its compiled loop by structure; NumPyro's `run` re-traces its
  `lax.scan` of updates);
- repeat run at the defaults: the same, on other new data, with the progress bar on (`run`'s
  default: NumPyro then calls its jitted update once per step from Python, and re-traces it for
  each `run`; effppl runs compiled chunks between updates of the bar), the second such run;
- steady steps/s: `num_steps` calls of the framework's own `svi.update` in one compiled
  `lax.scan`, compilation excluded (best of nine, the frameworks timed in alternation), per
  wall second and per CPU second;
- the final loss (mean of the last 100 steps) of the first run, as a sanity check.

Usage: `python -m benchmarks.svi_bench [--steps 5000] [--models logistic,ssm,gmm,hmm]
[--json out.json]`.
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.ops.indexing import Vindex

from .inference_bench import _count_compilations  # one compile counter for the benchmarks

ENUMERATED = ("gmm", "hmm")  # fitted with TraceEnum_ELBO and an empty guide
K = 3


def _models(sample, plate, scan, dist, param):
    simplex = dist.constraints.simplex

    def gmm(y):
        weights = param("weights", jnp.ones(K) / K, constraint=simplex)
        locs = param("locs", jnp.array([-1.0, 0.0, 1.0]))
        with plate("n", y.shape[0]):
            z = sample("z", dist.Categorical(weights), infer={"enumerate": "parallel"})
            sample("y", dist.Normal(locs[z], 1.0), obs=y)

    def hmm(y):
        trans = param("trans", jnp.full((K, K), 0.7 / K) + 0.3 * jnp.eye(K), constraint=simplex)
        locs = param("locs", jnp.array([-1.0, 0.0, 1.0]))

        def step(z_prev, y_t):
            # Vindex: NumPyro's enumerated `z_prev` carries its own dims (a no-op in effppl)
            z = sample("z", dist.Categorical(Vindex(trans)[z_prev]),
                       infer={"enumerate": "parallel"})
            sample("y", dist.Normal(locs[z], 1.0), obs=y_t)
            return z, None

        scan(step, 0, y)

    def logistic(X, y):
        alpha = sample("alpha", dist.Normal(0.0, 1.0))
        beta = sample("beta", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
        with plate("n", X.shape[0]):
            sample("y", dist.Bernoulli(logits=alpha + X @ beta), obs=y)

    def ssm(y):
        sigma = sample("sigma", dist.HalfNormal(1.0))

        def step(x_prev, y_t):
            x = sample("x", dist.Normal(x_prev, sigma))
            sample("y", dist.Normal(x, 0.5), obs=y_t)
            return x, None

        scan(step, 0.0, y)

    return {"logistic": logistic, "ssm": ssm, "gmm": gmm, "hmm": hmm}


def _data(name, seed):
    rng = np.random.RandomState(seed)
    if name == "logistic":
        X = rng.randn(10_000, 10)
        logits = 0.3 + X @ rng.randn(10) * 0.5
        y = (rng.rand(10_000) < 1 / (1 + np.exp(-logits))).astype(np.float64)
        return (jnp.asarray(X), jnp.asarray(y))
    if name in ENUMERATED:  # 3 levels; the HMM stays in its state with probability 0.9
        n = 1000 if name == "gmm" else 100
        if name == "gmm":
            z = rng.choice(K, n, p=[0.5, 0.3, 0.2])
        else:
            z = np.zeros(n, int)
            for t in range(1, n):
                z[t] = z[t - 1] if rng.rand() < 0.9 else rng.randint(K)
        return (jnp.asarray(np.array([-2.0, 0.5, 3.0])[z] + rng.randn(n)),)
    x = np.cumsum(0.3 * rng.randn(200))
    return (jnp.asarray(x + 0.5 * rng.randn(200)),)


def _frameworks():
    import numpyro
    import numpyro.distributions as ndist
    from numpyro.contrib.control_flow import scan as numpyro_scan
    from numpyro.infer import SVI as NSVI
    from numpyro.infer import Trace_ELBO as NTrace_ELBO
    from numpyro.infer import TraceEnum_ELBO as NTraceEnum_ELBO
    from numpyro.infer.autoguide import AutoNormal as NAutoNormal

    import effppl
    from effppl.infer import SVI, Trace_ELBO, TraceEnum_ELBO
    from effppl.infer.autoguide import AutoNormal

    numpyro_models = _models(numpyro.sample, numpyro.plate, numpyro_scan, ndist, numpyro.param)
    numpyro_models["hmm"] = _numpyro_hmm
    return {
        "effppl": (_models(effppl.sample, effppl.plate, jax.lax.scan, effppl.distributions,
                           effppl.param), SVI, Trace_ELBO, TraceEnum_ELBO, AutoNormal),
        "numpyro": (numpyro_models, NSVI, NTrace_ELBO, NTraceEnum_ELBO, NAutoNormal),
    }


def _numpyro_hmm(y):
    """The `hmm` model as NumPyro enumerates it: a Python loop under `markov`."""
    import numpyro
    import numpyro.distributions as ndist
    from numpyro.contrib.funsor import markov

    simplex = ndist.constraints.simplex
    trans = numpyro.param("trans", jnp.full((K, K), 0.7 / K) + 0.3 * jnp.eye(K),
                          constraint=simplex)
    locs = numpyro.param("locs", jnp.array([-1.0, 0.0, 1.0]))
    z = 0
    for t in markov(range(y.shape[0])):
        z = numpyro.sample(f"z_{t}", ndist.Categorical(Vindex(trans)[z]),
                           infer={"enumerate": "parallel"})
        numpyro.sample(f"y_{t}", ndist.Normal(locs[z], 1.0), obs=y[t])


def _empty_guide(*args):
    """The guide of the enumerated models: every latent is summed out, the params are the
    model's."""


def _timed_run(svi, steps, args, seed, progress_bar=False):
    start = time.perf_counter()
    result = svi.run(jax.random.PRNGKey(seed), steps, *args, progress_bar=progress_bar)
    jax.block_until_ready(result.losses)
    return time.perf_counter() - start, result


def _step_loop(svi, state, steps, args):
    """`steps` calls of the framework's own `svi.update` in one compiled `lax.scan` (compiled
    here, ahead of timing)."""
    def many(state, *args):
        return jax.lax.scan(lambda s, _: svi.update(s, *args), state, None, length=steps)

    compiled = jax.jit(many).lower(state, *args).compile()
    return lambda: jax.block_until_ready(compiled(state, *args))


def bench(framework, name, steps):
    """First and repeat run of one framework; returns the row and its compiled step loop."""
    models, svi_cls, loss_cls, enum_loss_cls, guide_cls = _frameworks()[framework]
    model = models[name]
    if name in ENUMERATED:
        svi = svi_cls(model, _empty_guide, optax.adam(0.01), enum_loss_cls(max_plate_nesting=1))
    else:
        svi = svi_cls(model, guide_cls(model), optax.adam(0.01), loss_cls())
    first, result = _timed_run(svi, steps, _data(name, 0), 0)
    final_loss = float(np.mean(np.asarray(result.losses)[-100:]))
    with _count_compilations() as count:
        repeat, _ = _timed_run(svi, steps, _data(name, 1), 1)
    _timed_run(svi, steps, _data(name, 3), 3, progress_bar=True)  # effppl compiles its chunk
    default, _ = _timed_run(svi, steps, _data(name, 4), 4, progress_bar=True)
    row = {"framework": framework, "model": name, "steps": steps, "first_run_s": first,
           "repeat_run_s": repeat, "repeat_compilations": count[0],
           "default_repeat_run_s": default, "final_loss": final_loss}
    return row, _step_loop(svi, result.state, steps, _data(name, 2))


def _steady_rates(loops, steps, rounds=9):
    """Steps per second of each compiled loop, timed in alternation, best of `rounds`: per wall
    second and per CPU second of this process (`time.process_time`, which the load of other
    jobs on a shared machine moves less than the wall clock). Alternation gives both frameworks
    the same load; the order alternates too, so neither always runs first."""
    wall, cpu = [np.inf] * len(loops), [np.inf] * len(loops)
    for r in range(rounds):
        order = range(len(loops)) if r % 2 == 0 else reversed(range(len(loops)))
        for i in order:
            start, start_cpu = time.perf_counter(), time.process_time()
            loops[i]()
            wall[i] = min(wall[i], time.perf_counter() - start)
            cpu[i] = min(cpu[i], time.process_time() - start_cpu)
    return [(steps / w, steps / c) for w, c in zip(wall, cpu)]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.svi_bench")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--models", default="logistic,ssm,gmm,hmm")
    parser.add_argument("--json", default=None)
    opts = parser.parse_args(argv)
    jax.jit(lambda x: x + 1)(jnp.ones(3)).block_until_ready()  # JAX's own start-up, for neither
    rows = []
    for name in opts.models.split(","):
        pairs = [bench(framework, name, opts.steps) for framework in ("effppl", "numpyro")]
        rates = _steady_rates([loop for _, loop in pairs], opts.steps)
        for (row, _), (rate, cpu_rate) in zip(pairs, rates):
            row["steps_per_s"], row["steps_per_cpu_s"] = rate, cpu_rate
            rows.append(row)
            print(f"{name:9s} {row['framework']:8s} first run {row['first_run_s']:7.2f} s | "
                  f"steady {rate:9.0f} steps/s, {cpu_rate:9.0f} per CPU s | "
                  f"repeat {row['repeat_run_s']:6.2f} s, "
                  f"{row['repeat_compilations']} compilations | with progress bar "
                  f"{row['default_repeat_run_s']:6.2f} s | loss {row['final_loss']:.2f}",
                  flush=True)
    if opts.json:
        meta = {"jax": jax.__version__, "backend": jax.default_backend(),
                "device": str(jax.devices()[0])}
        with open(opts.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
