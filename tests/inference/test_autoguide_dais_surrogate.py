"""`AutoSurrogateLikelihoodDAIS` against NumPyro's on NumPyro's own test model (a logistic
regression whose model subsamples its data, a weighted surrogate on a subset): the losses of
every step, the fitted params (the surrogate's own weights among them) and the posterior draws
at the same keys; bad settings."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer
import numpyro.infer.autoguide
import numpyro.optim
import pytest

import effppl
import effppl.infer
import effppl.optim
from effppl import distributions as dist
from effppl.infer.autoguide import AutoGuideError, AutoSurrogateLikelihoodDAIS

N, SUBSAMPLE, NUM_SURROGATE, D = 64, 48, 32, 3


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _models(p):
    def model(X, Y):
        theta = p.sample("theta", dist.Normal(jnp.zeros(D), jnp.ones(D)).to_event(1))
        with p.plate("N", N, subsample_size=SUBSAMPLE):
            x = p.subsample(X, event_dim=1)
            y = p.subsample(Y, event_dim=0)
            p.sample("obs", dist.Bernoulli(logits=theta @ x.T), obs=y)

    def surrogate(X, Y):
        theta = p.sample("theta", dist.Normal(jnp.zeros(D), jnp.ones(D)).to_event(1))
        omegas = p.param("omegas", 2.0 * jnp.ones(NUM_SURROGATE),
                         constraint=dist.constraints.positive)
        with p.plate("N", NUM_SURROGATE), p.handlers.scale(scale=omegas):
            p.sample("obs", dist.Bernoulli(logits=theta @ X.T), obs=Y)
    return model, surrogate


def _fit(p, steps=150):
    X = np.random.RandomState(0).randn(N, D)
    X[:, 2] = X[:, 0] + X[:, 1]
    Y = np.asarray(dist.Bernoulli(logits=X[:, 0] - 0.5 * X[:, 1]).sample(jax.random.PRNGKey(0)))
    model, surrogate = _models(p)
    model = partial(model, X, Y)
    surrogate = partial(surrogate, X[:NUM_SURROGATE], Y[:NUM_SURROGATE])
    guide = p.infer.autoguide.AutoSurrogateLikelihoodDAIS(model, surrogate, K=3, eta_max=0.25,
                                                          eta_init=0.005)
    svi = p.infer.SVI(model, guide, p.optim.Adam(1e-2), p.infer.Trace_ELBO())
    result = svi.run(jax.random.PRNGKey(1), steps, progress_bar=False)
    draws = guide.sample_posterior(jax.random.PRNGKey(2), result.params, sample_shape=(500,))
    return result, draws


@pytest.mark.slow
def test_matches_numpyro_step_by_step():
    ours, our_draws = _fit(effppl)
    theirs, their_draws = _fit(numpyro)
    np.testing.assert_allclose(ours.losses, theirs.losses, rtol=1e-8)
    assert set(ours.params) == set(theirs.params)
    for name in theirs.params:
        np.testing.assert_allclose(ours.params[name], theirs.params[name], rtol=1e-6,
                                   atol=1e-10, err_msg=name)
    # the surrogate's weights are the guide's params, fitted
    assert np.abs(np.asarray(ours.params["omegas"]) - 2.0).max() > 0.01
    np.testing.assert_allclose(our_draws["theta"], their_draws["theta"], rtol=1e-6, atol=1e-9)


def test_bad_surrogate_is_named():
    model, _ = _models(effppl)
    guide = AutoSurrogateLikelihoodDAIS(model, 3)  # accepted when built, as NumPyro's
    X, Y = np.zeros((N, D)), np.zeros(N)
    with pytest.raises(AutoGuideError, match="surrogate_model=3.*callable"):
        effppl.handlers.seed(guide, 0)(X, Y)
    with pytest.raises(AutoGuideError, match="AutoSurrogateLikelihoodDAIS are not supported"):
        effppl.infer.autoguide.AutoGuideList(model).append(
            AutoSurrogateLikelihoodDAIS(model, surrogate_model=None))
    with pytest.raises(AutoGuideError, match="K=0"):
        AutoSurrogateLikelihoodDAIS(model, lambda: None, K=0)
