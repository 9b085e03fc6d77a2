"""The expressiveness showcase: oracles checked against NumPyro where it can express the model
(by its scan, or by an unrolled rewrite), NumPyro's failures, and effppl against the oracles."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.infer.util import log_density

from effppl import distributions as dist
from models.showcase import SHOWCASE
from tests.models._effppl import require_log_density


def _values(name, args, seed=0):
    """Random constrained values of every latent site (stacked for sites inside scans)."""
    return {k: jnp.asarray(v) for k, v in _numpy_values(name, args, seed).items()}


def _numpy_values(name, args, seed):
    rng = np.random.default_rng(seed)
    y = args[-1]
    if name == "hmm":
        return {"theta": rng.dirichlet([1.0, 1.0], 2), "mu": rng.normal([3.0, 10.0], 1.0)}
    if name == "hierarchical_hmm":
        scales = {k: rng.uniform(0.2, 2.0) for k in ("tau", "sigma_walk", "sigma_obs")}
        return {"mu": rng.normal(), **scales, "level": rng.normal(size=y.shape[0]),
                "z": rng.normal(size=y.shape)}
    scales = {k: rng.uniform(0.2, 2.0) for k in ("sigma_calm", "sigma_turbulent", "sigma_obs")}
    return {**scales, "nu": rng.uniform(1.0, 10.0), "x": rng.normal(size=y.shape)}


def _assert_oracle(name, log_joint_fn, args, num_points=3):
    for seed in range(num_points):
        values = _values(name, args, seed)
        np.testing.assert_allclose(log_joint_fn(values), SHOWCASE[name].log_joint(values, *args),
                                   rtol=1e-6)


def test_make_data_is_deterministic():
    for showcase in SHOWCASE.values():
        (a, _), (b, _) = showcase.make_data(seed=1), showcase.make_data(seed=1)
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_hmm_oracle_equals_numpyro_scan():
    args, kwargs = SHOWCASE["hmm"].make_data()
    fn = jax.jit(lambda v: log_density(SHOWCASE["hmm"].numpyro_model, args, kwargs, v)[0])
    _assert_oracle("hmm", fn, args)


def _hierarchical_unrolled(y):
    """The NumPyro rewrite without nested scans: the inner walk as a GaussianRandomWalk."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    sigma_walk = numpyro.sample("sigma_walk", dist.HalfNormal(0.5))
    sigma_obs = numpyro.sample("sigma_obs", dist.HalfNormal(1.0))
    with numpyro.plate("groups", y.shape[0]):
        level = numpyro.sample("level", dist.Normal(mu, tau))
        z = numpyro.sample("z", dist.GaussianRandomWalk(sigma_walk, num_steps=y.shape[1]))
        numpyro.sample("y", dist.Normal(level[:, None] + z, sigma_obs).to_event(1), obs=y)


def _regime_unrolled(regime, y):
    """The NumPyro rewrite without `cond`: a Python loop over the (known) regimes."""
    sigma_calm = numpyro.sample("sigma_calm", dist.HalfNormal(0.5))
    sigma_turbulent = numpyro.sample("sigma_turbulent", dist.HalfNormal(2.0))
    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
    sigma_obs = numpyro.sample("sigma_obs", dist.HalfNormal(1.0))
    x_prev, x = 0.0, []
    for i, regime_t in enumerate(np.asarray(regime)):
        step = (dist.StudentT(nu, x_prev, sigma_turbulent) if regime_t == 1
                else dist.Normal(x_prev, sigma_calm))
        x_prev = numpyro.sample(f"x_{i}", step)
        x.append(x_prev)
    numpyro.sample("y", dist.Normal(jnp.stack(x), sigma_obs).to_event(1), obs=y)


def test_hierarchical_hmm_oracle_equals_numpyro_rewrite():
    args, _ = SHOWCASE["hierarchical_hmm"].make_data()
    fn = jax.jit(lambda v: log_density(_hierarchical_unrolled, args, {}, v)[0])
    _assert_oracle("hierarchical_hmm", fn, args)


def test_regime_switching_ssm_oracle_equals_numpyro_rewrite():
    args, _ = SHOWCASE["regime_switching_ssm"].make_data(num_steps=20)

    def unrolled(v):
        steps = {f"x_{i}": x for i, x in enumerate(v["x"])}
        v = {k: val for k, val in v.items() if k != "x"} | steps
        return log_density(_regime_unrolled, args, {}, v)[0]

    _assert_oracle("regime_switching_ssm", jax.jit(unrolled), args)


@pytest.mark.comparison
def test_numpyro_rejects_nested_scan():
    showcase = SHOWCASE["hierarchical_hmm"]
    args, kwargs = showcase.make_data()
    with pytest.raises(RuntimeError, match="nested scan"):
        log_density(showcase.numpyro_model, args, kwargs, _values("hierarchical_hmm", args))


@pytest.mark.comparison
def test_numpyro_rejects_cond_with_two_families():
    showcase = SHOWCASE["regime_switching_ssm"]
    args, kwargs = showcase.make_data()
    with pytest.raises(TypeError, match="same pytree structure"):
        log_density(showcase.numpyro_model, args, kwargs, _values("regime_switching_ssm", args))


@pytest.mark.parametrize("name", list(SHOWCASE))
def test_effppl_log_density_equals_oracle(name):
    effppl_log_density = require_log_density()
    args, kwargs = SHOWCASE[name].make_data()
    model = SHOWCASE[name].model
    _assert_oracle(name, jax.jit(lambda v: effppl_log_density(model, args, kwargs, v)[0]), args)
