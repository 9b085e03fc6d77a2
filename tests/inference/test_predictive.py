import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from effppl.infer import Predictive, PredictiveError, log_likelihood

from . import _models as m


@pytest.fixture(scope="module")
def X():
    return jnp.asarray(m.regression_data()[0])


def _draws(predictive, repeats, *args, **kwargs):
    """`repeats` calls with different keys, concatenated (one executable serves every call)."""
    out = [predictive(jax.random.key(i), *args, **kwargs) for i in range(repeats)]
    return {k: np.concatenate([np.asarray(o[k]) for o in out]) for k in out[0]}


def test_prior_predictive_matches_analytic_prior(X):
    one = Predictive(m.regression, num_samples=250)(jax.random.key(0), X)
    assert set(one) == {"beta", "y"}
    assert one["beta"].shape == (250, 2) and one["y"].shape == (250, X.shape[0])
    draws = _draws(Predictive(m.regression, num_samples=250), 16, X)
    n = 16 * 250
    beta = np.asarray(draws["beta"])
    assert np.all(np.abs(beta.mean(0)) < 4 * 3.0 / np.sqrt(n))
    np.testing.assert_allclose(beta.std(0), 3.0, rtol=0.06)
    # y_i = x_i . beta + eps: variance 9 |x_i|^2 + 1.
    var = 9.0 * np.sum(np.asarray(X) ** 2, axis=1) + 1.0
    np.testing.assert_allclose(np.asarray(draws["y"]).var(0)[:5], var[:5], rtol=0.12)


def test_posterior_predictive_redraws_observations_given_latents(X):
    beta = jnp.tile(jnp.asarray([[1.0, -2.0]]), (250, 1))
    draws = _draws(Predictive(m.regression, {"beta": beta}), 12, X)
    assert set(draws) == {"y"}
    y = np.asarray(draws["y"])
    assert y.shape == (3000, X.shape[0])
    np.testing.assert_allclose(y.mean(0), np.asarray(X) @ np.array([1.0, -2.0]), atol=4 / np.sqrt(3000))
    np.testing.assert_allclose(y.std(0).mean(), 1.0, rtol=0.05)


def test_posterior_predictive_with_chain_axis(X):
    beta = jax.random.normal(jax.random.key(2), (2, 50, 2))
    draws = Predictive(m.regression, {"beta": beta}, batch_ndims=2)(jax.random.key(3), X)
    assert draws["y"].shape == (2, 50, X.shape[0])


def test_predictive_returns_deterministic_sites_and_requested_sites():
    y = jnp.asarray(m.normal_normal_data())
    mu = jnp.linspace(-1.0, 1.0, 7)
    draws = Predictive(m.normal_normal, {"mu": mu})(jax.random.key(4), y)
    assert set(draws) == {"mu2", "y"}
    np.testing.assert_allclose(draws["mu2"], 2 * mu)
    np.testing.assert_allclose(draws["y"], jnp.broadcast_to(y, (7, y.shape[0])))  # observed
    draws = Predictive(m.normal_normal, {"mu": mu}, return_sites=["mu", "mu2"])(jax.random.key(4), y)
    assert set(draws) == {"mu", "mu2"}
    np.testing.assert_allclose(draws["mu"], mu)
    with pytest.raises(PredictiveError, match=r"\['nope'\]"):
        Predictive(m.normal_normal, {"mu": mu}, return_sites=["nope"])(jax.random.key(4), y)
    with pytest.raises(PredictiveError, match="neither"):
        Predictive(m.normal_normal)


def test_prior_predictive_of_sites_inside_scan():
    n, T = 3000, 8
    draws = _draws(Predictive(m.local_level_prior, num_samples=250), 12, T=T)
    assert draws["x0"].shape == (n,)
    assert draws["x"].shape == (n, T) and draws["y"].shape == (n, T)
    # Random walk: Var x_t = 1 + 0.25 t; y_t adds unit noise.
    expected = 1.0 + 0.25 * np.arange(1, T + 1)
    np.testing.assert_allclose(np.asarray(draws["x"]).var(0), expected, rtol=0.12)
    np.testing.assert_allclose(np.asarray(draws["y"]).var(0), expected + 1.0, rtol=0.12)


def test_log_likelihood_matches_hand_computation():
    y = jnp.asarray(m.normal_normal_data())
    mu = jnp.asarray([0.0, 1.0, 2.5])
    ll = log_likelihood(m.normal_normal, {"mu": mu, "mu2": 2 * mu}, y)
    assert set(ll) == {"y"} and ll["y"].shape == (3, y.shape[0])
    expected = stats.norm.logpdf(np.asarray(y)[None], np.asarray(mu)[:, None], m.NOISE)
    np.testing.assert_allclose(ll["y"], expected, rtol=1e-6)
    grouped = log_likelihood(m.normal_normal, {"mu": mu.reshape(1, 3)}, y, batch_ndims=2)
    np.testing.assert_allclose(grouped["y"][0], ll["y"])
    single = log_likelihood(m.normal_normal, {"mu": mu[1]}, y, batch_ndims=0)
    np.testing.assert_allclose(single["y"], ll["y"][1])
    with pytest.raises(PredictiveError, match=r"\['mu'\] are missing"):
        log_likelihood(m.normal_normal, {"mu2": mu}, y)


def test_log_likelihood_of_observations_inside_scan():
    y = jnp.asarray([0.5, -0.2, 1.0, 2.0])
    x = jnp.asarray([[0.0, 0.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0]])
    ll = log_likelihood(m.local_level, {"x0": jnp.zeros(2), "x": x}, y)
    assert ll["y"].shape == (2, 4)
    np.testing.assert_allclose(ll["y"], stats.norm.logpdf(np.asarray(y)[None], np.asarray(x), 1.0),
                               rtol=1e-6)


def test_condition_deterministic_fixes_deterministic_sites():
    a, d = jnp.ones(3), jnp.asarray([10.0, 20.0, 30.0])
    fixed = Predictive(m.deterministic_mean, {"a": a, "d": d},
                       condition_deterministic=True)(jax.random.key(0))
    np.testing.assert_allclose(fixed["d"], d)
    np.testing.assert_allclose(fixed["y"], d, atol=0.01)  # the model went on with the given d
    recomputed = Predictive(m.deterministic_mean, {"a": a, "d": d})(jax.random.key(0))
    np.testing.assert_allclose(recomputed["d"], 2 * a)
    np.testing.assert_allclose(recomputed["y"], 2 * a, atol=0.01)


def test_log_likelihood_is_zero_where_masked():
    """As NumPyro's (its `mask` makes the site's distribution a masked one): pointwise log
    likelihoods, and so LOO/WAIC, leave masked observations out."""
    y = jnp.asarray([0.3, 1.0, 2.0, -1.0, 0.0])
    valid = jnp.asarray([True, True, False, True, False])
    mu = jnp.asarray([0.2, -0.5])
    ll = log_likelihood(m.masked_observations, {"mu": mu}, y, valid)["y"]
    expected = stats.norm.logpdf(np.asarray(y)[None], np.asarray(mu)[:, None], 1.0)
    np.testing.assert_allclose(ll, np.where(np.asarray(valid), expected, 0.0), rtol=1e-6)
