"""Benchmark of enumerated discrete sites inside a plain `lax.scan` (issue: discrete latents).

An HMM with Gaussian emissions, T steps and K states, written three ways:
1. effppl: the states are a `Categorical` site in a *plain* `lax.scan`, marked for enumeration;
   effppl rewrites the scan into its forward algorithm;
2. hand-written JAX: the prior plus the forward algorithm in a `lax.scan`, on the same
   unconstrained parameters (`biject_to` and its Jacobian);
3. NumPyro: the states in `numpyro.contrib.control_flow.scan`, enumerated with funsor
   (`initialize_model`'s potential, which enumerates `config_enumerate`d sites).
With `--sequences N`: a batch of N independent HMMs, the states and observations in a plate
"sequences" inside the scan body (one forward message per sequence).

Per framework, in one process: trace + lower time (effppl: tracing, effect elimination and the
scan rewrite; NumPyro: tracing and funsor; the median of `--lower-rounds` rounds in turns after a
warm-up round, whose times, which depend on which framework the process traces first, are
recorded as `trace_lower_first_s`), XLA compile time, and the time of one jitted potential
energy + gradient evaluation (best of `--repeats` rounds, the three frameworks timed in turns in
each round, of a loop of `--evals` evaluations inside one jitted `fori_loop`; the median round is
recorded too), plus that the three potentials agree at one point.

Run: `python -m benchmarks.enum_bench [--steps 1000] [--states 3 5 10] [--sequences N]
[--json PATH]`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from numpyro.distributions.transforms import biject_to

import effppl
from effppl import distributions as dist
from effppl.handlers import potential_energy


def _sequences(y, plate):
    """A plate over the sequences when `y` is `(T, N)` (a batch of N independent HMMs, inside
    the scan body at dim -1); nothing for one sequence `(T,)`."""
    return plate("sequences", y.shape[1], dim=-1) if y.ndim == 2 else contextlib.nullcontext()


def _init_state(y):
    return jnp.zeros(y.shape[1:], int)


def effppl_hmm(y, num_states):
    trans = effppl.sample("trans", dist.Dirichlet(jnp.ones((num_states, num_states))).to_event(1))
    locs = effppl.sample("locs", dist.Normal(jnp.arange(num_states) * 2.0, 1.0).to_event(1))

    def step(z_prev, y_t):
        with _sequences(y, effppl.plate):
            z = effppl.sample("z", dist.Categorical(trans[z_prev]),
                              infer={"enumerate": "parallel"})
            effppl.sample("y", dist.Normal(locs[z], 1.0), obs=y_t)
        return z, None

    jax.lax.scan(step, _init_state(y), y)


def numpyro_hmm(y, num_states):
    import numpyro
    from numpyro.contrib.control_flow import scan

    trans = numpyro.sample("trans", dist.Dirichlet(jnp.ones((num_states, num_states))).to_event(1))
    locs = numpyro.sample("locs", dist.Normal(jnp.arange(num_states) * 2.0, 1.0).to_event(1))

    def step(z_prev, y_t):
        with _sequences(y, numpyro.plate):
            z = numpyro.sample("z", dist.Categorical(trans[z_prev]),
                               infer={"enumerate": "parallel"})
            numpyro.sample("y", dist.Normal(locs[z], 1.0), obs=y_t)
        return z, None

    scan(step, _init_state(y), y)


def handwritten_potential(params, y, num_states):
    """Minus the log density in unconstrained space, with the forward algorithm by hand (one
    message per sequence)."""
    to_simplex = biject_to(dist.Dirichlet(jnp.ones(num_states)).support)
    trans = to_simplex(params["trans"])
    log_det = jnp.sum(to_simplex.log_abs_det_jacobian(params["trans"], trans))
    locs = params["locs"]
    prior = (jnp.sum(dist.Dirichlet(jnp.ones((num_states, num_states))).log_prob(trans))
             + jnp.sum(dist.Normal(jnp.arange(num_states) * 2.0, 1.0).log_prob(locs)))
    log_trans = jnp.log(trans)
    y = y.reshape(y.shape[0], -1)  # (T, N)

    def emit(y_t):
        return dist.Normal(locs, 1.0).log_prob(y_t[:, None])  # (N, K)

    def step(alpha, y_t):
        alpha = logsumexp(alpha[:, :, None] + log_trans, axis=1)
        return alpha + emit(y_t), None

    alpha0 = log_trans[0] + emit(y[0])
    alpha, _ = jax.lax.scan(step, alpha0, y[1:])
    return -(prior + log_det + jnp.sum(logsumexp(alpha, axis=-1)))


def simulate(num_steps, num_states, seed=0, num_sequences=None):
    """`(T,)` observations of one HMM, or `(T, N)` of N independent ones."""
    rng = np.random.default_rng(seed)
    trans = rng.dirichlet(np.ones(num_states) * 0.5 + 5 * np.eye(num_states)[0], num_states)
    z, ys = np.zeros(num_sequences or 1, int), []
    for _ in range(num_steps):
        z = np.array([rng.choice(num_states, p=trans[s]) for s in z])
        ys.append(2.0 * z + rng.normal(size=z.shape))
    ys = np.asarray(ys)
    return ys if num_sequences else ys[:, 0]


def _potentials(y, num_states):
    """`{framework: potential(params, y)}`: the three potentials on the same parameters."""
    from numpyro.infer.util import initialize_model

    def ours(params, y):
        return potential_energy(effppl_hmm, (y, num_states), {}, params)

    model = functools.partial(numpyro_hmm, num_states=num_states)
    model_info = initialize_model(jax.random.PRNGKey(0), model, model_args=(y,),
                                  dynamic_args=True)

    def theirs(params, y):
        return model_info.potential_fn(y)(params)

    def hand(params, y):
        return handwritten_potential(params, y, num_states)

    return {"effppl": ours, "numpyro": theirs, "handwritten": hand}


def _lower(potential, params, y, num_evals):
    """`(lowered loop of num_evals potential+gradient evaluations, trace + lower seconds)`."""
    grad_fn = jax.value_and_grad(potential)

    def loop(params, y):
        def body(i, acc):
            shifted = jax.tree.map(lambda p: p + 1e-9 * i, params)
            value, grad = grad_fn(shifted, y)
            return acc + value + sum(jnp.sum(g) for g in jax.tree.leaves(grad))
        return jax.lax.fori_loop(0, num_evals, body, jnp.zeros(()))

    start = time.perf_counter()
    lowered = jax.jit(loop).lower(params, y)
    return lowered, time.perf_counter() - start


def run(num_steps, state_sizes, num_evals, repeats, num_sequences=None, lower_rounds=3):
    """Per K: lower the three loops `lower_rounds` times in turns after one warm-up round (the
    process's first traces, recorded apart as `trace_lower_first_s`: they depend on the order),
    compile them, then time them in turns (`repeats` rounds, each framework once per round, so
    that load from other processes hits all three alike); report the best and the median round
    per evaluation, and the median trace + lower time."""
    rows = []
    for num_states in state_sizes:
        y = jnp.asarray(simulate(num_steps, num_states, num_sequences=num_sequences))
        rng = np.random.default_rng(1)
        params = {"trans": jnp.asarray(rng.normal(size=(num_states, num_states - 1)) * 0.3),
                  "locs": jnp.asarray(np.arange(num_states) * 2.0 + rng.normal(size=num_states))}
        row = {"T": num_steps, "K": num_states, "N": num_sequences or 1}
        potentials = _potentials(y, num_states)
        lowered, lower_s = {}, {name: [] for name in potentials}
        for _ in range(lower_rounds + 1):
            for name, potential in potentials.items():
                lowered[name], seconds = _lower(potential, params, y, num_evals)
                lower_s[name].append(seconds)
        loops = {}
        for name, potential in potentials.items():
            start = time.perf_counter()
            loops[name] = lowered[name].compile()
            compile_s = time.perf_counter() - start
            loops[name](params, y).block_until_ready()
            row[name] = {"trace_lower_s": statistics.median(lower_s[name][1:]),
                         "trace_lower_first_s": lower_s[name][0], "compile_s": compile_s,
                         "potential": float(jax.jit(potential)(params, y))}
        times = {name: [] for name in loops}
        for _ in range(repeats):
            for name, compiled in loops.items():
                start = time.perf_counter()
                compiled(params, y).block_until_ready()
                times[name].append((time.perf_counter() - start) / num_evals)
        for name in loops:
            row[name]["eval_s"] = min(times[name])
            row[name]["eval_median_s"] = statistics.median(times[name])
        hand = row["handwritten"]
        for name in ("effppl", "numpyro"):
            row[name]["eval_ratio_to_handwritten"] = row[name]["eval_s"] / hand["eval_s"]
            row[name]["potential_diff"] = abs(row[name]["potential"] - hand["potential"])
        rows.append(row)
        print(_format(row), flush=True)
    return rows


def _format(row):
    parts = [f"T={row['T']} K={row['K']} N={row['N']}:"]
    for name in ("handwritten", "effppl", "numpyro"):
        r = row[name]
        ratio = r.get("eval_ratio_to_handwritten", 1.0)
        parts.append(f"{name} eval {r['eval_s'] * 1e3:.3f} ms ({ratio:.2f}x; median "
                     f"{r['eval_median_s'] * 1e3:.3f} ms), trace+lower "
                     f"{r['trace_lower_s']:.2f} s (first {r['trace_lower_first_s']:.2f} s), "
                     f"compile {r['compile_s']:.2f} s, "
                     f"|dU|={r.get('potential_diff', 0.0):.1e}")
    return "\n  ".join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--states", type=int, nargs="+", default=[3, 5, 10])
    parser.add_argument("--evals", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--sequences", type=int, default=None)
    parser.add_argument("--lower-rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    rows = run(args.steps, args.states, args.evals, args.repeats, args.sequences,
               args.lower_rounds)
    if args.json:
        meta = {"jax": jax.__version__, "backend": jax.default_backend(),
                "device": str(jax.devices()[0]), "python": platform.python_version(),
                "evals_per_loop": args.evals, "repeats": args.repeats,
                "lower_rounds": args.lower_rounds}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
