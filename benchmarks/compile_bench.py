"""Time to first draw: effppl vs NumPyro on Python-loop models with many distinct sites.

For each size (number of distinct sample sites) and framework, in a fresh Python process each
(imports excluded from the timings):

- `first_draw_s` (and `first_draw_cpu_s`, this process's CPU time, less sensitive to a
  loaded machine): wall time of `MCMC(NUTS(model), num_warmup=100, num_samples=100,
  num_chains=1).run(...)` until the draws are ready (tracing, handler elimination, initial point,
  XLA compilation and sampling);
- `eliminate_s`: model -> plain jaxpr of the potential energy (effppl: `effppl.effects.make_jaxpr`
  of `potential_energy`, handlers compiled away; NumPyro: `jax.make_jaxpr` of its
  `potential_energy`), at the latent sites' prior draw;
- `compilations`: XLA compilations during the `run` (JAX's `backend_compile` monitoring event,
  as `tests/inference/test_recompile.py` counts them, less the programs loaded from the
  persistent cache, `cache_hits`);
- `second_process_s` (effppl only, `--cache`): the same run in a second process on new data of
  the same shapes, with effppl's persistent compilation cache (`EFFPPL_CACHE_DIR`) warm.

The model (`hierarchical_loop`): groups in a Python loop, each with a latent group mean (Normal),
a latent positive scale (alternately LogNormal and HalfNormal) and an observed vector of 5
points in a plate (alternately Normal and StudentT); 3 sites per group, plus 2 globals.

With `--models` (e.g. `--models all`), the same figures for the main harness's models at quick size
(`make_data("quick", seed)`, the harness's quick NUTS settings: 100 warmup, 100 draws, 2 chains,
tree depth 6) and for `lotka_volterra_scan` (an RK4 ODE in a plain 1,000-step `lax.scan`; `all`
includes it); the second process runs on the data of the next seed.

Usage: `python -m benchmarks.compile_bench [--sites 10,100,1000 | --models all]
[--frameworks effppl,numpyro] [--json benchmarks/results/compile_cpu.json] [--cache]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_EFFPPL_HIT_EVENT = "/effppl/compilation_cache/cache_hits"  # effppl.infer._compile._persistent.HIT_EVENT
POINTS = 5  # observations per group


def model_for(p):
    """The Python-loop hierarchical model written against a PPL namespace `p` (`sample`,
    `plate`, `dist`): `model(y)` with `y` of shape `(groups, POINTS)`."""

    def hierarchical_loop(y):
        dist = p.dist
        mu = p.sample("mu", dist.Normal(0.0, 5.0))
        tau = p.sample("tau", dist.HalfNormal(2.0))
        for g in range(y.shape[0]):
            theta = p.sample(f"theta_{g}", dist.Normal(mu, tau))
            scale_fn = dist.LogNormal(0.0, 0.5) if g % 2 else dist.HalfNormal(1.0)
            s = p.sample(f"s_{g}", scale_fn)
            with p.plate(f"obs_{g}", POINTS):
                like = dist.StudentT(4.0, theta, s) if g % 3 == 2 else dist.Normal(theta, s)
                p.sample(f"y_{g}", like, obs=y[g])

    return hierarchical_loop


SCAN_STEPS = 1000  # RK4 steps of `lotka_volterra_scan`
SCAN_EVERY = 10  # observed every this many steps


def scan_model_for(p):
    """A Lotka-Volterra model whose ODE is solved by RK4 in a plain `lax.scan` of `SCAN_STEPS`
    steps (step 0.01), observed (log-normal noise) every `SCAN_EVERY` steps:
    `model(y)` with `y` of shape `(SCAN_STEPS // SCAN_EVERY, 2)`."""
    import jax
    import jax.numpy as jnp

    def lotka_volterra_scan(y):
        dist = p.dist
        theta = p.sample("theta", dist.LogNormal(jnp.log(jnp.array([1.0, 0.05, 1.0, 0.05])),
                                                 0.3).to_event(1))
        z0 = p.sample("z0", dist.LogNormal(jnp.log(10.0), 0.5).expand([2]).to_event(1))
        sigma = p.sample("sigma", dist.HalfNormal(0.5))
        a, b, c, d = theta[0], theta[1], theta[2], theta[3]

        def f(z):
            return jnp.stack([a * z[0] - b * z[0] * z[1], -c * z[1] + d * z[0] * z[1]])

        def rk4(z, _):
            h = 0.01
            k1 = f(z)
            k2 = f(z + h / 2 * k1)
            k3 = f(z + h / 2 * k2)
            k4 = f(z + h * k3)
            z = z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            return z, z

        _, path = jax.lax.scan(rk4, z0, None, length=SCAN_STEPS)
        with p.plate("t", y.shape[0], dim=-2):
            p.sample("y", dist.LogNormal(jnp.log(path[SCAN_EVERY - 1::SCAN_EVERY]), sigma), obs=y)

    return lotka_volterra_scan


def scan_data(seed: int = 0):
    """Observations of `lotka_volterra_scan` at its prior mean, with log-normal noise 0.1."""
    import numpy as np

    z, h, out = np.array([10.0, 10.0]), 0.01, []
    a, b, c, d = 1.0, 0.05, 1.0, 0.05

    def f(z):
        return np.array([a * z[0] - b * z[0] * z[1], -c * z[1] + d * z[0] * z[1]])

    for t in range(SCAN_STEPS):
        k1 = f(z)
        k2 = f(z + h / 2 * k1)
        k3 = f(z + h / 2 * k2)
        k4 = f(z + h * k3)
        z = z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        if (t + 1) % SCAN_EVERY == 0:
            out.append(z)
    rng = np.random.default_rng(seed)
    return (np.array(out) * np.exp(0.1 * rng.normal(size=(len(out), 2)))).astype(np.float32)


def groups_for(sites: int) -> int:
    return max(1, (sites - 2) // 3)


def data(groups: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    theta = rng.normal(1.0, 1.0, size=(groups, 1))
    return (theta + rng.normal(size=(groups, POINTS))).astype(np.float32)


def _namespace(framework: str):
    import types

    if framework == "effppl":
        import effppl
        from effppl import distributions as dist
        from effppl.infer import MCMC, NUTS
        return types.SimpleNamespace(sample=effppl.sample, plate=effppl.plate, dist=dist,
                                     MCMC=MCMC, NUTS=NUTS)
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS
    return types.SimpleNamespace(sample=numpyro.sample, plate=numpyro.plate, dist=dist,
                                 MCMC=MCMC, NUTS=NUTS)


def _count_compilations(jax):
    """`[programs built, of which loaded from the persistent cache]`, counted as they happen (JAX
    reports a program loaded from its cache as a compilation too, and separately as a cache hit;
    an executable effppl stores itself, the sampler's chunk, is reported as effppl's hit only,
    and counted here as both)."""
    count = [0, 0]

    def listener(event, duration, **kwargs):
        if event == _COMPILE_EVENT:
            count[0] += 1

    def hits(event, **kwargs):
        if event == _CACHE_HIT_EVENT:
            count[1] += 1
        if event == _EFFPPL_HIT_EVENT:
            count[0] += 1
            count[1] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    jax.monitoring.register_event_listener(hits)
    return count


def _elimination_s(framework, model, y, jax):
    """CPU seconds (this process) from model to the plain jaxpr of its potential energy, at a
    prior draw, and the number of equations of that jaxpr."""
    import jax.numpy as jnp

    if framework == "effppl":
        from effppl import effects as fx
        from effppl import handlers
        tr = handlers.trace(handlers.seed(model, 0)).get_trace(y)
        params = handlers.unconstrain_fn(model, (y,), {}, {
            n: s["value"] for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"]})
        start = time.process_time()
        closed = fx.make_jaxpr(lambda p, d: handlers.potential_energy(model, (d,), {}, p))(
            params, jnp.asarray(y))
        return time.process_time() - start, len(closed.jaxpr.eqns)
    import numpyro.handlers as nh
    from numpyro.infer.util import potential_energy, unconstrain_fn
    tr = nh.trace(nh.seed(model, 0)).get_trace(y)
    params = unconstrain_fn(model, (y,), {}, {
        n: s["value"] for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"]})
    start = time.process_time()
    closed = jax.make_jaxpr(lambda p, d: potential_energy(model, (d,), {}, p))(
        params, jnp.asarray(y))
    return time.process_time() - start, len(closed.jaxpr.eqns)


def _first_draw(jax, mcmc, key, args, kwargs) -> dict:
    """Time and compilations of `mcmc.run(key, *args, **kwargs)` until the draws are ready."""
    count = _count_compilations(jax)
    start, cpu = time.perf_counter(), time.process_time()
    mcmc.run(key, *args, **kwargs)
    compiled = list(count)  # during `run` only
    jax.block_until_ready(mcmc.get_samples())
    first, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"first_draw_s": first, "first_draw_cpu_s": cpu,
            "compilations": compiled[0] - compiled[1], "cache_hits": compiled[1]}


def model_worker(framework: str, name: str, seed: int) -> dict:
    """One harness model at quick size, NUTS with the harness's quick settings."""
    import importlib

    import jax

    from ._config import MODES

    p = _namespace(framework)
    if name == "lotka_volterra_scan":
        model, args, kwargs = scan_model_for(p), (scan_data(seed),), {}
    else:
        module = importlib.import_module(f"models.{name}")
        args, kwargs = module.make_data("quick", seed)
        model = getattr(module, f"{framework}_model")
    mode = MODES["quick"]
    mcmc = p.MCMC(p.NUTS(model, max_tree_depth=mode.max_tree_depth), num_warmup=mode.num_warmup,
                  num_samples=mode.num_samples, num_chains=mode.num_chains, progress_bar=False,
                  **({"chain_method": "vectorized"} if framework == "numpyro" else {}))
    out = _first_draw(jax, mcmc, jax.random.PRNGKey(seed), args, kwargs)
    return {"framework": framework, "sites": name, **out}


