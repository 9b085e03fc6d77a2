"""Autoguides against exact posteriors and NumPyro's autoguides, also for sites inside plain
`lax.scan` (nested), `cond` branches and `jax.vmap`."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer.autoguide as numpyro_autoguide
import optax
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import SVI, Predictive, Trace_ELBO, autoguide, init_to_value, log_likelihood

# -- a linear-Gaussian state space model with its states in a plain lax.scan -----------------

A, Q, R, T = 0.8, 0.5, 0.3, 8


def ssm(y):
    def step(x_prev, y_t):
        x = effppl.sample("x", dist.Normal(A * x_prev, Q))
        effppl.sample("y", dist.Normal(x, R), obs=y_t)
        return x, None
    jax.lax.scan(step, 0.0, y)


def _ssm_data():
    rng = np.random.RandomState(1)
    x, xs = 0.0, []
    for _ in range(T):
        x = A * x + Q * rng.randn()
        xs.append(x)
    return jnp.asarray(np.array(xs) + R * rng.randn(T))


def _ssm_posterior(y):
    """Exact posterior of the states: precision P = prior precision + I / R^2."""
    prior_prec = np.zeros((T, T))
    for t in range(T):
        prior_prec[t, t] += 1 / Q**2
        if t > 0:
            prior_prec[t - 1, t - 1] += A**2 / Q**2
            prior_prec[t, t - 1] -= A / Q**2
            prior_prec[t - 1, t] -= A / Q**2
    precision = prior_prec + np.eye(T) / R**2
    cov = np.linalg.inv(precision)
    return cov @ (np.asarray(y) / R**2), cov, precision


def _fit(model, guide, *args, steps=3000, lr=0.05, particles=8, seed=0):
    optim = optax.adam(optax.exponential_decay(lr, steps, 0.02))
    svi = SVI(model, guide, optim, Trace_ELBO(num_particles=particles))
    return svi.run(jax.random.PRNGKey(seed), steps, *args, progress_bar=False)


def test_autonormal_means_are_exact_on_a_state_space_model_in_a_plain_scan():
    y = _ssm_data()
    mean, _, precision = _ssm_posterior(y)
    guide = autoguide.AutoNormal(ssm)
    result = _fit(ssm, guide, y)
    assert result.params["x_auto_loc"].shape == (T,)  # stacked over the scan
    np.testing.assert_allclose(result.params["x_auto_loc"], mean, atol=0.03)
    # mean field on a Gaussian target: the scales are 1 / sqrt(diag(precision))
    np.testing.assert_allclose(result.params["x_auto_scale"], np.diag(precision) ** -0.5,
                               rtol=0.1)
    np.testing.assert_allclose(guide.median(result.params)["x"], mean, atol=0.03)


@pytest.mark.slow
def test_automultivariatenormal_sds_are_exact_on_a_state_space_model_in_a_plain_scan():
    y = _ssm_data()
    mean, cov, _ = _ssm_posterior(y)
    guide = autoguide.AutoMultivariateNormal(ssm)
    result = _fit(ssm, guide, y, steps=4000, particles=16)
    posterior = guide.get_posterior(result.params)
    np.testing.assert_allclose(posterior.mean, mean, atol=0.03)
    np.testing.assert_allclose(np.sqrt(np.diag(posterior.covariance_matrix)),
                               np.sqrt(np.diag(cov)), rtol=0.1)
    draws = guide.sample_posterior(jax.random.PRNGKey(1), result.params, sample_shape=(4000,))
    assert draws["x"].shape == (4000, T)
    np.testing.assert_allclose(draws["x"].std(0), np.sqrt(np.diag(cov)), rtol=0.15)


# -- a model NumPyro handles too ------------------------------------------------------------


def _regression(ppl):
    def model(x, y):
        w = ppl.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        sigma = ppl.sample("sigma", dist.HalfNormal(1.0))
        with ppl.plate("n", x.shape[0]):
            ppl.sample("y", dist.Normal(x @ w, sigma), obs=y)
    return model


def _regression_data():
    rng = np.random.RandomState(0)
    x = rng.randn(50, 2)
    return jnp.asarray(x), jnp.asarray(x @ np.array([1.0, -0.5]) + 0.5 * rng.randn(50))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["AutoNormal", "AutoMultivariateNormal",
                                  pytest.param("AutoDelta", marks=pytest.mark.slow),
                                  pytest.param("AutoDiagonalNormal", marks=pytest.mark.slow)])
def test_autoguides_agree_with_numpyros(name):
    x, y = _regression_data()
    results = []
    for ppl, module in ((effppl, autoguide), (numpyro, numpyro_autoguide)):
        model = _regression(ppl)
        guide = getattr(module, name)(model)
        optim = optax.adam(optax.exponential_decay(0.05, 3000, 0.02))
        loss = (Trace_ELBO if ppl is effppl else numpyro.infer.Trace_ELBO)(num_particles=8)
        svi = (SVI if ppl is effppl else numpyro.infer.SVI)(model, guide, optim, loss)
        result = svi.run(jax.random.PRNGKey(0), 3000, x, y, progress_bar=False)
        results.append((guide, result))
    (ours, ours_result), (theirs, theirs_result) = results
    assert set(ours_result.params) == set(theirs_result.params)
    for k in theirs_result.params:
        np.testing.assert_allclose(ours_result.params[k], theirs_result.params[k], atol=0.05)
    ours_median, theirs_median = ours.median(ours_result.params), theirs.median(
        theirs_result.params)
    for k in ("w", "sigma"):
        np.testing.assert_allclose(ours_median[k], theirs_median[k], atol=0.03)


def test_autoguide_loss_equals_numpyros_at_the_same_params():
    """AutoDelta's loss is deterministic: effppl's and NumPyro's must be equal, with gradients."""
    x, y = _regression_data()
    params = {"w_auto_loc": jnp.array([0.3, -0.2]), "sigma_auto_loc": jnp.array(0.7)}
    values = []
    for ppl, module, loss in ((effppl, autoguide, Trace_ELBO()),
                              (numpyro, numpyro_autoguide, numpyro.infer.Trace_ELBO())):
        model = _regression(ppl)
        guide = module.AutoDelta(model)
        if ppl is numpyro:
            numpyro.handlers.seed(guide, 0)(x, y)  # NumPyro sets the guide up on first call
        values.append(jax.value_and_grad(lambda p: loss.loss(
            jax.random.PRNGKey(0), p, model, guide, x, y))(params))
    np.testing.assert_allclose(values[0][0], values[1][0], rtol=1e-10)
    for k in params:
        np.testing.assert_allclose(values[0][1][k], values[1][1][k], rtol=1e-8)


