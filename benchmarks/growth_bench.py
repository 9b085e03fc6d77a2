"""Growth in the loop's length: every entry point that runs or differentiates a model, at T and
4T steps, against hand-written JAX doing the same work.

Two models with sites in a plain `lax.scan`:
- `hmm`: the README's 3-state HMM, its states an enumerated `Categorical` site (the forward
  algorithm effppl derives from the scan); hand-written: the forward algorithm.
- `local_level`: a latent random walk `x` (T latent sites) observed with noise; hand-written:
  the same log density in one `lax.scan`.

Entry points (per model where they apply): `log_density` and `potential_energy` (value and
gradient), an ELBO (`Trace_ELBO` with `AutoNormal`, `TraceEnum_ELBO` with `AutoDelta` for the
HMM: SVI's loss, value and gradient), `log_likelihood` and `Predictive` (100 posterior draws,
a call each). The differentiated ones are timed as `--evals` evaluations inside one jitted
`fori_loop` (the best of `--repeats` rounds, effppl and hand-written in turns), the others as
the best of `--repeats` calls; each against its hand-written twin: the forward algorithm, the
local level's log density, the ELBO of the same guide, the pointwise log likelihood, prior or
posterior simulation.

The goals: cost at 4T at most 5x the cost at T (linear growth, with room for timing noise), and
at most 2x the hand-written program at 4T.

Run: `python -m benchmarks.growth_bench [--json PATH]` (quick: T = 250, 10 evaluations per
timed loop, the best of 3 rounds); `--steps 500 --evals 20 --repeats 7` for the full run (one
core: `taskset -c 0`).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from numpyro.distributions.transforms import biject_to

import effppl
from effppl import distributions as dist
from effppl.handlers import log_density, potential_energy
from effppl.infer import SVI, Predictive, Trace_ELBO, TraceEnum_ELBO, log_likelihood
from effppl.infer.autoguide import AutoDelta, AutoNormal

from ._measure import _eval_loop

K = 3  # the HMM's states
DRAWS = 100  # posterior draws given to log_likelihood and Predictive


def hmm(y):
    trans = effppl.sample("trans", dist.Dirichlet(jnp.ones((K, K))).to_event(1))
    locs = effppl.sample("locs", dist.Normal(2.0 * jnp.arange(K), 1.0).to_event(1))

    def step(z_prev, y_t):
        z = effppl.sample("z", dist.Categorical(trans[z_prev]), infer={"enumerate": "parallel"})
        effppl.sample("y", dist.Normal(locs[z], 1.0), obs=y_t)
        return z, None

    jax.lax.scan(step, 0, y)


def local_level(y):
    sigma = effppl.sample("sigma", dist.HalfNormal(1.0))

    def step(x_prev, y_t):
        x = effppl.sample("x", dist.Normal(x_prev, sigma))
        effppl.sample("y", dist.Normal(x, 0.5), obs=y_t)
        return x, None

    jax.lax.scan(step, 0.0, y)


# ---- hand-written twins ---------------------------------------------------------------------

def _hmm_prior(trans, locs):
    return (jnp.sum(dist.Dirichlet(jnp.ones(K)).log_prob(trans))
            + jnp.sum(dist.Normal(2.0 * jnp.arange(K), 1.0).log_prob(locs)))


def hand_hmm_log_density(p, y):
    """The prior and the forward algorithm (z_0 from row 0 of `trans`, as the scan's init 0)."""
    trans, locs = p["trans"], p["locs"]

    def step(alpha, y_t):  # log(exp(alpha) @ trans), shifted by the max for stability
        top = jnp.max(alpha)
        alpha = jnp.log(jnp.exp(alpha - top) @ trans) + top + dist.Normal(locs, 1.0).log_prob(y_t)
        return alpha, None

    alpha0 = jnp.log(trans[0]) + dist.Normal(locs, 1.0).log_prob(y[0])
    alpha, _ = jax.lax.scan(step, alpha0, y[1:])
    return _hmm_prior(trans, locs) + logsumexp(alpha)


def hand_hmm_potential(u, y):
    t = biject_to(dist.constraints.simplex)
    trans = t(u["trans"])
    log_det = jnp.sum(t.log_abs_det_jacobian(u["trans"], trans))
    return -(hand_hmm_log_density({"trans": trans, "locs": u["locs"]}, y) + log_det)


def hand_local_level_log_density(p, y):
    """The local level's log density in one `lax.scan`, as the model is written."""
    x, sigma = p["x"], p["sigma"]

    def step(x_prev, xy):
        x_t, y_t = xy
        lp = dist.Normal(x_prev, sigma).log_prob(x_t) + dist.Normal(x_t, 0.5).log_prob(y_t)
        return x_t, lp

    return dist.HalfNormal(1.0).log_prob(sigma) + jnp.sum(jax.lax.scan(step, 0.0, (x, y))[1])


def hand_local_level_potential(u, y):
    sigma = jnp.exp(u["sigma"])
    return -(hand_local_level_log_density({"x": u["x"], "sigma": sigma}, y) + u["sigma"])


def hand_local_level_elbo(key, params, y):
    """AutoNormal's ELBO by hand: reparameterised draws, log p - log q (with the Jacobian of
    `sigma`'s exp)."""
    k_sigma, k_x = jax.random.split(key)
    u_sigma = params["sigma_auto_loc"] + params["sigma_auto_scale"] * jax.random.normal(k_sigma)
    x = params["x_auto_loc"] + params["x_auto_scale"] * jax.random.normal(
        k_x, params["x_auto_loc"].shape)
    log_q = (dist.Normal(params["sigma_auto_loc"], params["sigma_auto_scale"]).log_prob(u_sigma)
             - u_sigma
             + jnp.sum(dist.Normal(params["x_auto_loc"], params["x_auto_scale"]).log_prob(x)))
    return -(hand_local_level_log_density({"x": x, "sigma": jnp.exp(u_sigma)}, y) - log_q)


def hand_hmm_elbo(key, params, y):
    """AutoDelta's ELBO by hand: the log density at the point (a Delta guide has log q = 0)."""
    return -hand_hmm_log_density({"trans": params["trans_auto_loc"],
                                  "locs": params["locs_auto_loc"]}, y)


def hand_local_level_pointwise(draws, y):
    """The observations' log densities per draw, in a `lax.scan` over the steps as the model's
    (under `jax.vmap` over the draws)."""
    def one(x):
        def step(_, xy):
            return None, dist.Normal(xy[0], 0.5).log_prob(xy[1])
        return jax.lax.scan(step, None, (x, y))[1]
    return jax.vmap(one)(draws["x"])


def hand_local_level_predictive(key, draws, y):
    """The random walk `x` drawn from its prior given `sigma` (what `Predictive` draws), in a
    `lax.scan` as the model's, the key split at each step as `seed` splits it at each site
    (NumPyro's does too). (A vectorised twin, `cumsum` of one batch of normals, is not the same
    program: 2.7 ms at 4T here, against 14.5 ms for this one and 22.8 ms for `Predictive`.)"""
    def one(k, sigma):
        def step(carry, _):
            x_prev, k = carry
            k, k_t = jax.random.split(k)
            x = x_prev + sigma * jax.random.normal(k_t)
            return (x, k), x
        return jax.lax.scan(step, (0.0, k), None, length=y.shape[0])[1]
    return jax.vmap(one)(jax.random.split(key, draws["sigma"].shape[0]), draws["sigma"])


def hand_hmm_predictive(key, draws, y):
    """Prior simulation of the states and the observations, given `trans` and `locs`."""
    def one(k, trans, locs):
        def step(z_prev, k_t):
            k_z, k_y = jax.random.split(k_t)
            z = jax.random.categorical(k_z, jnp.log(trans[z_prev]))
            return z, (z, locs[z] + jax.random.normal(k_y))
        return jax.lax.scan(step, 0, jax.random.split(k, y.shape[0]))[1]
    keys = jax.random.split(key, draws["trans"].shape[0])
    return jax.vmap(one)(keys, draws["trans"], draws["locs"])


# ---- timing -----------------------------------------------------------------------------------

def _looped(fn, evals):
    """`evals` evaluations of `fn`'s value and gradient in one jitted `fori_loop` (the main
    benchmark's loop, `_measure._eval_loop`)."""
    return jax.jit(_eval_loop(fn, evals))


def _best(pairs, repeats):
    """Per name, the best of `repeats` rounds of `call()` (seconds), the names timed in turns."""
    best = {name: float("inf") for name in pairs}
    for call in pairs.values():
        jax.block_until_ready(call())  # compile
    for _ in range(repeats):
        for name, call in pairs.items():
            t = time.perf_counter()
            jax.block_until_ready(call())
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def _data(T, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(np.sin(np.arange(T) / 5.0) * 2 + 2 + 0.3 * rng.standard_normal(T))


def points(model_name, T):
    """`(constrained, unconstrained)` latent values of `model_name` ("hmm" or "local_level")
    at `T` steps (`tests/inference/test_loop_growth.py` compiles its programs at these)."""
    if model_name == "hmm":
        trans = jnp.full((K, K), 1.0 / K) + 0.1 * jnp.eye(K)
        con = {"trans": trans / trans.sum(-1, keepdims=True), "locs": jnp.array([0.0, 2.0, 4.0])}
        unc = {"trans": biject_to(dist.constraints.simplex).inv(con["trans"]), "locs": con["locs"]}
        return con, unc
    con = {"sigma": jnp.array(0.7), "x": jnp.sin(jnp.arange(T) / 5.0)}
    return con, {"sigma": jnp.log(con["sigma"]), "x": con["x"]}


def _entries(model_name, T, evals):
    """name -> (effppl call, hand-written call), each a thunk."""
    y = _data(T)
    model = hmm if model_name == "hmm" else local_level
    con, unc = points(model_name, T)
    hand_ld = hand_hmm_log_density if model_name == "hmm" else hand_local_level_log_density
    hand_pe = hand_hmm_potential if model_name == "hmm" else hand_local_level_potential
    out = {}
    f = _looped(lambda p, y: log_density(model, (y,), {}, p)[0], evals)
    g = _looped(hand_ld, evals)
    out["log_density"] = (lambda f=f: f(con, y), lambda g=g: g(con, y))
    f = _looped(lambda u, y: potential_energy(model, (y,), {}, u), evals)
    g = _looped(hand_pe, evals)
    out["potential_energy"] = (lambda f=f: f(unc, y), lambda g=g: g(unc, y))

    key = jax.random.PRNGKey(0)
    if model_name == "hmm":
        guide, elbo, hand_elbo = AutoDelta(hmm), TraceEnum_ELBO(), hand_hmm_elbo
    else:
        guide, elbo, hand_elbo = AutoNormal(local_level), Trace_ELBO(), hand_local_level_elbo
    svi = SVI(model, guide, effppl.optim.Adam(0.01), elbo)
    params = svi.get_params(svi.init(key, y))
    f = _looped(lambda p, y: elbo.loss(key, p, model, guide, y), evals)
    g = _looped(lambda p, y: hand_elbo(key, p, y), evals)
    out["elbo"] = (lambda f=f: f(params, y), lambda g=g: g(params, y))

    draws = jax.tree.map(lambda a: jnp.broadcast_to(a, (DRAWS, *jnp.shape(a))), con)
    if model_name == "local_level":
        hand_ll = jax.jit(hand_local_level_pointwise)
        out["log_likelihood"] = (lambda: log_likelihood(model, draws, y)["y"],
                                 lambda: hand_ll(draws, y))
        pred = Predictive(model, {"sigma": draws["sigma"]}, return_sites=["x"])
        hand_pred = jax.jit(hand_local_level_predictive)
        out["Predictive"] = (lambda: pred(key, y)["x"], lambda: hand_pred(key, draws, y))
    else:
        pred = Predictive(hmm, {"trans": draws["trans"], "locs": draws["locs"]},
                          return_sites=["z"])
        hand_pred = jax.jit(hand_hmm_predictive)
        out["Predictive"] = (lambda: pred(key, y)["z"], lambda: hand_pred(key, draws, y))
    return out


def run(steps, evals, repeats):
    rows = []
    for model_name in ("hmm", "local_level"):
        per_T = {}
        for T in (steps, 4 * steps):
            entries = _entries(model_name, T, evals)
            for name, (ours, hand) in entries.items():
                looped = name in ("log_density", "potential_energy", "elbo")
                n = evals if looped else 1
                best = _best({"effppl": ours, "hand": hand}, repeats)
                per_T[(name, T)] = {k: v / n for k, v in best.items()}
        for name in dict.fromkeys(n for n, _ in per_T):
            small, big = per_T[(name, steps)], per_T[(name, 4 * steps)]
            row = {"model": model_name, "entry_point": name, "T": steps,
                   "effppl_T_ms": 1e3 * small["effppl"], "effppl_4T_ms": 1e3 * big["effppl"],
                   "hand_T_ms": 1e3 * small["hand"], "hand_4T_ms": 1e3 * big["hand"]}
            row["growth"] = big["effppl"] / small["effppl"]
            row["vs_hand_4T"] = big["effppl"] / big["hand"]
            row["ok"] = row["growth"] <= 5.0 and row["vs_hand_4T"] <= 2.0
            rows.append(row)
            print(f"{model_name:12s} {name:17s} T={steps:5d}: {row['effppl_T_ms']:8.3f} ms  "
                  f"4T: {row['effppl_4T_ms']:8.3f} ms  growth {row['growth']:4.2f}x  "
                  f"hand {row['hand_T_ms']:8.3f} / {row['hand_4T_ms']:8.3f} ms  ratio {row['vs_hand_4T']:4.2f}x  "
                  f"{'ok' if row['ok'] else 'MISSED'}", flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or '').splitlines()[0])
    parser.add_argument("--steps", type=int, default=250, help="T (also measured at 4T)")
    parser.add_argument("--evals", type=int, default=10,
                        help="evaluations per timed loop (differentiated entry points)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the best is kept")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    rows = run(args.steps, args.evals, args.repeats)
    result = {"benchmark": "growth", "steps": args.steps, "evals": args.evals,
              "repeats": args.repeats, "jax": jax.__version__, "backend": jax.default_backend(),
              "machine": platform.machine(), "processor": platform.processor(),
              "rows": rows, "all_ok": all(r["ok"] for r in rows)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
