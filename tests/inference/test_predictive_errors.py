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


def test_empty_posterior_samples_without_num_samples_is_an_error_saying_what_to_pass():
    with pytest.raises(PredictiveError, match="pass `num_samples`"):
        Predictive(model, {})
    assert Predictive(model, {}, num_samples=3)(jax.random.key(0))["y"].shape == (3,)


def test_a_bad_key_is_a_predictive_error():
    with pytest.raises(PredictiveError, match="expected a PRNG key"):
        Predictive(model, num_samples=2)(0)


def test_init_to_value_needs_a_dict():
    from effppl.infer import InitializationError, init_to_value
    with pytest.raises(InitializationError, match="expected a dict site name"):
        init_to_value(3.0)


def test_unknown_site_in_posterior_samples_is_named():
    with pytest.raises(PredictiveError, match="mux"):
        Predictive(model, {"mux": jnp.zeros(3)})(jax.random.PRNGKey(0))
    out = Predictive(model, {"mu": jnp.array([0.0, 5.0])})(jax.random.PRNGKey(0))
    assert out["y"].shape == (2,) and float(out["y"][1]) > float(out["y"][0])


def _observed_in_while(y, n):
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))

    def body(i):
        effppl.sample("y", dist.Normal(mu, 1.0), obs=y[i])
        return i + 1
    jax.lax.while_loop(lambda i: i < n, body, 0)


def test_observed_sites_in_a_while_loop_are_loud_under_nuts_and_log_likelihood():
    """JAX cannot differentiate the loop in reverse mode: NUTS says so in effppl's terms, and
    log_likelihood warns that those sites have no pointwise values (never a silent `{}`)."""
    from effppl.infer import MCMC, NUTS, InitializationError, log_likelihood

    y, n = jnp.array([0.5, -1.0, 2.0]), jnp.int32(3)
    with pytest.raises(InitializationError, match="`lax.while_loop` in reverse mode"):
        MCMC(NUTS(_observed_in_while), num_warmup=5, num_samples=5,
             progress_bar=False).run(jax.random.key(0), y, n)
    with pytest.warns(UserWarning, match=r"\['y'\].*while_loop"):
        assert log_likelihood(_observed_in_while, {"mu": jnp.zeros(3)}, y, n) == {}