# -- sites inside control flow ---------------------------------------------------------------


def test_autonormal_covers_nested_scans_exactly():
    """z[i, j] ~ N(0, 1), y[i, j] ~ N(z[i, j], 1): posterior N(y / 2, 1 / sqrt(2)) elementwise."""
    def model(y):
        def outer(_, y_i):
            def inner(_, y_ij):
                z = effppl.sample("z", dist.Normal(0.0, 1.0))
                effppl.sample("y", dist.Normal(z, 1.0), obs=y_ij)
                return None, None
            jax.lax.scan(inner, None, y_i)
            return None, None
        jax.lax.scan(outer, None, y)

    y = jnp.asarray(np.random.RandomState(0).randn(3, 4))
    guide = autoguide.AutoNormal(model)
    result = _fit(model, guide, y)
    assert result.params["z_auto_loc"].shape == (3, 4)
    np.testing.assert_allclose(result.params["z_auto_loc"], y / 2, atol=0.03)
    np.testing.assert_allclose(result.params["z_auto_scale"], 0.5**0.5, rtol=0.1)


def test_autonormal_covers_cond_branches_and_vmap():
    """In a scan, a `cond` on the data picks z_t's prior (N(0, 1) or N(3, 1)); under `jax.vmap`
    (a plate) u_b ~ N(0, 1). Every observation has noise 1: exact posteriors are elementwise."""
    def model(y, flag, v):
        def step(_, inputs):
            y_t, f_t = inputs
            z = jax.lax.cond(f_t, lambda: effppl.sample("z", dist.Normal(3.0, 1.0)),
                             lambda: effppl.sample("z", dist.Normal(0.0, 1.0)))
            effppl.sample("y", dist.Normal(z, 1.0), obs=y_t)
            return None, None
        jax.lax.scan(step, None, (y, flag))

        def element(v_b):
            u = effppl.sample("u", dist.Normal(0.0, 1.0))
            effppl.sample("v", dist.Normal(u, 1.0), obs=v_b)
        jax.vmap(element)(v)

    rng = np.random.RandomState(0)
    y, v = jnp.asarray(rng.randn(6)), jnp.asarray(rng.randn(5))
    flag = jnp.asarray([True, False, True, True, False, False])
    guide = autoguide.AutoNormal(model)
    result = _fit(model, guide, y, flag, v)
    np.testing.assert_allclose(result.params["z_auto_loc"], (y + 3.0 * flag) / 2, atol=0.03)
    np.testing.assert_allclose(result.params["u_auto_loc"], v / 2, atol=0.03)
    np.testing.assert_allclose(result.params["u_auto_scale"], 0.5**0.5, rtol=0.1)


