"""Bad input to `Predictive` is a clear `PredictiveError` naming the argument or site."""

import jax
import jax.numpy as jnp
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import Predictive, PredictiveError


def model(y=None):
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
    return effppl.sample("y", dist.Normal(mu, 1.0), obs=y)


def test_num_samples_must_be_a_positive_int():
    with pytest.raises(PredictiveError, match="num_samples=-2"):
        Predictive(model, num_samples=-2)


def test_posterior_samples_must_be_a_dict():
    with pytest.raises(PredictiveError, match="expected a dict"):
        Predictive(model, [1, 2])


def test_unknown_site_in_posterior_samples_is_named():
    with pytest.raises(PredictiveError, match="mux"):
        Predictive(model, {"mux": jnp.zeros(3)})(jax.random.PRNGKey(0))
    out = Predictive(model, {"mu": jnp.array([0.0, 5.0])})(jax.random.PRNGKey(0))
    assert out["y"].shape == (2,) and float(out["y"][1]) > float(out["y"][0])
