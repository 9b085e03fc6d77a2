"""More than one device: data rows and chains sharded with `effppl.distributed`, on CPU devices.

Two models, data sharded along the plate over rows (`effppl.distributed.shard` on a mesh
`make_mesh(chain=1, data=D)`):

- `logistic`: logistic regression, 10 covariates;
- `hier`: a hierarchical linear regression, 50 groups (group intercepts outside the data plate,
  indexed by each row's group), 10 covariates.

For each layout (1, 2, 4 forced CPU devices in one process; 2 processes x 2 devices joined by
`effppl.distributed.initialize` on 127.0.0.1, gloo), each model and each N:

- `grad_ms`: milliseconds per evaluation of the potential and its gradient (`jax.jit(
  jax.value_and_grad(potential_energy))` on the sharded data, best of 3 means of 10 calls);
- `collectives`: all-reduce / all-gather / ... counted in the compiled HLO of that program;
- `mem_mb`: per-device bytes of the program (arguments + outputs + temporaries), from XLA's
  `memory_analysis()` (CPU devices report no allocator peak; this is what XLA plans per device);
- and, per layout, `chain_draws_per_s`: NUTS `chain_method="sharded"`, 8 chains on
  `make_mesh(chain=D)` (logistic regression, 1,000 rows), transitions of all chains per second of
  a second run (compilation excluded).

What CPU devices can show: that sharded programs partition as intended (the collectives counted
in HLO, per-device memory falling as 1/D), that draws match (the tests), and how the work splits
over cores. What they cannot: speed-ups. Forced host devices share the machine's cores (2 here,
shared with other work), and the "2 processes" layout talks over loopback gloo: times measure the
overhead of partitioning, not what a multi-GPU or multi-host machine gains. On a machine with
several GPUs the same command (`python -m benchmarks.scale_bench --gpu`) uses the real devices.

Usage: `python -m benchmarks.scale_bench [--quick] [--sizes 100000,1000000]
[--layouts 1,2,4,2x2] [--json PATH]`. `--quick`: N = 10^4 and 10^5, short chains (a few minutes
on 2 cores). Without it, N = 10^5, 10^6, 10^7 (needs ~4 GiB of host memory at 10^7).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")
D_COV, GROUPS = 10, 50


def _models():
    import jax.numpy as jnp

    import effppl
    from effppl import distributions as dist

    def logistic(x, y):
        w = effppl.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
        b = effppl.sample("b", dist.Normal(0.0, 1.0))
        with effppl.plate("n", x.shape[0]):
            effppl.sample("y", dist.Bernoulli(logits=x @ w + b), obs=y)

    def hier(x, g, y):
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
        tau = effppl.sample("tau", dist.HalfNormal(1.0))
        with effppl.plate("groups", GROUPS):
            a = effppl.sample("a", dist.Normal(mu, tau))
        w = effppl.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
        sigma = effppl.sample("sigma", dist.HalfNormal(1.0))
        with effppl.plate("n", x.shape[0]):
            effppl.sample("y", dist.Normal(a[g] + x @ w, sigma), obs=y)

    params = {
        "logistic": lambda: {"w": jnp.zeros(D_COV), "b": jnp.zeros(())},
        "hier": lambda: {"mu": jnp.zeros(()), "tau": jnp.zeros(()), "a": jnp.zeros(GROUPS),
                         "w": jnp.zeros(D_COV), "sigma": jnp.zeros(())},
    }
    return {"logistic": logistic, "hier": hier}, params


def _data(name, n, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D_COV)).astype(np.float32)
    w = np.linspace(-1.0, 1.0, D_COV).astype(np.float32)
    if name == "logistic":
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(x @ w)))).astype(np.float32)
        return (x, y)
    g = rng.integers(0, GROUPS, size=n).astype(np.int32)
    y = (rng.normal(size=GROUPS)[g] + x @ w + rng.normal(size=n)).astype(np.float32)
    return (x, g, y)


def _count(text):
    return {c: len(re.findall(rf"\b{c}(-start)?\(", text)) for c in COLLECTIVES}


def _worker(args) -> dict:
    if args.coordinator:
        import effppl.distributed as ed

        ed.initialize(args.coordinator, args.num_processes, args.process_id,
                      heartbeat_timeout_seconds=60)
    import jax
    import numpy as np

    import effppl.distributed as ed
    from effppl.handlers import potential_energy
    from effppl.infer import MCMC, NUTS

    models, params = _models()
    mesh = ed.make_mesh(chain=1, data=jax.device_count())
    out = {"devices": jax.device_count(), "processes": jax.process_count(),
           "platform": jax.devices()[0].platform, "grad": []}
    for name in args.models:
        model = models[name]
        for n in args.sizes:
            whole = _data(name, n)
            rows = ed.process_rows(n, mesh)
            data = tuple(ed.shard(a[rows], mesh) for a in whole)
            p = ed.replicate(params[name](), mesh)
            fn = jax.jit(jax.value_and_grad(
                lambda p, *d, model=model: potential_energy(model, d, {}, p)))
            compiled = fn.lower(p, *data).compile()
            mem = compiled.memory_analysis()
            mem_mb = None if mem is None else round(
                (mem.argument_size_in_bytes + mem.output_size_in_bytes
                 + mem.temp_size_in_bytes) / 2**20, 2)
            jax.block_until_ready(compiled(p, *data))
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                for _ in range(10):
                    v = compiled(p, *data)
                jax.block_until_ready(v)
                best = min(best, (time.perf_counter() - t) / 10)
            out["grad"].append({"model": name, "n": n, "grad_ms": round(best * 1e3, 3),
                                "collectives": _count(compiled.as_text()), "mem_mb": mem_mb,
                                "value": float(v[0])})
            del data, whole
    small = _data("logistic", 1000)
    chain_mesh = ed.make_mesh(chain=jax.device_count())
    mcmc = MCMC(NUTS(models["logistic"]), num_warmup=args.steps, num_samples=args.steps,
                num_chains=8, chain_method="sharded", mesh=chain_mesh, progress_bar=False)
    mcmc.run(jax.random.key(0), *small)
    t = time.perf_counter()
    mcmc.run(jax.random.key(1), *small)
    seconds = time.perf_counter() - t
    out["chain_draws_per_s"] = round(8 * 2 * args.steps / seconds, 1)
    out["chain_mean_w0"] = float(np.mean(mcmc.get_samples()["w"][:, 0]))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(layout: str, argv: list, gpu: bool, timeout: float) -> dict:
    """Run the worker for `layout` ("D": one process of D devices; "PxD": P processes; "all":
    one process, the machine's own devices)."""
    if layout == "all":
        procs, devices = 1, 0
    else:
        procs, devices = (1, int(layout)) if "x" not in layout else map(int, layout.split("x"))
    env = dict(os.environ)
    if not gpu and devices:
        env.update(JAX_PLATFORMS="cpu",
                   XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    cmd = [sys.executable, "-m", "benchmarks.scale_bench", "--worker", *argv]
    if procs > 1:
        address = f"127.0.0.1:{_free_port()}"
        cmd += ["--coordinator", address, "--num-processes", str(procs)]
    running = [subprocess.Popen(cmd + (["--process-id", str(i)] if procs > 1 else []), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(procs)]
    results = []
    try:
        for p in running:
            stdout, stderr = p.communicate(timeout=timeout)
            lines = [s for s in stdout.splitlines() if s.startswith("RESULT")]
            if p.returncode != 0 or not lines:
                raise RuntimeError(f"layout {layout}: worker failed:\n{stderr[-3000:]}")
            results.append(json.loads(lines[-1][len("RESULT"):]))
    finally:
        for p in running:
            if p.poll() is None:
                p.kill()
                p.wait()
    return {"layout": layout, **results[0]}


def _table(runs) -> str:
    lines = ["| layout | model | N | grad ms | collectives in HLO | MB per device |",
             "| --- | --- | ---: | ---: | --- | ---: |"]
    for r in runs:
        for g in r["grad"]:
            coll = ", ".join(f"{v} {k}" for k, v in g["collectives"].items() if v) or "none"
            lines.append(f"| {r['layout']} | {g['model']} | {g['n']:,} | {g['grad_ms']} | {coll} "
                         f"| {g['mem_mb']} |")
    lines += ["", "| layout | NUTS chain transitions/s (8 chains, sharded) |", "| --- | ---: |"]
    lines += [f"| {r['layout']} | {r['chain_draws_per_s']} |" for r in runs]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale_bench")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", type=lambda s: [int(float(v)) for v in s.split(",")])
    parser.add_argument("--models", type=lambda s: s.split(","), default=["logistic", "hier"])
    parser.add_argument("--layouts", type=lambda s: s.split(","))
    parser.add_argument("--steps", type=int)
    parser.add_argument("--gpu", action="store_true", help="use the real devices (no forcing)")
    parser.add_argument("--json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.sizes = args.sizes or ([10**4, 10**5] if args.quick else [10**5, 10**6, 10**7])
    args.steps = args.steps or (50 if args.quick else 500)
    if args.worker:
        print("RESULT" + json.dumps(_worker(args)), flush=True)
        return
    layouts = args.layouts or (["1", "2", "4", "2x2"] if not args.gpu else ["all"])
    forward = ["--sizes", ",".join(map(str, args.sizes)), "--models", ",".join(args.models),
               "--steps", str(args.steps)]
    runs = []
    for layout in layouts:
        runs.append(_launch(layout, forward, args.gpu, timeout=3600))
        print(f"layout {layout}: done", file=sys.stderr, flush=True)
    print(_table(runs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"quick": args.quick, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
