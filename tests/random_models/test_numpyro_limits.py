"""The harness's rules for what NumPyro cannot express (`build.numpyro_can_express`), one test
per rule the long run needed: each shows NumPyro's behaviour on the smallest model, effppl's value
against the hand-written density, and that the rule keeps such random models away from the
NumPyro comparison (the evaluator comparison still runs on them)."""

import jax
import numpy as np
import numpyro
import numpyro.distributions as ndist
import pytest
from numpyro import handlers as nhandlers
from numpyro.contrib.control_flow import scan as nscan
from numpyro.infer.util import log_density as numpyro_log_density

import effppl
from effppl import distributions as dist
from effppl import handlers

from . import spec as S
from .build import numpyro_can_express


def test_do_around_a_scaled_site_scales_twice_in_numpyro():
    """Long run, seed 20261206 (8 models, seeds 769 and 5521): `do(x): scale(3): x ~ ...`.
    NumPyro's `do` sends a copy of the site's message through the whole stack again, so the
    `scale` inside it applies twice (9x); effppl scores the site once with its scale (3x)."""
    def numpyro_model():
        with nhandlers.scale(scale=3.0):
            x = numpyro.sample("x", ndist.Normal(0.0, 1.0))
        numpyro.sample("y", ndist.Normal(x, 1.0), obs=0.5)

    def model():
        with handlers.scale(scale=3.0):
            x = effppl.sample("x", dist.Normal(0.0, 1.0))
        effppl.sample("y", dist.Normal(x, 1.0), obs=0.5)

    prior, lik = dist.Normal(0.0, 1.0).log_prob(1.0), dist.Normal(2.0, 1.0).log_prob(0.5)
    ours = effppl.log_density(handlers.do(model, {"x": 2.0}), (), {}, {"x": 1.0})[0]
    theirs = numpyro_log_density(nhandlers.do(numpyro_model, {"x": 2.0}), (), {}, {"x": 1.0})[0]
    np.testing.assert_allclose(ours, 3 * prior + lik, rtol=1e-6)
    np.testing.assert_allclose(theirs, 9 * prior + lik, rtol=1e-6)

    x = S.Sample("x", "Normal", (S.Const(0.0), S.Const(1.0)))
    scaled = S.Handle("h", "scale", (x,), 3.0)
    assert not numpyro_can_express((S.Handle("d", "do", (scaled,), ("x",)),))
    assert numpyro_can_express((S.Handle("d", "do", (x,), ("x",)),))
    assert numpyro_can_express((S.Handle("s", "scale", (S.Handle("d", "do", (x,), ("x",)),),
                                         3.0),))


def test_factor_in_a_plate_in_a_scan_raises_in_numpyro():
    """Long run, seed 20261206 (5 models, e.g. seed 3): `scan(3): plate(3): factor(-0.5)`.
    NumPyro's `scan` stacks the factor's log factor to `(1, 3)` and its `log_prob` raises;
    effppl scores 3 steps x 3 rows of -0.5."""
    def numpyro_model():
        def step(c, _):
            with numpyro.plate("p", 3):
                numpyro.factor("f", -0.5)
            return c, None
        nscan(step, 0.0, None, length=3)

    def model():
        def step(c, _):
            with effppl.plate("p", 3):
                effppl.factor("f", -0.5)
            return c, None
        jax.lax.scan(step, 0.0, None, length=3)

    with pytest.raises(ValueError, match="Cannot broadcast"):
        numpyro_log_density(numpyro_model, (), {}, {})
    np.testing.assert_allclose(effppl.log_density(model, (), {}, {})[0], -4.5, rtol=1e-12)

    factor = S.Factor("f", S.Const(-0.5))
    plate = S.Plate("p", 3, None, (factor,))
    assert not numpyro_can_express((S.Scan("s", 3, False, S.Const(0.0), None, (plate,)),))
    assert numpyro_can_express((S.Scan("s", 3, False, S.Const(0.0), None, (factor,)),))
    assert numpyro_can_express((plate,))


def test_nested_array_scales_in_a_scan_leak_a_tracer_in_numpyro():
    """Long run, seed 20261209 (3 models from one, e.g. model seed 0): `scan(3): x2 ~ Beta;
    scale(2): scale(0.5): o8 ~ LogNormal(2 x2, .) [obs]`. NumPyro's `scale` multiplies the two
    array scales while the scan's body is traced, and its `scan` keeps the product past the
    loop: `UnexpectedTracerError`. effppl scores the site with the product of the scales."""
    import jax.numpy as jnp

    def numpyro_model():
        def step(c, _):
            with nhandlers.scale(scale=jnp.asarray(2.0)), nhandlers.scale(scale=jnp.asarray(0.5)):
                numpyro.sample("o", ndist.Normal(c, 1.0), obs=1.0)
            return c, None
        nscan(step, 0.5, None, length=3)

    def model():
        def step(c, _):
            with handlers.scale(scale=jnp.asarray(2.0)), handlers.scale(scale=jnp.asarray(0.5)):
                effppl.sample("o", dist.Normal(c, 1.0), obs=1.0)
            return c, None
        jax.lax.scan(step, 0.5, None, length=3)

    with pytest.raises(jax.errors.UnexpectedTracerError):
        numpyro_log_density(numpyro_model, (), {}, {})
    np.testing.assert_allclose(effppl.log_density(model, (), {}, {})[0],
                               3 * dist.Normal(0.5, 1.0).log_prob(1.0), rtol=1e-12)

    o = S.Sample("o", "Normal", (S.Const(0.0), S.Const(1.0)), observed=True)
    inner = S.Handle("h5", "scale", (o,), 0.5)
    nested = S.Handle("h3", "scale", (inner,), 2.0)
    assert not numpyro_can_express((S.Scan("s", 3, False, S.Const(0.0), None, (nested,)),))
    assert numpyro_can_express((S.Scan("s", 3, False, S.Const(0.0), None, (inner,)),))
    assert numpyro_can_express((S.Handle("h3", "scale", (S.Scan("s", 3, False, S.Const(0.0),
                                                                  None, (inner,)),), 2.0),))
