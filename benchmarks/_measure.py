"""Timing and agreement of one framework's log density (the paper's Tables 1 and 2, §7.2).

Three timings per target, each on the same flattened function of `(params, data)`:
- `trace_s` (seconds): producing the framework's jaxpr of the log density; JAX tracing for NumPyro
  and hand-written JAX, effect elimination for effppl (the "x" of Table 2);
- `compile_s` (seconds): `jax.jit(value_and_grad(f)).lower(...).compile()` of that jaxpr, so every
  framework is compiled from the program it produced (the "y" of Table 2);
- `run_s` (seconds): `num_evals` log-density-and-gradient evaluations inside one compiled
  `lax.fori_loop` (Table 1); each iteration shifts the point by `1e-3 * sin(i)` so no evaluation
  can be hoisted out of the loop, and sums value and gradient into the carry so none is dead code.
  The loops of all frameworks of one environment run round-robin (`time_side_by_side`), so a
  change in the machine's load falls on all of them alike.
"""

import collections
import re
import statistics
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import jaxpr_as_fun


def _flat(fn, example):
    """`fn` of a pytree as a function of its leaves, and a function rebuilding it from a jaxpr."""
    leaves, treedef = jax.tree_util.tree_flatten(example)

    def flat_fn(*flat):
        return fn(*jax.tree_util.tree_unflatten(treedef, flat))

    def from_jaxpr(closed_jaxpr):
        run = jaxpr_as_fun(closed_jaxpr)

        def fn_from_jaxpr(*tree):
            return run(*jax.tree_util.tree_leaves(tree))[0]

        return fn_from_jaxpr

    return flat_fn, leaves, from_jaxpr


def _fresh(fn):
    def fresh(*args):
        return fn(*args)
    return fresh


def _walk(jaxpr):
    """Every equation of `jaxpr` and of the jaxprs nested in its equations' parameters."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _walk(inner)


def _callbacks(closed_jaxpr):
    """Host callbacks left in a jaxpr (each one is a device-to-host round trip per evaluation)."""
    return sum("callback" in eqn.primitive.name for eqn in _walk(closed_jaxpr.jaxpr))


_HLO_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+ = .*? ([a-z][\w\-]*)\(", re.MULTILINE)


def hlo_op_counts(compiled):
    """Opcode -> number of instructions in the optimized HLO of `compiled` (a
    `jax.stages.Compiled`), over all its computations (fusion bodies included).

    Equal counts for two frameworks say XLA made (nearly surely) the same program of both, up to
    the order and naming of instructions; unlike a timing, they do not depend on the machine's
    load. The counts are those of the backend that compiled (CPU and GPU programs differ).
    """
    return dict(sorted(collections.Counter(_HLO_INSTRUCTION.findall(compiled.as_text())).items()))


def _timed(thunk):
    start = time.perf_counter()
    out = thunk()
    jax.block_until_ready(out)
    return time.perf_counter() - start, out


def _eval_loop(log_density, num_evals):
    value_and_grad = jax.value_and_grad(log_density)

    def run(params, data):
        def body(i, acc):
            shift = 1e-3 * jnp.sin(i.astype(acc.dtype))
            point = jax.tree_util.tree_map(lambda x: x + shift.astype(x.dtype), params)
            value, grad = value_and_grad(point, data)
            grad_sum = sum(jnp.sum(g) for g in jax.tree_util.tree_leaves(grad))
            return acc + value + grad_sum

        init = jnp.zeros((), jnp.result_type(float))
        return lax.fori_loop(0, num_evals, body, init)

    return run


class Prepared(NamedTuple):
    """One framework's log density, traced and compiled, with its evaluation loop ready to time.

    **Fields:**
    - `figures`: dict of everything but the run time (see `measure`).
    - `run`: thunk running the compiled `num_evals` loop once; returns its (blocked) result.
    """

    figures: dict
    run: Callable


def prepare(target, params, data, mode):
    """Traces and compiles `target` (the "x" and "y" of Table 2) and its evaluation loop.

    **Arguments:**
    - `target`: a `benchmarks._targets.Target`.
    - `params`, `data`: pytrees of arrays in the run's default dtype (float32 unless x64 is on).
    - `mode`: a `benchmarks._config.Mode` (`num_evals`, `trace_repeats`, `compile_repeats`).

    **Returns:** a `Prepared` whose `figures` hold `trace_s`, `trace_first_s`, `trace_all_s`,
    `compile_s`, `compile_all_s`, `total_s` (= trace + compile), `num_evals`, `num_eqns`
    (top-level equations in the produced jaxpr), `num_callbacks` (host callbacks anywhere in it:
    each costs a device-host round trip), `hlo_ops` (opcode -> count in the optimized HLO of the
    compiled log density + gradient, see `hlo_op_counts`), `num_hlo_ops` (their sum) and `dtype`.
    """
    params = jax.device_put(params)
    data = jax.device_put(data)
    flat_fn, leaves, from_jaxpr = _flat(target.log_density, (params, data))

    trace_times = []
    for _ in range(mode.trace_repeats):
        fresh = _fresh(flat_fn)  # jax.make_jaxpr caches by function identity
        seconds, closed_jaxpr = _timed(lambda: target.make_jaxpr(fresh)(*leaves))
        trace_times.append(seconds)
    fn = from_jaxpr(closed_jaxpr)

    compile_times = []
    for _ in range(mode.compile_repeats):
        seconds, compiled = _timed(
            lambda: jax.jit(jax.value_and_grad(fn)).lower(params, data).compile())
        compile_times.append(seconds)
    hlo_ops = hlo_op_counts(compiled)

    loop = jax.jit(_eval_loop(fn, mode.num_evals)).lower(params, data).compile()
    trace_s = statistics.median(trace_times)
    compile_s = statistics.median(compile_times)
    figures = {
        "trace_s": trace_s,
        "trace_first_s": trace_times[0],
        "trace_all_s": trace_times,
        "compile_s": compile_s,
        "compile_all_s": compile_times,
        "total_s": trace_s + compile_s,
        "num_evals": mode.num_evals,
        "num_eqns": len(closed_jaxpr.jaxpr.eqns),
        "num_callbacks": _callbacks(closed_jaxpr),
        "num_hlo_ops": sum(hlo_ops.values()),
        "hlo_ops": hlo_ops,
        "dtype": str(jnp.result_type(float)),
    }
    return Prepared(figures=figures, run=lambda: loop(params, data))


SHORT_LOOP_S = 10.0
"""A loop timed once that took less than this (seconds) is run once more and the faster run counts:
a compiled loop's first execution carries one-time costs (first-touch allocation, loading the
executable) that can double a short loop's time."""


