"""Values given to sites (`condition`, `substitute`, `do`, `Predictive`, `log_likelihood`) as
NumPyro takes them: `None` leaves a site alone, a value broadcasting to the site's shape is
accepted, one that does not broadcast is an error naming the site."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.handlers
import pytest
from jax.scipy import stats

import effppl
from effppl import distributions as dist
from effppl import handlers
from effppl.infer import Predictive, PredictiveError, log_likelihood


def chain(sample):
    def model():
        x = sample("x", dist.Normal(0.0, 1.0))
        return x, sample("y", dist.Normal(x, 1.0))
    return model


@pytest.mark.parametrize("name", ["condition", "substitute", "do"])
def test_none_value_leaves_site_alone(name):
    ours = getattr(handlers, name)(handlers.seed(chain(effppl.sample), 0),
                                   data={"x": 1.0, "y": None})
    theirs = getattr(numpyro.handlers, name)(numpyro.handlers.seed(chain(numpyro.sample), 0),
                                             data={"x": 1.0, "y": None})
    tr = handlers.trace(ours).get_trace()
    np_tr = numpyro.handlers.trace(theirs).get_trace()
    assert float(ours()[0]) == float(theirs()[0]) == 1.0  # the model goes on with x = 1
    assert not tr["y"]["is_observed"] and not np_tr["y"]["is_observed"]
    assert tr["x"]["is_observed"] == np_tr["x"]["is_observed"]
    # `y` is drawn as if it had not been named: the same draw as without it
    plain = getattr(handlers, name)(handlers.seed(chain(effppl.sample), 0), data={"x": 1.0})
    np.testing.assert_allclose(tr["y"]["value"], handlers.trace(plain).get_trace()["y"]["value"])


def regression(x=None):
    beta = effppl.sample("beta", dist.Normal(jnp.zeros(2), 1.0).to_event(1))
    return effppl.sample("obs", dist.Normal(jnp.sum(beta), 1.0), obs=x)


def test_substitute_broadcasts_value_to_site_shape():
    given = jnp.array([[0.3, -0.2]])  # (1, 2) for a site of shape (2,)
    lp, tr = handlers.log_density(regression, (jnp.array(0.5),), {}, {"beta": given})
    expected = (stats.norm.logpdf(given, 0.0, 1.0).sum()
                + stats.norm.logpdf(0.5, given.sum(), 1.0))
    np.testing.assert_allclose(lp, expected, rtol=1e-6)
    assert tr["beta"]["value"].shape == (2,)
    scalar = handlers.substitute(handlers.seed(regression, 0), data={"beta": jnp.array(0.3)})
    np.testing.assert_allclose(handlers.trace(scalar).get_trace()["beta"]["value"], [0.3, 0.3])


def test_substitute_rejects_value_that_does_not_broadcast():
    with pytest.raises(effppl.SiteError, match="`beta`.*shape \\(3,\\)"):
        handlers.substitute(handlers.seed(regression, 0), data={"beta": jnp.ones(3)})()


def test_predictive_broadcasts_posterior_values():
    key = jax.random.PRNGKey(1)
    wide = Predictive(regression, {"beta": jnp.full((10, 1, 2), 0.3)})(key)
    exact = Predictive(regression, {"beta": jnp.full((10, 2), 0.3)})(key)
    assert wide["obs"].shape == (10,)
    np.testing.assert_allclose(wide["obs"], exact["obs"])
    with pytest.raises(PredictiveError, match="`beta`"):
        Predictive(regression, {"beta": jnp.full((10, 3), 0.3)})(key)


def test_log_likelihood_broadcasts_posterior_values():
    beta = jnp.array([[[0.3, 0.1]], [[-0.4, 0.2]]])  # (2 draws, 1, 2)
    ll = log_likelihood(regression, {"beta": beta}, jnp.array(0.5))
    expected = stats.norm.logpdf(0.5, beta.sum(axis=(1, 2)), 1.0)
    np.testing.assert_allclose(ll["obs"], expected, rtol=1e-6)


def forecast(y, future):
    def step(level, t):
        x = effppl.sample("x", dist.Normal(level, 0.1))
        return x, x
    return jax.lax.scan(step, 0.0, jnp.arange(y.shape[0] + future))[1]


def test_a_series_shorter_than_its_loop_gives_the_first_rows_and_the_rest_is_drawn():
    y = jnp.array([1.0, 2.0, 3.0])
    model = handlers.seed(handlers.condition(forecast, data={"x": y}), 0)
    tr = handlers.trace(model).get_trace(y, 2)
    x = tr["x"]["value"]
    assert x.shape == (5,) and tr["x"]["is_observed"]
    np.testing.assert_allclose(x[:3], y)
    assert np.all(np.abs(x[3:] - 3.0) < 1.0) and x[3] != x[4]  # a random walk on from y[-1]
    np.testing.assert_allclose(model(y, 2), x)
    with pytest.raises(effppl.effects.UnhandledEffectError, match="`x` is given 3 rows.*seed"):
        handlers.trace(handlers.condition(forecast, data={"x": y})).get_trace(y, 2)


def test_values_with_extra_leading_axes_run_the_model_per_draw_as_numpyro():
    """NumPyro's idiom: substitute posterior draws (extra leading axes) and trace the model for
    its deterministic sites. Each site and the return value gain the draws' axes; the values
    equal NumPyro's (its broadcasting). The density entry points and inference's own values keep
    exact shapes: there such axes are a shape error naming the site, not a sum over draws."""
    def make(sample, deterministic):
        def model():
            x = sample("x", dist.Normal(0.0, 1.0).expand([3]))
            deterministic("x2", x ** 2)
            return sample("y", dist.Normal(x, 1.0))
        return model
    draws = jax.random.normal(jax.random.PRNGKey(0), (2, 4, 3))
    ours = handlers.trace(handlers.seed(handlers.substitute(
        make(effppl.sample, effppl.deterministic), {"x": draws}), 1)).get_trace()
    theirs = numpyro.handlers.trace(numpyro.handlers.seed(numpyro.handlers.substitute(
        make(numpyro.sample, numpyro.deterministic), {"x": draws}), 1)).get_trace()
    for name in ("x", "x2"):
        assert ours[name]["value"].shape == theirs[name]["value"].shape == (2, 4, 3)
        np.testing.assert_allclose(ours[name]["value"], theirs[name]["value"], rtol=1e-6)
    assert ours["y"]["value"].shape == (2, 4, 3)
    with pytest.raises(effppl.SiteError, match="`x`.*\\(2, 4, 3\\)"):
        handlers.log_density(make(effppl.sample, effppl.deterministic), (), {},
                             {"x": draws, "y": jnp.zeros(3)})
    with pytest.raises(effppl.SiteError, match="`x`"):
        handlers.trace(handlers.seed(handlers.internal.substitute_exactly(
            make(effppl.sample, effppl.deterministic), {"x": draws}), 1)).get_trace()
    # different extra axes for two sites: no common batch, the shape error names a site
    with pytest.raises(effppl.SiteError, match="`[xy]`"):
        handlers.trace(handlers.seed(handlers.substitute(
            make(effppl.sample, effppl.deterministic), {"x": draws, "y": jnp.zeros((5, 3))}),
            1)).get_trace()
