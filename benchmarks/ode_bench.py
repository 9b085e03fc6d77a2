"""`effppl.ode.solve` against Diffrax 0.7, the paper's Figure 12 suite (§7.1), on this machine.

Both solvers run in one process, each workload jitted once per side, then timed in turns
(rounds alternate effppl and Diffrax; each round is the median of several calls; the result is
the median over rounds). Each side uses its defaults where the benchmark does not fix a value
(effppl chooses the first step by Hairer's rule; Diffrax 0.7.2 starts ODEs at `dt0 = 0.01`).

* (a) reaction-diffusion: Gray-Scott on an N x N periodic grid (Tsit5, rtol = atol = 1e-4,
  t in [0, 200]), sweeping N; the final state only.
* (b) neural ODE: a 4-32-4 MLP vector field (softplus, tanh) on a batch of 1024 states
  (Dopri5, rtol = atol = 1e-6), sweeping the integration length.
* (c) the jump-step SDE is not run: `effppl.ode` solves ODEs only (no Brownian paths, SDE
  solvers or step clipping to jump times).
* (d) Lotka-Volterra work-precision (Tsit5, the tolerances of Diffrax's own benchmark, error of
  y(10) against scipy's DOP853 at 1e-12), solve time and gradient time (reverse mode with each
  side's checkpointing, `jax.grad` of the final state's sum with respect to the 4 parameters).
* compile time: Diffrax's compile-time benchmark (a vector field written as Python scalar
  arithmetic, to make a large jaxpr; Tsit5 here, rtol 1e-3, atol 1e-6, dt0 0.01, 256 steps):
  the first call of the jitted solve, and of its jitted gradient (not in `--quick`).
* lines of code of the integration loop (`benchmarks.ode_loc`).
* the posteriordb Lotka-Volterra model (`models.lotka_volterra`, Stan's solver settings) under
  NUTS, effppl against NumPyro + Diffrax: time to draws, first and second run (not in `--quick`).

Run: `python -m benchmarks.ode_bench [--quick] [--out benchmarks/results/ode_cpu]`, writing
`<out>.json` and `<out>.png`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from effppl import ode

from . import ode_loc

jax.config.update("jax_enable_x64", True)


# --------------------------------------------------------------------------------------------
# Timing


def _call_time(fn, args, calls):
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def side_by_side(ours, theirs, args, rounds, calls):
    """Median seconds per call of each, timed in alternating rounds after a warm-up call."""
    jax.block_until_ready(ours(*args))
    jax.block_until_ready(theirs(*args))
    a, b = [], []
    for _ in range(rounds):
        a.append(_call_time(ours, args, calls))
        b.append(_call_time(theirs, args, calls))
    return statistics.median(a), statistics.median(b)


def _record(name, x, t_ours, t_theirs, steps_ours, steps_theirs, **extra):
    return dict(workload=name, x=x, effppl_s=t_ours, diffrax_s=t_theirs,
                ratio=t_ours / t_theirs, effppl_steps=int(steps_ours),
                diffrax_steps=int(steps_theirs), **extra)


def diffrax_solve(f, y0, t1, args, solver, rtol, atol, dt0=None, ts=None, max_steps=4096):
    import diffrax
    saveat = diffrax.SaveAt(ts=ts) if ts is not None else diffrax.SaveAt(t1=True)
    return diffrax.diffeqsolve(diffrax.ODETerm(f), solver(), 0.0, t1, dt0, y0, args=args,
                               saveat=saveat, max_steps=max_steps,
                               stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol))


# --------------------------------------------------------------------------------------------
# (a) reaction-diffusion


def gray_scott(t, y, args):
    u, v = y
    du, dv, feed, kill = args
    n = u.shape[0]

    def laplacian(x):
        return n * n * (jnp.roll(x, 1, 0) + jnp.roll(x, -1, 0) + jnp.roll(x, 1, 1)
                        + jnp.roll(x, -1, 1) - 4 * x)

    uvv = u * v * v
    return (du * laplacian(u) - uvv + feed * (1 - u), dv * laplacian(v) + uvv - (feed + kill) * v)


def gray_scott_init(n):
    rng = np.random.default_rng(0)
    u, v = np.ones((n, n)), np.zeros((n, n))
    s = slice(n // 2 - n // 8, n // 2 + n // 8)
    u[s, s], v[s, s] = 0.5, 0.25
    return (jnp.asarray(u + 0.01 * rng.normal(size=u.shape)),
            jnp.asarray(v + 0.01 * rng.normal(size=v.shape)))


def bench_reaction_diffusion(sizes, rounds, calls, t1=200.0):
    import diffrax
    args = jnp.array([2e-5, 1e-5, 0.04, 0.06])
    out = []
    for n in sizes:
        y0 = gray_scott_init(n)

        @jax.jit
        def ours(y0, args):
            sol = ode.solve(gray_scott, y0, 0.0, t1, args=args, rtol=1e-4, atol=1e-4)
            return sol.ys, sol.stats["num_steps"]

        @jax.jit
        def theirs(y0, args):
            sol = diffrax_solve(gray_scott, y0, t1, args, diffrax.Tsit5, 1e-4, 1e-4)
            return sol.ys, sol.stats["num_steps"]

        t_ours, t_theirs = side_by_side(ours, theirs, (y0, args), rounds,
                                        max(3, calls * 16 // n))
        (yo, so), (yt, st) = ours(y0, args), theirs(y0, args)
        diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(yo, yt))
        out.append(_record("reaction_diffusion", n, t_ours, t_theirs, so, st, max_abs_diff=diff))
        print(f"(a) N={n:4d}: effppl {t_ours * 1e3:8.2f} ms  diffrax {t_theirs * 1e3:8.2f} ms  "
              f"ratio {t_ours / t_theirs:.2f}  steps {int(so)} / {int(st)}", flush=True)
    return out


# --------------------------------------------------------------------------------------------
# (b) neural ODE


def mlp_params(key=0):
    k1, k2 = jax.random.split(jax.random.key(key))
    return (jax.random.normal(k1, (4, 32)) / 2.0, jnp.zeros(32),
            jax.random.normal(k2, (32, 4)) / np.sqrt(32), jnp.zeros(4))


def neural_field(t, y, params):
    w1, b1, w2, b2 = params
    return jnp.tanh(jax.nn.softplus(y @ w1 + b1) @ w2 + b2)


def bench_neural_ode(lengths, rounds, calls):
    import diffrax
    params = mlp_params()
    y0 = jax.random.normal(jax.random.key(1), (1024, 4))
    out = []
    for t1 in lengths:
        @jax.jit
        def ours(y0, params):
            sol = ode.solve(neural_field, y0, 0.0, t1, args=params, solver="dopri5", rtol=1e-6,
                            atol=1e-6)
            return sol.ys, sol.stats["num_steps"]

        @jax.jit
        def theirs(y0, params):
            sol = diffrax_solve(neural_field, y0, t1, params, diffrax.Dopri5, 1e-6, 1e-6)
            return sol.ys, sol.stats["num_steps"]

        t_ours, t_theirs = side_by_side(ours, theirs, (y0, params), rounds, calls)
        (yo, so), (yt, st) = ours(y0, params), theirs(y0, params)
        out.append(_record("neural_ode", t1, t_ours, t_theirs, so, st,
                           max_abs_diff=float(jnp.max(jnp.abs(yo - yt)))))
        print(f"(b) t1={t1:5.1f}: effppl {t_ours * 1e3:8.2f} ms  diffrax {t_theirs * 1e3:8.2f} ms"
              f"  ratio {t_ours / t_theirs:.2f}  steps {int(so)} / {int(st)}", flush=True)
    return out


# --------------------------------------------------------------------------------------------
# (d) Lotka-Volterra work-precision, and its gradient


def lotka_volterra(t, y, args):
    a, b, c, d = args
    return jnp.stack([a * y[0] + b * y[0] * y[1], c * y[1] + d * y[0] * y[1]])


LV_ARGS = np.array([1.5, -1.0, -3.0, 1.0])
LV_Y0 = np.array([1.0, 1.0])


def lv_reference():
    from scipy.integrate import solve_ivp
    a, b, c, d = LV_ARGS
    sol = solve_ivp(lambda t, y: [a * y[0] + b * y[0] * y[1], c * y[1] + d * y[0] * y[1]],
                    (0.0, 10.0), LV_Y0, method="DOP853", rtol=1e-12, atol=1e-12)
    return sol.y[:, -1]


def bench_lotka_volterra(tolerances, rounds, calls):
    import diffrax
    ref = lv_reference()
    y0, args = jnp.asarray(LV_Y0), jnp.asarray(LV_ARGS)

    @jax.jit
    def ours(y0, args, rtol, atol):
        sol = ode.solve(lotka_volterra, y0, 0.0, 10.0, args=args, rtol=rtol, atol=atol)
        return sol.ys, sol.stats["num_steps"]

    @jax.jit
    def theirs(y0, args, rtol, atol):
        sol = diffrax_solve(lotka_volterra, y0, 10.0, args, diffrax.Tsit5, rtol, atol)
        return sol.ys, sol.stats["num_steps"]

    grad_ours = jax.jit(jax.grad(lambda a, y0, r, t: jnp.sum(ours(y0, a, r, t)[0])))
    grad_theirs = jax.jit(jax.grad(lambda a, y0, r, t: jnp.sum(theirs(y0, a, r, t)[0])))
    out = []
    for rtol, atol in tolerances:
        x = (y0, args, rtol, atol)
        t_ours, t_theirs = side_by_side(ours, theirs, x, rounds, calls)
        g_ours, g_theirs = side_by_side(grad_ours, grad_theirs, (args, y0, rtol, atol), rounds,
                                        max(calls // 2, 3))
        (yo, so), (yt, st) = ours(*x), theirs(*x)
        err_o = float(np.linalg.norm(np.asarray(yo[0]) - ref))
        err_t = float(np.linalg.norm(np.asarray(yt[0]) - ref))
        grad_diff = float(jnp.max(jnp.abs(grad_ours(args, y0, rtol, atol)
                                          - grad_theirs(args, y0, rtol, atol))))
        out.append(_record("lotka_volterra", rtol, t_ours, t_theirs, so, st, atol=atol,
                           effppl_error=err_o, diffrax_error=err_t, effppl_grad_s=g_ours,
                           diffrax_grad_s=g_theirs, grad_ratio=g_ours / g_theirs,
                           grad_max_abs_diff=grad_diff))
        print(f"(d) rtol={rtol:.0e}: solve {t_ours * 1e6:8.1f} / {t_theirs * 1e6:8.1f} us "
              f"({t_ours / t_theirs:.2f})  grad {g_ours * 1e6:8.1f} / {g_theirs * 1e6:8.1f} us "
              f"({g_ours / g_theirs:.2f})  steps {int(so)} / {int(st)}  "
              f"error {err_o:.1e} / {err_t:.1e}", flush=True)
    return out


# --------------------------------------------------------------------------------------------
# Compile time


def scalar_field(key=0, width=16, depth=2):
    """Diffrax's compile-time benchmark's vector field: an MLP as Python scalar arithmetic (a
    large jaxpr on purpose)."""
    keys = jax.random.split(jax.random.key(key), depth + 1)
    shapes = [(width, 1)] + [(width, width)] * (depth - 1) + [(1, width)]
    weights = [np.asarray(jax.random.normal(k, s)).tolist() for k, s in zip(keys, shapes)]

    def field(t, y, args):
        ys = [y[i] for i in range(y.shape[0])]
        for w in weights:
            ys = [sum(w_ij * y_j for w_ij, y_j in zip(w_i, ys)) for w_i in w]
        return jnp.stack(ys)

    return field


def bench_compile(repeats, grads=(False, True)):
    import diffrax
    y0 = jnp.array([1.0])
    out = []
    for grad in grads:
        t_ours, t_theirs = [], []
        for r in range(repeats):  # the sides' order alternates between rounds
            for side in ("effppl", "diffrax")[::1 if r % 2 == 0 else -1]:
                field = scalar_field()  # a new function: no cache hit

                def solve(y0, side=side, field=field):
                    if side == "effppl":
                        ys = ode.solve(field, y0, 0.0, 1.0, rtol=1e-3, atol=1e-6, dt0=0.01,
                                       max_steps=256).ys
                    else:
                        ys = diffrax_solve(field, y0, 1.0, None, diffrax.Tsit5, 1e-3, 1e-6,
                                           dt0=0.01, max_steps=256).ys
                    return jnp.sum(ys)

                fn = jax.jit(jax.grad(solve) if grad else solve)
                t = time.perf_counter()
                jax.block_until_ready(fn(y0))
                (t_ours if side == "effppl" else t_theirs).append(time.perf_counter() - t)
        a, b = statistics.median(t_ours), statistics.median(t_theirs)
        out.append(dict(workload="compile", x="forward+gradient" if grad else "forward",
                        effppl_s=a, diffrax_s=b, ratio=a / b))
        print(f"compile {'fwd+grad' if grad else 'forward '}: effppl {a:.2f} s  diffrax {b:.2f} s"
              f"  ratio {a / b:.2f}", flush=True)
    return out


# --------------------------------------------------------------------------------------------
# The posteriordb Lotka-Volterra model under NUTS: effppl + effppl.ode vs NumPyro + Diffrax


def bench_posterior(num_warmup, num_samples, num_chains):
    """Time to draws (`run` of the first call, compiling included, then a second call with the
    same shapes) of the ODE model `models.lotka_volterra` under each framework's NUTS, both
    started at `init_to_median` (NumPyro's default, uniform(-2, 2) in the unconstrained space,
    can start where Diffrax's solve fails, and NumPyro then stops at initialisation with a
    `ValueError`: it did so here on seed 1; effppl retries such a point)."""
    import pathlib

    import arviz as az
    import numpyro

    from effppl.infer import MCMC, NUTS, init_to_median
    from models import lotka_volterra as lv

    folder = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "posteriordb" \
        / "hudson_lynx_hare-lotka_volterra"
    data = tuple(jnp.asarray(x) for x in lv.load(folder))
    out = {}
    for side in ("effppl", "numpyro"):
        times, means = [], None
        for seed in (0, 1):
            if side == "effppl":
                mcmc = MCMC(NUTS(lv.effppl_model, init_strategy=init_to_median),
                            num_warmup=num_warmup,
                            num_samples=num_samples, num_chains=num_chains, progress_bar=False)
                key = jax.random.key(seed)
            else:
                mcmc = numpyro.infer.MCMC(
                    numpyro.infer.NUTS(lv.numpyro_model,
                                       init_strategy=numpyro.infer.init_to_median),
                    num_warmup=num_warmup,
                    num_samples=num_samples, num_chains=num_chains, progress_bar=False,
                    chain_method="vectorized")
                key = jax.random.PRNGKey(seed)
            t = time.perf_counter()
            mcmc.run(key, *data)
            samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
            times.append(time.perf_counter() - t)
            kept = {k: np.asarray(v) for k, v in samples.items()
                    if k in ("theta", "z_init", "sigma")}
            means = {k: v.mean((0, 1)).tolist() for k, v in kept.items()}
            ess = float(min(float(v.min()) for v in  # min bulk ESS over scalars (arviz)
                            az.ess(az.convert_to_dataset(kept)).data_vars.values()))
            divergences = int(np.sum(np.asarray(mcmc.get_extra_fields()["diverging"])))
        out[side] = dict(first_run_s=times[0], second_run_s=times[1], means=means,
                         min_bulk_ess=ess, divergences=divergences,
                         ess_per_s_second_run=ess / times[1])
        print(f"posteriordb lotka_volterra, {side}: first run {times[0]:.1f} s, second "
              f"{times[1]:.1f} s, min bulk ESS {ess:.0f} (second run), {divergences} "
              f"divergences", flush=True)
    return dict(workload="posterior", num_warmup=num_warmup, num_samples=num_samples,
                num_chains=num_chains, **out,
                ratio_first=out["effppl"]["first_run_s"] / out["numpyro"]["first_run_s"],
                ratio_second=out["effppl"]["second_run_s"] / out["numpyro"]["second_run_s"],
                ratio_ess_per_s=(out["effppl"]["ess_per_s_second_run"]
                                 / out["numpyro"]["ess_per_s_second_run"]))


# --------------------------------------------------------------------------------------------


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    by = lambda w: [r for r in results if r["workload"] == w and "x" in r]  # noqa: E731
    for ax, w, xlabel in ((axes[0, 0], "reaction_diffusion", "grid size N"),
                          (axes[0, 1], "neural_ode", "integration length t1")):
        rs = by(w)
        ax.plot([r["x"] for r in rs], [r["effppl_s"] * 1e3 for r in rs], "o-", label="effppl")
        ax.plot([r["x"] for r in rs], [r["diffrax_s"] * 1e3 for r in rs], "s--", label="Diffrax")
        ax.set(xlabel=xlabel, ylabel="solve time (ms)", title=w.replace("_", " "))
        ax.legend()
    ax, rs = axes[1, 0], by("lotka_volterra")
    ax.loglog([r["effppl_error"] for r in rs], [r["effppl_s"] * 1e6 for r in rs], "o-",
              label="effppl solve")
    ax.loglog([r["diffrax_error"] for r in rs], [r["diffrax_s"] * 1e6 for r in rs], "s--",
              label="Diffrax solve")
    ax.loglog([r["effppl_error"] for r in rs], [r["effppl_grad_s"] * 1e6 for r in rs], "o-",
              label="effppl gradient")
    ax.loglog([r["diffrax_error"] for r in rs], [r["diffrax_grad_s"] * 1e6 for r in rs], "s--",
              label="Diffrax gradient")
    ax.set(xlabel="error at t = 10", ylabel="time (us)", title="Lotka-Volterra work-precision")
    ax.legend(fontsize=8)
    ax, rs = axes[1, 1], by("compile")
    x = np.arange(len(rs))
    ax.bar(x - 0.2, [r["effppl_s"] for r in rs], 0.4, label="effppl")
    ax.bar(x + 0.2, [r["diffrax_s"] for r in rs], 0.4, label="Diffrax")
    ax.set_xticks(x, [r["x"] for r in rs])
    ax.set(ylabel="first call (s)", title="compile time")
    ax.legend()
    fig.suptitle(f"effppl.ode vs Diffrax, {platform.machine()} CPU, float64")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sweeps (< 1 minute)")
    parser.add_argument("--out", default=None, help="path without extension for .json/.png")
    opts = parser.parse_args(argv)
    quick = opts.quick
    out = opts.out or ("benchmarks/results/ode_cpu_quick" if quick else "benchmarks/results/ode_cpu")
    rounds, calls = (3, 5) if quick else (7, 15)
    tolerances = [(10.0 ** -k, 10.0 ** -(k + 3)) for k in ((4, 7) if quick else range(3, 11))]
    start = time.perf_counter()
    results = (bench_reaction_diffusion((16, 32) if quick else (16, 32, 64, 128), rounds, calls)
               + bench_neural_ode((2.0, 8.0) if quick else (2.0, 4.0, 8.0, 16.0), rounds, calls)
               + bench_lotka_volterra(tolerances, rounds, calls * 4)
               + bench_compile(1 if quick else 3, (False,) if quick else (False, True)))
    loc = ode_loc.counts()
    print(f"loop lines of code: effppl {loc['effppl']} / Diffrax {loc['diffrax']} "
          f"({loc['effppl'] / loc['diffrax'] - 1:+.0%})")
    save(out, quick, start, results, loc)
    if not quick:  # (the sweeps are saved first: the posterior runs take longest)
        results.append(bench_posterior(500, 500, 2))
        save(out, quick, start, results, loc)


def save(out, quick, start, results, loc):
    import diffrax
    payload = dict(schema="effppl-ode-bench/1", quick=quick, machine=platform.machine(),
                   processor=platform.processor(), jax=jax.__version__,
                   diffrax=diffrax.__version__, seconds=time.perf_counter() - start,
                   results=results, lines_of_code=loc)
    with open(out + ".json", "w") as fh:
        json.dump(payload, fh, indent=1)
    plot(results, out + ".png")
    print(f"wrote {out}.json and {out}.png ({payload['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
