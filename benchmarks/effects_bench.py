"""Micro-benchmark of the effects core (issue: effects core, "Also").

1. State threaded by a handler through a `scan` and a `while_loop` of `--steps` iterations vs the
   same loop with the state threaded by hand: runtime of each (seconds, best of `--repeats`),
   their ratio, and the translation time. Expect a ratio of about 1.0: the translated jaxpr is
   the hand-written one up to renaming.
2. Translation time of straight-line programs of 1,000 / 2,000 / 4,000 equations performing
   tail-resumptive operations: it must grow linearly (no continuation is duplicated on that path).

Run: `python -m benchmarks.effects_bench [--steps 1000000] [--repeats 5]`.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from effppl import effects as fx

get = fx.Operation("get", out=lambda: jax.ShapeDtypeStruct((), jnp.float32))
put = fx.Operation("put", out=lambda x: ())


def _state(body):
    return fx.handle(body, params=jnp.float32(0.0),
                     clauses={get: lambda p, resume: resume(p, p),
                              put: lambda p, v, resume: resume(v, ())},
                     ret=lambda p, r: (p, r))


def _step(s, x):
    return jnp.sin(s) * 0.5 + x


def scan_effect(xs):
    def body(c, x):
        put(_step(get(), x))
        return c + 1, None
    return _state(lambda: jax.lax.scan(body, 0, xs)[0])()


def scan_hand(xs):
    def body(carry, x):
        c, s = carry
        return (c + 1, _step(s, x)), None
    (c, s), _ = jax.lax.scan(body, (0, jnp.float32(0.0)), xs)
    return s, c


def while_effect(n):
    def body(i):
        put(_step(get(), 1.0))
        return i + 1
    return _state(lambda: jax.lax.while_loop(lambda i: i < n, body, 0))()


def while_hand(n):
    def body(c):
        i, s = c
        return i + 1, _step(s, 1.0)
    i, s = jax.lax.while_loop(lambda c: c[0] < n, body, (0, jnp.float32(0.0)))
    return s, i


def _best(f, *args, repeats):
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t0)
    return min(times)


def _straight_line(n_ops):
    def body(x):
        for _ in range(n_ops):
            put(get() * 0.999 + x)
        return get()
    return _state(body)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    xs = jnp.ones(args.steps, jnp.float32)

    print(f"loops of {args.steps:,} steps; best of {args.repeats} runs (seconds)")
    print(f"{'loop':8} {'effects':>10} {'by hand':>10} {'ratio':>7} {'translate':>10}")
    for name, eff, hand, arg in [("scan", scan_effect, scan_hand, xs),
                                 ("while", while_effect, while_hand, args.steps)]:
        t0 = time.perf_counter()
        fx.make_jaxpr(eff)(arg)
        translate = time.perf_counter() - t0
        te = _best(jax.jit(eff), arg, repeats=args.repeats)
        th = _best(jax.jit(hand), arg, repeats=args.repeats)
        print(f"{name:8} {te:10.4f} {th:10.4f} {te / th:7.3f} {translate:10.4f}")

    print("\ntranslation time of straight-line programs (tail-resumptive handler)")
    print(f"{'equations':>10} {'seconds':>9} {'s / 1k eqns':>12}")
    for n_ops in (250, 500, 1000):
        f = _straight_line(n_ops)
        n_eqns = len(jax.make_jaxpr(lambda x: f(x))(1.0).eqns[0].params["body"].jaxpr.eqns)
        t0 = time.perf_counter()
        fx.make_jaxpr(f)(jnp.float32(1.0))
        dt = time.perf_counter() - t0
        print(f"{n_eqns:10d} {dt:9.3f} {dt / n_eqns * 1000:12.3f}")


if __name__ == "__main__":
    main()
