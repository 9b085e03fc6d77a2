"""`SA` (sample adaptive MCMC) against analytic posteriors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax, random

import effppl
from effppl import distributions as dist
from effppl.infer import MCMC, SA, KernelSettingsError
from effppl.infer.util import log_density


@pytest.mark.parametrize("dense_mass", [False, True])
def test_correlated_gaussian_moments(dense_mass):
    """A 2-d Gaussian (correlation 0.8) given as NumPyro's `potential_fn`: the draws' means and
    covariance against the exact ones."""
    mean = jnp.array([1.0, -2.0])
    cov = jnp.array([[1.0, 0.8 * 0.5], [0.8 * 0.5, 0.25]])
    precision = jnp.linalg.inv(cov)

    def potential_fn(z):
        return 0.5 * (z - mean) @ precision @ (z - mean)

    mcmc = MCMC(SA(potential_fn=potential_fn, dense_mass=dense_mass), num_warmup=5000,
                num_samples=20000, progress_bar=False)
    mcmc.run(random.key(0), init_params=jnp.zeros(2))
    draws = np.asarray(mcmc.get_samples())
    np.testing.assert_allclose(draws.mean(0), mean, atol=0.1)
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=0.1)


def test_beta_bernoulli_posterior_mean():
    """Beta(1.1, 1.1) priors and 1000 coin flips: the conjugate posterior mean."""
    data = dist.Bernoulli(jnp.array([0.9, 0.1])).sample(random.key(1), (1000,))

    def model(data):
        p = effppl.sample("p", dist.Beta(jnp.full(2, 1.1), jnp.full(2, 1.1)))
        effppl.sample("obs", dist.Bernoulli(p), obs=data)

    mcmc = MCMC(SA(model), num_warmup=10000, num_samples=10000, progress_bar=False)
    mcmc.run(random.key(2), data)
    exact = (1.1 + data.sum(0)) / (2.2 + data.shape[0])
    np.testing.assert_allclose(mcmc.get_samples()["p"].mean(0), exact, atol=0.01)


def test_gradient_free_model_with_a_while_loop():
    """A `lax.while_loop` whose trip count depends on the latent site (no reverse-mode
    gradient): x ~ N(0, 1), 1.0 ~ N(x, 1), so x | obs ~ N(0.5, 1/2)."""
    def model():
        x = effppl.sample("x", dist.Normal(0.0, 1.0))
        _, y = lax.while_loop(lambda c: c[0] < jnp.abs(x) * 3, lambda c: (c[0] + 1.0, c[1] * 1.0),
                              (0.0, x))
        effppl.sample("obs", dist.Normal(y, 1.0), obs=1.0)

    with pytest.raises(ValueError, match="while_loop"):
        jax.grad(lambda x: log_density(model, (), {}, {"x": x})[0])(0.3)
    mcmc = MCMC(SA(model, adapt_state_size=10), num_warmup=3000, num_samples=20000,
                num_chains=2, progress_bar=False)
    mcmc.run(random.key(0))
    x = mcmc.get_samples()["x"]
    assert x.shape == (40000,)
    assert abs(float(x.mean()) - 0.5) < 0.08
    assert abs(float(x.var()) - 0.5) < 0.08


def test_warmup_then_run_keeps_the_population():
    def model():
        effppl.sample("x", dist.Normal(3.0, 2.0))

    mcmc = MCMC(SA(model, adapt_state_size=5), num_warmup=200, num_samples=4000,
                progress_bar=False)
    mcmc.warmup(random.key(0))
    population = mcmc.post_warmup_state.kernel_state
    assert population["zs"].shape == (1, 5, 1) and int(population["count"][0]) == 5  # chain 0
    mcmc.run(random.key(1))
    x = mcmc.get_samples()["x"]
    assert abs(float(x.mean()) - 3.0) < 0.3 and abs(float(x.std()) - 2.0) < 0.3
    # a population filled anew would hold the first 5 draws at the warmup's last point
    assert len(set(np.asarray(x[:5]).tolist())) > 1


def test_errors():
    def model():
        effppl.sample("x", dist.Normal())

    with pytest.raises(KernelSettingsError, match="greater than 1"):
        SA(model, adapt_state_size=1)
    with pytest.raises(KernelSettingsError, match="Only one of"):
        SA()
    with pytest.raises(KernelSettingsError, match="Only one of"):
        SA(model, potential_fn=lambda z: z ** 2)
    with pytest.raises(KernelSettingsError, match="dense_mass"):
        SA(model, dense_mass="yes")