@pytest.mark.slow
def test_autoguide_respects_a_parameter_dependent_support():
    """z ~ Uniform(0, s) with s latent: every guide draw of z lies in (0, s) of the same draw."""
    def model(y):
        s = effppl.sample("s", dist.Exponential(1.0))
        z = effppl.sample("z", dist.Uniform(0.0, s))
        effppl.sample("y", dist.Normal(z, 0.1), obs=y)

    for guide in (autoguide.AutoNormal(model), autoguide.AutoMultivariateNormal(model)):
        result = _fit(model, guide, jnp.asarray(0.8), steps=500)
        draws = guide.sample_posterior(jax.random.PRNGKey(2), result.params, sample_shape=(500,))
        assert np.all(draws["z"] > 0) and np.all(draws["z"] < draws["s"])
        assert abs(np.mean(draws["z"]) - 0.8) < 0.1


def test_quantiles_median_and_init_loc_fn():
    y = _ssm_data()
    mean, cov, precision = _ssm_posterior(y)
    guide = autoguide.AutoNormal(ssm, init_loc_fn=init_to_value(values={"x": mean}))
    svi = SVI(ssm, guide, optax.adam(0.0), Trace_ELBO())  # no steps: params stay initial
    state = svi.init(jax.random.PRNGKey(0), y)
    params = svi.get_params(state)
    np.testing.assert_allclose(params["x_auto_loc"], mean, rtol=1e-10)
    q = guide.quantiles(params, [0.5, 0.975])
    assert q["x"].shape == (2, T)
    np.testing.assert_allclose(q["x"][0], mean, rtol=1e-10)
    np.testing.assert_allclose(q["x"][1], mean + 1.959964 * 0.1, rtol=1e-5)


@pytest.mark.slow
def test_predictive_and_log_likelihood_with_guide_draws():
    x, y = _regression_data()
    model = _regression(effppl)
    guide = autoguide.AutoNormal(model)
    result = _fit(model, guide, x, y, steps=800)
    predictive = Predictive(model, guide=guide, params=result.params, num_samples=300)
    draws = predictive(jax.random.PRNGKey(1), x, None)
    assert set(draws) == {"y"} and draws["y"].shape == (300, 50)
    np.testing.assert_allclose(draws["y"].mean(0), x @ guide.median(result.params)["w"],
                               atol=0.15)
    posterior = Predictive(guide, params=result.params, num_samples=300)(
        jax.random.PRNGKey(2), x, y)
    assert posterior["w"].shape == (300, 2)
    ll = log_likelihood(model, posterior, x, y)
    assert ll["y"].shape == (300, 50)
    sigma = posterior["sigma"][:, None]
    expected = dist.Normal(posterior["w"] @ x.T, sigma).log_prob(y)
    np.testing.assert_allclose(ll["y"], expected, rtol=1e-10)


def test_autoguide_errors_name_the_site():
    def discrete(y):
        effppl.sample("k", dist.Bernoulli(0.5))

    with pytest.raises(autoguide.AutoGuideError, match="`k`"):
        SVI(discrete, autoguide.AutoNormal(discrete), optax.adam(0.1), Trace_ELBO()).init(
            jax.random.PRNGKey(0), jnp.zeros(()))
    with pytest.raises(autoguide.AutoGuideError, match="SVI.init"):
        autoguide.AutoNormal(ssm).median({})
