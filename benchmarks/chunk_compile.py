"""XLA compile time of the sampler's program alone: effppl's chunk against NumPyro's sampling loop.

Both programs are captured as `MCMC.run` would compile them (effppl: `Sampler.chunk`'s jitted
function at its first call; NumPyro: `fori_collect`'s jitted loop, `progress_bar=False`), then
lowered and `compile()`d alternately in this process (compile only timed, CPU s; best and all
times reported), on the
Python-loop model of `benchmarks.compile_bench` (`model_for`, `data`, `groups_for`).

Each result also gives the optimised program's number of fusions, its largest fusion and the
most reductions one fusion holds (`fusion_stats`).

Usage: `python -m benchmarks.chunk_compile --sites 200 [--repeat 2] [--frameworks effppl,numpyro]
[--points 1] [--dump DIR] [--json PATH]` (`--points`: observations per group, 1 leaves no plate
reduction in the potential; `--dump`: write each program's optimised HLO text; `--json`: append
the result as one JSON line).
"""

from __future__ import annotations

import argparse
import json
import os
import time


class _Captured(Exception):
    def __init__(self, jitted, args):
        super().__init__("captured")
        self.program = (jitted, args)


def _captured(framework: str, sites: int, seed: int, owner, attr: str, wrap):
    """Run `framework`'s `MCMC` on the benchmark model with `owner.attr` replaced by
    `wrap(original)`, which raises `_Captured` with the sampling program and its arguments;
    return `(jitted function, arguments)`."""
    import jax
    import jax.numpy as jnp

    from .compile_bench import _namespace, data, groups_for, model_for

    p = _namespace(framework)
    y = jnp.asarray(data(groups_for(sites), seed))
    original = getattr(owner, attr)
    setattr(owner, attr, wrap(original))
    try:
        mcmc = p.MCMC(p.NUTS(model_for(p)), num_warmup=100, num_samples=100, num_chains=1,
                      progress_bar=False)
        mcmc.run(jax.random.PRNGKey(seed), y)
    except _Captured as c:
        return c.program
    finally:
        setattr(owner, attr, original)
    raise RuntimeError(f"{framework}'s sampling program was not called")


def _raising(jitted):
    def capture(*args):
        raise _Captured(jitted, args)
    return capture


def effppl_program(sites: int, seed: int = 0):
    """effppl's sampler chunk: `(jitted function, arguments)`, as its `MCMC.run` calls it."""
    from effppl.infer.mcmc import _sampler

    def wrap(original):
        return lambda self, length: _raising(original(self, length).__wrapped__)
    return _captured("effppl", sites, seed, _sampler.Sampler, "chunk", wrap)


def numpyro_program(sites: int, seed: int = 0):
    """NumPyro's sampling program (`fori_collect`'s loop): `(jitted function, arguments)`, as
    its `MCMC.run` calls it."""
    import numpyro.util

    def wrap(original):
        def maybe_jit(fn, *args, **kwargs):
            jitted = original(fn, *args, **kwargs)
            if getattr(fn, "__name__", "") != "_fori_collect_loop":
                return jitted
            return _raising(jitted)
        return maybe_jit
    return _captured("numpyro", sites, seed, numpyro.util, "maybe_jit", wrap)


def fusion_stats(hlo: str) -> dict:
    """The optimised program's largest fusion (instructions) and the most reductions any fusion
    holds. XLA's CPU fusion pass counts the reductions of the consumer fusion, over all its
    instructions, each time it considers fusing one more reduction into it, and forbids more
    than 6; a reduction with a single user is considered again after every fusion into that
    consumer, so a large fusion holding 6 reductions, with many more as operands, costs time
    that grows with the product of the three."""
    sizes, reduces, current = {}, {}, None
    for line in hlo.splitlines():
        if line.startswith("%fused") and line.endswith("{"):
            current = line.split()[0]
            sizes[current], reduces[current] = 0, 0
        elif line.startswith("}"):
            current = None
        elif current is not None:
            sizes[current] += 1
            reduces[current] += " reduce(" in line
    if not sizes:
        return {}
    return {"fusions": len(sizes), "largest_fusion": max(sizes.values()),
            "max_reductions_in_a_fusion": max(reduces.values())}


def main(argv=None):
    os.environ.setdefault("EFFPPL_CACHE_DIR", "0")  # effppl's compilations in this process too
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chunk_compile")
    parser.add_argument("--sites", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--frameworks", default="effppl,numpyro")
    parser.add_argument("--dump", default=None)
    parser.add_argument("--json", default=None, help="append the result (one JSON line) here")
    parser.add_argument("--points", type=int, default=None,
                        help="observations per group (default compile_bench.POINTS; 1: no plate "
                             "reductions in the potential)")
    args = parser.parse_args(argv)
    if args.points is not None:
        from . import compile_bench
        compile_bench.POINTS = args.points
    import jax

    capture = {"effppl": effppl_program, "numpyro": numpyro_program}
    programs = {fw: capture[fw](args.sites) for fw in args.frameworks.split(",")}
    times, stats = {fw: [] for fw in programs}, {}
    for _ in range(args.repeat):
        for fw, (jitted, call_args) in programs.items():
            jax.clear_caches()  # JAX keeps compiled programs: compile anew each time
            low = jitted.lower(*call_args)
            start = time.process_time()
            compiled = low.compile()
            times[fw].append(time.process_time() - start)
            stats[fw] = fusion_stats(compiled.as_text())
            if args.dump:
                os.makedirs(args.dump, exist_ok=True)
                with open(os.path.join(args.dump, f"{fw}_{args.sites}.hlo"), "w") as f:
                    f.write(compiled.as_text())
            del compiled
    out = {"sites": args.sites, **{fw: {"best_cpu_s": min(t), "cpu_s": t, **stats[fw]}
                                   for fw, t in times.items()}}
    if args.points is not None:
        out["points"] = args.points
    print(json.dumps(out))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
