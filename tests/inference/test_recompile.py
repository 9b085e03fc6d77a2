"""Repeated runs on new data of the same shapes trace nothing and compile nothing."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from effppl.inference import MCMC, NUTS, Predictive, log_likelihood

from . import _models as m

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def count_compilations():
    """Count XLA backend compilations (one event per executable built, eager ops included)."""
    count = [0]

    def listener(event, duration, **kwargs):
        if event == _BACKEND_COMPILE:
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield count
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


class CountingModel:
    """`normal_normal`, counting how often it is traced (every trace calls the Python model)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, y):
        self.calls += 1
        return m.normal_normal(y)


@pytest.fixture(scope="module")
def model():
    return CountingModel()


def test_counter_sees_compilations():
    with count_compilations() as count:
        jax.jit(lambda x: x * 3.0 + 1.0)(jnp.ones(7))
    assert count[0] >= 1


def test_second_run_with_new_data_compiles_and_traces_nothing(model):
    y = m.normal_normal_data(n=20, seed=0)
    mcmc = MCMC(NUTS(model), num_warmup=50, num_samples=50, num_chains=2, progress_bar=False)
    mcmc.run(jax.random.key(0), jnp.asarray(y))
    first = np.asarray(mcmc.get_samples()["mu"])
    calls = model.calls
    up, down = jnp.asarray(y + 10.0), jnp.asarray(y - 10.0)
    with count_compilations() as count:
        mcmc.run(jax.random.key(1), up)
        # A new MCMC object with the same settings shares the compiled functions.
        again = MCMC(NUTS(model), num_warmup=50, num_samples=50, num_chains=2, progress_bar=False)
        again.run(jax.random.key(2), down)
        np.asarray(again.get_samples()["mu"])
    assert count[0] == 0
    assert model.calls == calls
    # The new data were used, not values baked into the compiled sampler.
    mean, _ = m.normal_normal_posterior(y + 10.0)
    assert abs(np.mean(mcmc.get_samples()["mu"]) - mean) < 0.5
    assert abs(np.mean(first) - np.mean(mcmc.get_samples()["mu"])) > 5.0


def test_changed_shape_does_recompile(model):
    mcmc = MCMC(NUTS(model), num_warmup=50, num_samples=50, num_chains=2, progress_bar=False)
    mcmc.run(jax.random.key(0), jnp.asarray(m.normal_normal_data(n=20)))
    with count_compilations() as count:
        mcmc.run(jax.random.key(0), jnp.asarray(m.normal_normal_data(n=21)))
    assert count[0] > 0


def test_repeated_predictive_and_log_likelihood_compile_nothing():
    y = jnp.asarray(m.normal_normal_data())
    mu = jnp.linspace(-1.0, 1.0, 11)
    Predictive(m.normal_normal, {"mu": mu})(jax.random.key(0), y)
    log_likelihood(m.normal_normal, {"mu": mu}, y)
    new_mu, new_y, key = mu + 1, y + 1, jax.random.key(1)
    with count_compilations() as count:
        Predictive(m.normal_normal, {"mu": new_mu})(key, new_y)
        log_likelihood(m.normal_normal, {"mu": new_mu}, new_y)
    assert count[0] == 0
