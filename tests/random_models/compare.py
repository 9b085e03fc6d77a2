"""Compare effppl on one model description with the independent evaluator (and NumPyro).

`check(model, seed)` draws the model's inputs and a point (the evaluator's forward sampler),
then compares, at that point and at a standard normal unconstrained point:

- `log_density` (value, and gradient in the constrained values) with the evaluator's sum of
  NumPyro distributions' `log_prob`;
- `potential_energy` (value and gradient) with the evaluator's potential (`biject_to`, the
  Jacobians, the standard normal of unread coordinates);
- `trace`'s values and shapes of every sample and deterministic site;
- `log_likelihood` of every observed site (`pointwise=True` only: it compiles);
- NumPyro's `log_density` and `potential_energy` on the same model, where NumPyro can express
  it (`build.numpyro_can_express`).

Raises `Mismatch` naming the quantity.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from . import evaluator as E
from .build import build, numpyro_can_express
from .eager import eager

RTOL, ATOL = 1e-7, 1e-8


class Mismatch(AssertionError):
    pass


def close(what, actual, expected, rtol=RTOL, atol=ATOL):
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        raise Mismatch(f"{what}: shape {actual.shape}, expected {expected.shape}")
    both_nan = np.isnan(actual) & np.isnan(expected)
    if not np.all(both_nan | np.isclose(actual, expected, rtol=rtol, atol=atol)):
        raise Mismatch(f"{what}: got\n{actual}\nexpected\n{expected}")


def _finite(x):
    return all(bool(jnp.all(jnp.isfinite(v))) for v in jax.tree.leaves(x))


def check(model, seed, pointwise=False, against_numpyro=True, compiled=False) -> dict:
    """Run every comparison on `model` (effppl's programs run by `eager.eager`, or compiled
    with `jax.jit` when `compiled`); returns what was compared (counts)."""
    from effppl.handlers import log_density, potential_energy

    run = jax.jit if compiled else eager
    inputs, point = E.sample_inputs(model, seed)
    fn = build(model)
    done = {"models": 1}

    factors = E.factor_names(model)

    def density(inputs, p):
        lp, tr = log_density(fn, (inputs,), {}, p)
        return lp, {n: site["value"] for n, site in tr.items()
                    if site["type"] in ("sample", "deterministic") and n not in factors}

    # log_density (value and gradient) and the trace at the drawn point: one program
    expected, g_expected = _evaluator(model, inputs, "density", point)
    (actual, values), g_actual = run(jax.value_and_grad(density, argnums=1, has_aux=True))(
        inputs, point)
    close("log_density", actual, expected.log_density)
    for name, value in expected.trace.items():
        if name not in values:
            raise Mismatch(f"trace: site `{name}` missing (has {sorted(values)})")
        close(f"trace value [{name}]", values[name], value)
    extra = sorted(set(values) - set(expected.trace))
    if extra:
        raise Mismatch(f"trace: unexpected sites {extra}")
    if point and _finite(expected.log_density):
        for name in point:
            close(f"grad log_density [{name}]", g_actual[name], g_expected[name], rtol=1e-6)
    # the potential (value and gradient) at a standard normal unconstrained point
    u = E.unconstrained_point(model, seed + 1)
    expected_pe, g_expected = _evaluator(model, inputs, "potential", u)
    actual_pe, g_actual = run(jax.value_and_grad(
        lambda i, v: potential_energy(fn, (i,), {}, v), argnums=1))(inputs, u)
    close("potential_energy", actual_pe, expected_pe.potential)
    if u and _finite(expected_pe.potential):
        for name in u:
            close(f"grad potential_energy [{name}]", g_actual[name], g_expected[name], rtol=1e-6)
    done["checks"] = 1
    if pointwise and expected.log_lik:
        from effppl.infer import log_likelihood
        ll = log_likelihood(fn, {k: v[None] for k, v in point.items()}, inputs)
        for name, value in expected.log_lik.items():
            if name not in ll:
                raise Mismatch(f"log_likelihood: site `{name}` missing (has {sorted(ll)})")
            close(f"log_likelihood [{name}]", ll[name][0], value)
        done["log_likelihood"] = 1
    if against_numpyro and numpyro_can_express(model):
        done["numpyro"] = _against_numpyro(model, inputs, point, u, expected, expected_pe)
    return done


def _evaluator(model, inputs, mode, values):
    """`(evaluation, gradient)`: the evaluator's result at `values`, and the gradient of its log
    density (`mode="density"`) or potential (`"potential"`) in them, in one run."""
    def f(v):
        r = E.run(model, inputs, mode, v)
        return (r.log_density if mode == "density" else r.potential), r

    (_, r), g = jax.value_and_grad(f, has_aux=True)(values)
    return jax.tree.map(jax.lax.stop_gradient, r), g


def _against_numpyro(model, inputs, point, u, expected, expected_pe):
    from numpyro.infer import util

    fn = build(model, "numpyro")
    lp, _ = util.log_density(fn, (inputs,), {}, point)
    close("numpyro log_density vs evaluator", lp, expected.log_density)
    if u:
        pe = util.potential_energy(fn, (inputs,), {}, u)
        close("numpyro potential_energy vs evaluator", pe, expected_pe.potential)
    return 1