def _wants_run(times, repeats):
    return len(times) < repeats or (len(times) == 1 and times[0] < SHORT_LOOP_S)


def time_side_by_side(prepared, repeats):
    """Runs every prepared loop `repeats` times, round-robin, so that a change in the machine's
    load during the measurement falls on all frameworks alike (Table 1). A loop run once in under
    `SHORT_LOOP_S` seconds runs a second time (so never is a short loop's cold run the only one).

    **Arguments:**
    - `prepared`: dict name -> `Prepared`.
    - `repeats`: number of rounds (each runs every loop once).

    **Returns:** dict name -> dict with `run_s` (the fastest run, seconds), `run_all_s`,
    `evals_per_s` (evaluations per second of the fastest run) and `loop_result` (the loop's sum, a
    finiteness check). A loop that raises gets `{"error": exception}` instead.
    """
    times = {name: [] for name in prepared}
    results, errors = {}, {}
    while rounds := [n for n in prepared if n not in errors and _wants_run(times[n], repeats)]:
        for name in rounds:
            try:
                seconds, results[name] = _timed(prepared[name].run)
            except Exception as err:  # one failing loop must not hide the others' timings
                errors[name] = err
                continue
            times[name].append(seconds)
    out = {name: {"error": err} for name, err in errors.items()}
    for name, item in prepared.items():
        if name in errors:
            continue
        run_s = min(times[name])
        out[name] = {"run_s": run_s, "run_all_s": times[name],
                     "evals_per_s": item.figures["num_evals"] / run_s,
                     "loop_result": float(results[name])}
    return out


def evaluate_points(target, points, data):
    """Log density and gradient of `target` at each unconstrained point, in float64.

    **Arguments:**
    - `points`: list of dicts site -> float64 numpy array.
    - `data`: dict of numpy arrays (cast to 64-bit inside).

    **Returns:** list of `(value: float, grad: dict site -> float64 array)`, one per point.
    """
    with jax.enable_x64(True):
        example = (points[0], data)
        flat_fn, leaves, from_jaxpr = _flat(target.log_density, example)
        fn = from_jaxpr(target.make_jaxpr(flat_fn)(*leaves))
        value_and_grad = jax.jit(jax.value_and_grad(fn))
        out = []
        for point in points:
            value, grad = value_and_grad(point, data)
            out.append((float(value), {k: np.asarray(v, np.float64) for k, v in grad.items()}))
        return out


def random_points(latent_shapes, num_points, seed):
    """`num_points` dicts site -> float64 array drawn uniformly on (-2, 2) (NumPyro's init range)."""
    rng = np.random.default_rng(seed)
    return [{site: rng.uniform(-2.0, 2.0, size=tuple(shape)) for site, shape in
             sorted(latent_shapes.items())} for _ in range(num_points)]


def compare(reference, other, rtol):
    """Agreement of `other` with `reference`, both lists of `(value, grad)` from `evaluate_points`.

    Values agree when `|a - b| <= rtol * max(1, |b|)`; a gradient agrees when every component is
    within `rtol * max(1, max|g_ref|)` of the reference (gradients have components near zero).

    **Returns:** dict with `ok`, `max_rel_err_value`, `max_rel_err_grad`, `values`, `ref_values`.
    """
    value_errs, grad_errs = [], []
    for (v_ref, g_ref), (v, g) in zip(reference, other):
        err = abs(v - v_ref) / max(1.0, abs(v_ref))
        value_errs.append(err if np.isfinite(err) else float("inf"))
        if set(g) != set(g_ref):
            grad_errs.append(float("inf"))
            continue
        scale = max([1.0] + [float(np.max(np.abs(x))) for x in g_ref.values() if x.size])
        diffs = [float(np.max(np.abs(g[k] - g_ref[k]))) for k in g_ref if g_ref[k].size]
        err = max(diffs, default=0.0) / scale
        grad_errs.append(err if np.isfinite(err) else float("inf"))
    max_v, max_g = max(value_errs), max(grad_errs)
    finite = all(np.isfinite(v) for v, _ in other)
    return {
        "ok": bool(finite and max_v <= rtol and max_g <= rtol),
        "max_rel_err_value": max_v,
        "max_rel_err_grad": max_g,
        "values": [v for v, _ in other],
        "ref_values": [v for v, _ in reference],
    }