def worker(framework: str, sites: int, seed: int, eliminate: bool) -> dict:
    """One measurement in this (fresh) process: returns a JSON-able dict."""
    import jax
    import jax.numpy as jnp

    p = _namespace(framework)
    model = model_for(p)
    groups = groups_for(sites)
    y = jnp.asarray(data(groups, seed))
    mcmc = p.MCMC(p.NUTS(model), num_warmup=100, num_samples=100, num_chains=1,
                  progress_bar=False)
    out = {"framework": framework, "sites": 2 + 3 * groups, "groups": groups,
           **_first_draw(jax, mcmc, jax.random.PRNGKey(seed), (y,), {})}
    if eliminate:
        out["eliminate_s"], out["jaxpr_eqns"] = _elimination_s(framework, model, y, jax)
    return out


def _spawn(framework, sites, seed, eliminate, env=None, timeout=3600):
    target = ["--sites", str(sites)] if isinstance(sites, int) else ["--models", sites]
    cmd = [sys.executable, "-m", "benchmarks.compile_bench", "--worker", framework,
           *target, "--seed", str(seed)] + (["--eliminate"] if eliminate else [])
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if proc.returncode:
        return {"framework": framework, "sites": sites, "status": "error",
                "error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def render(rows: list) -> str:
    by = {}
    for r in rows:
        by.setdefault(r["sites"], {})[r["framework"]] = r
    lines = ["| sites | effppl first draw, s (CPU s) | NumPyro, s (CPU s) | ratio (CPU) | "
             "effppl eliminate (s) | NumPyro trace (s) | ratio | compilations effppl / NumPyro | "
             "2nd process, s (CPU s) |",
             "|---|---|---|---|---|---|---|---|---|"]

    def f(x):
        return "-" if x is None else f"{x:.2f}"

    for sites in sorted(by, key=lambda s: (isinstance(s, str), s)):
        e, n = by[sites].get("effppl", {}), by[sites].get("numpyro", {})

        def ratio(k, e=e, n=n):
            return f"{e[k] / n[k]:.2f}x" if k in e and k in n else "-"

        lines.append(
            f"| {sites} | {f(e.get('first_draw_s'))} ({f(e.get('first_draw_cpu_s'))}) | "
            f"{f(n.get('first_draw_s'))} ({f(n.get('first_draw_cpu_s'))}) | "
            f"{ratio('first_draw_s')} ({ratio('first_draw_cpu_s')}) | {f(e.get('eliminate_s'))} | {f(n.get('eliminate_s'))} | "
            f"{ratio('eliminate_s')} | {e.get('compilations', '-')} / {n.get('compilations', '-')}"
            f" | {f(e.get('second_process_s'))} ({f(e.get('second_process_cpu_s'))}) |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_bench")
    parser.add_argument("--sites", default="10,100,1000")
    parser.add_argument("--models", default=None,
                        help="harness models at quick size instead of --sites: names or `all`")
    parser.add_argument("--frameworks", default="effppl,numpyro")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--cache", action="store_true",
                        help="also time effppl in a second process with a warm persistent cache")
    parser.add_argument("--eliminate", action="store_true", help="(worker) also time elimination")
    parser.add_argument("--no-eliminate", action="store_true")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        out = (model_worker(args.worker, args.models, args.seed) if args.models else
               worker(args.worker, int(args.sites), args.seed, args.eliminate))
        print(json.dumps(out))
        return 0
    if args.models:
        from ._config import MODEL_NAMES
        targets = ([*MODEL_NAMES, "lotka_volterra_scan"] if args.models == "all"
                   else args.models.split(","))
        args.no_eliminate = True
    else:
        targets = [int(s) for s in args.sites.split(",")]
    rows = []
    for sites in targets:
        for fw in args.frameworks.split(","):
            if fw == "effppl" and args.cache:
                with tempfile.TemporaryDirectory() as cache:
                    row = _spawn(fw, sites, args.seed, not args.no_eliminate,
                                 env={"EFFPPL_CACHE_DIR": cache})
                    second = _spawn(fw, sites, args.seed + 1, False,
                                    env={"EFFPPL_CACHE_DIR": cache})
                row["second_process_s"] = second.get("first_draw_s")
                row["second_process_cpu_s"] = second.get("first_draw_cpu_s")
                row["second_process_compilations"] = second.get("compilations")
                row["second_process_cache_hits"] = second.get("cache_hits")
            else:
                row = _spawn(fw, sites, args.seed, not args.no_eliminate,
                             env={"EFFPPL_CACHE_DIR": "0"} if fw == "effppl" else None)
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    print(render(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
