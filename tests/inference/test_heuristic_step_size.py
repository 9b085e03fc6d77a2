"""NumPyro's `find_heuristic_step_size=True`: Hoffman and Gelman's step-size heuristic before the
warmup's first transition and after each window's end, on NumPyro's logistic regression."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import HMC, MCMC, NUTS, HMCGibbs, KernelSettingsError


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _normal():
    effppl.sample("x", dist.Normal(0.0, 1.0))


@pytest.mark.parametrize("kernel", [HMC, NUTS])
def test_the_first_step_size_comes_from_the_heuristic(kernel):
    """From a step size of 1e-4 on a standard normal, the first warmup transition runs at the
    heuristic's (one leapfrog step accepted with probability about 0.8: a step of order 1),
    and without the option at 1e-4 itself."""
    first = {}
    for heuristic in (False, True):
        mcmc = MCMC(kernel(_normal, step_size=1e-4, find_heuristic_step_size=heuristic),
                    num_warmup=200, num_samples=10, num_chains=2, progress_bar=False)
        mcmc.warmup(jax.random.key(0), collect_warmup=True, extra_fields=("step_size",))
        first[heuristic] = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["step_size"])
    np.testing.assert_allclose(first[False][:, 0], 1e-4)
    # the heuristic doubles from 1e-4 until one step's acceptance falls below 0.8: 2^k * 1e-4
    steps = first[True][:, 0]
    assert np.all((steps > 0.3) & (steps < 4.0)), steps
    np.testing.assert_allclose(np.log2(steps / 1e-4), np.round(np.log2(steps / 1e-4)),
                               atol=1e-9)


def _wide():
    effppl.sample("x", dist.Normal(0.0, 100.0))


def test_the_step_size_restarts_after_a_window():
    """On a normal of scale 100, the identity mass matrix of the first 100 transitions needs
    steps of order 100; Stan's first slow window (75 + 25) then adapts the inverse mass matrix
    to about 1e4, where steps of order 1 are right. The heuristic gives those from transition
    100 on; without it the dual averaging restarts from the window's average (order 100)."""
    after = {}
    for heuristic in (False, True):
        mcmc = MCMC(NUTS(_wide, find_heuristic_step_size=heuristic), num_warmup=200,
                    num_samples=10, num_chains=2, progress_bar=False)
        mcmc.warmup(jax.random.key(1), collect_warmup=True, extra_fields=("step_size",))
        steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["step_size"])
        assert np.all(steps[:, 99] > 10.0)  # (the identity's step sizes, both runs)
        after[heuristic] = steps[:, 100]
    assert np.all(after[False] > 10.0), after
    assert np.all((after[True] > 0.2) & (after[True] < 5.0)), after


def test_numpyros_logistic_regression():
    """NumPyro's `test_logistic_regression_x64` with `find_heuristic_step_size=True`."""
    n, dim = 3000, 3
    key1, key2, key3 = jax.random.split(jax.random.key(0), 3)
    data = jax.random.normal(key1, (n, dim))
    true_coefs = jnp.arange(1.0, dim + 1.0)
    labels = dist.Bernoulli(logits=jnp.sum(true_coefs * data, axis=-1)).sample(key2)

    def model(labels):
        coefs = effppl.sample("coefs", dist.Normal(jnp.zeros(dim), jnp.ones(dim)))
        effppl.sample("obs", dist.Bernoulli(logits=jnp.sum(coefs * data, axis=-1)), obs=labels)

    for kernel in (HMC, NUTS):
        mcmc = MCMC(kernel(model, trajectory_length=8, find_heuristic_step_size=True),
                    num_warmup=500, num_samples=1000, progress_bar=False)
        mcmc.run(key3, labels)
        np.testing.assert_allclose(mcmc.get_samples()["coefs"].mean(0), true_coefs, atol=0.4)


def test_errors():
    with pytest.raises(KernelSettingsError, match="find_heuristic_step_size"):
        NUTS(_normal, find_heuristic_step_size="yes")
    with pytest.raises(KernelSettingsError, match="find_heuristic_step_size.*Fisher"):
        NUTS(_normal, find_heuristic_step_size=True, mass_matrix="low_rank")
    with pytest.raises(KernelSettingsError, match="find_heuristic_step_size"):
        HMCGibbs(NUTS(_normal, find_heuristic_step_size=True), gibbs_fn=lambda **k: k,
                 gibbs_sites=["x"])
