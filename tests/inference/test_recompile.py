"""Repeated runs on new data of the same shapes trace nothing and compile nothing."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from effppl.infer import MCMC, NUTS, Predictive, log_likelihood

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


def test_second_run_with_new_data_compiles_nothing(model):
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
    # One bare trace of the model per run, to check that what it closes over is unchanged; no
    # re-translation of its handlers (that would call it again per handler pass and per site).
    assert model.calls == calls + 2
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


GLOBAL_Y = jnp.zeros(20)


def _reads_a_global():
    m.normal_normal(GLOBAL_Y)


class _Setting:
    loc = 3.0


def _reads_a_setting():
    m.sample("x", m.dist.Normal(_Setting.loc, 0.1))


def test_a_changed_global_is_used_not_a_stale_compiled_value(monkeypatch):
    """A model that reads a global array or a setting instead of taking them as arguments: when
    they change, the cached compiled functions are rebuilt (NumPyro re-traces every run), and
    when they do not, nothing is compiled again."""
    def posterior_mean(mcmc_or_none=None):
        mcmc = mcmc_or_none or MCMC(NUTS(_reads_a_global), num_warmup=100, num_samples=200,
                                    progress_bar=False)
        mcmc.run(jax.random.key(0))
        return float(np.mean(mcmc.get_samples()["mu"])), mcmc

    before, mcmc = posterior_mean()
    with count_compilations() as count:
        posterior_mean(mcmc)
    assert count[0] == 0
    y = m.normal_normal_data(n=20) + 10.0
    monkeypatch.setattr(f"{__name__}.GLOBAL_Y", jnp.asarray(y))
    expected, _ = m.normal_normal_posterior(y)
    assert abs(posterior_mean()[0] - expected) < 0.5      # a new MCMC object
    assert abs(posterior_mean(mcmc)[0] - expected) < 0.5  # the same one
    assert abs(before - expected) > 5.0

    draw = Predictive(_reads_a_setting, num_samples=200)
    assert float(np.mean(draw(jax.random.key(0))["x"])) == pytest.approx(3.0, abs=0.05)
    monkeypatch.setattr(_Setting, "loc", -3.0)
    assert float(np.mean(draw(jax.random.key(0))["x"])) == pytest.approx(-3.0, abs=0.05)


_KEY = jax.random.key(0)


def _offset_by_a_global_key():
    m.sample("x", m.dist.Normal(jax.random.normal(_KEY), 0.01))


def test_a_global_prng_key_is_compared_by_its_data(monkeypatch):
    draw = Predictive(_offset_by_a_global_key, num_samples=50)
    first = float(np.mean(draw(jax.random.key(1))["x"]))
    with count_compilations() as count:
        assert float(np.mean(draw(jax.random.key(1))["x"])) == first
    assert count[0] == 0
    monkeypatch.setattr(f"{__name__}._KEY", jax.random.key(7))
    expected = float(jax.random.normal(jax.random.key(7)))
    assert float(np.mean(draw(jax.random.key(1))["x"])) == pytest.approx(expected, abs=0.01)
