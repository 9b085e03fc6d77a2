"""`effppl.infer.util.initialize_model`: NumPyro's `ModelInfo`, so blackjax or NumPyro's `hmc`
can drive an effppl model; checked against NumPyro's `initialize_model` on the same model and
against the analytic posterior."""

import blackjax
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer.util
import pytest
from numpyro.infer.hmc import hmc
from numpyro.infer.util import ModelInfo
from numpyro.util import fori_collect

import effppl
import effppl.handlers
from effppl import distributions as dist
from effppl.infer.util import compute_log_probs, initialize_model

Y = np.linspace(-1.0, 3.0, 20)


def scale_model(sample, plate):
    def model(y):
        sigma = sample("sigma", dist.HalfNormal(2.0))
        mu = sample("mu", dist.Normal(0.0, 2.0))
        with plate("n", y.shape[0]):
            sample("y", dist.Normal(mu, sigma), obs=y)
    return model


def conjugate(y):
    mu = effppl.sample("mu", dist.Normal(0.0, 2.0))
    effppl.deterministic("twice", 2 * mu)
    effppl.sample("y", dist.Normal(mu, 1.0), obs=y)


POST_MEAN = Y.sum() / (len(Y) + 0.25)
POST_SD = 1 / np.sqrt(len(Y) + 0.25)


@pytest.mark.slow
def test_model_info_agrees_with_numpyro():
    y = jnp.asarray(Y)
    info = initialize_model(jax.random.PRNGKey(0), scale_model(effppl.sample, effppl.plate),
                            model_args=(y,))
    theirs = numpyro.infer.util.initialize_model(
        jax.random.PRNGKey(0), scale_model(numpyro.sample, numpyro.plate), model_args=(y,))
    assert isinstance(info, ModelInfo) and set(info.param_info.z) == {"sigma", "mu"}
    z = {"sigma": jnp.array(0.3), "mu": jnp.array(-0.4)}
    np.testing.assert_allclose(info.potential_fn(z), theirs.potential_fn(z), rtol=1e-10)
    np.testing.assert_allclose(info.param_info.potential_energy,
                               theirs.potential_fn(info.param_info.z), rtol=1e-10)
    grad = jax.grad(theirs.potential_fn)(info.param_info.z)
    for name in z:
        np.testing.assert_allclose(info.param_info.z_grad[name], grad[name], rtol=1e-8)
        np.testing.assert_allclose(info.postprocess_fn(z)[name], theirs.postprocess_fn(z)[name])
    assert info.model_trace["y"]["is_observed"]
    np.testing.assert_allclose(info.model_trace["mu"]["value"],
                               info.postprocess_fn(info.param_info.z)["mu"])
    keys = jax.random.split(jax.random.PRNGKey(1), 3)
    batch = initialize_model(keys, scale_model(effppl.sample, effppl.plate), model_args=(y,))
    assert batch.param_info.z["mu"].shape == (3,) and batch.param_info.potential_energy.shape == (3,)
    one = initialize_model(keys[1], scale_model(effppl.sample, effppl.plate), model_args=(y,))
    np.testing.assert_allclose(batch.param_info.z["mu"][1], one.param_info.z["mu"])
    dyn = initialize_model(jax.random.PRNGKey(0), scale_model(effppl.sample, effppl.plate),
                           model_args=(y,), dynamic_args=True)
    np.testing.assert_allclose(dyn.potential_fn(y)(z), theirs.potential_fn(z), rtol=1e-10)


def test_blackjax_nuts_driven_by_model_info_finds_the_posterior():
    info = initialize_model(jax.random.PRNGKey(0), conjugate, model_args=(jnp.asarray(Y),))
    logdensity = lambda z: -info.potential_fn(z)  # noqa: E731
    warmup = blackjax.window_adaptation(blackjax.nuts, logdensity)
    (state, params), _ = warmup.run(jax.random.PRNGKey(1), info.param_info.z, num_steps=300)
    kernel = jax.jit(blackjax.nuts(logdensity, **params).step)

    def step(state, key):
        state, _ = kernel(key, state)
        return state, state.position

    _, draws = jax.lax.scan(step, state, jax.random.split(jax.random.PRNGKey(2), 1000))
    samples = jax.vmap(info.postprocess_fn)(draws)
    np.testing.assert_allclose(samples["twice"], 2 * samples["mu"])
    assert abs(float(samples["mu"].mean()) - POST_MEAN) < 4 * POST_SD / np.sqrt(200)
    np.testing.assert_allclose(float(samples["mu"].std()), POST_SD, rtol=0.2)


def test_numpyro_hmc_driven_by_model_info():
    info = initialize_model(jax.random.PRNGKey(0), conjugate, model_args=(jnp.asarray(Y),))
    init_kernel, sample_kernel = hmc(info.potential_fn, algo="NUTS")
    state = init_kernel(info.param_info, num_warmup=300, rng_key=jax.random.PRNGKey(3))
    draws = fori_collect(
        0, 1300, sample_kernel, state, transform=lambda s: s.z["mu"], progbar=False)[300:]
    assert abs(float(draws.mean()) - POST_MEAN) < 4 * POST_SD / np.sqrt(200)


def test_compute_log_probs_agrees_with_numpyro():
    params = {"sigma": 0.8, "mu": 0.3}
    y = jnp.asarray(Y)
    ours, tr = compute_log_probs(scale_model(effppl.sample, effppl.plate), (y,), {}, params)
    theirs, _ = numpyro.infer.util.compute_log_probs(
        scale_model(numpyro.sample, numpyro.plate), (y,), {}, params)
    assert set(ours) == set(theirs) == {"sigma", "mu", "y"}
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-10)
    elementwise, _ = compute_log_probs(scale_model(effppl.sample, effppl.plate), (y,), {}, params,
                                       sum_log_prob=False)
    assert elementwise["y"].shape == (20,)
    scaled, _ = compute_log_probs(effppl.handlers.scale(scale_model(effppl.sample, effppl.plate),
                                                        scale=3.0), (y,), {}, params)
    np.testing.assert_allclose(scaled["y"], 3.0 * theirs["y"], rtol=1e-10)
