"""Models with known posteriors, and their analytic answers, for the inference tests."""

import jax.numpy as jnp
import numpy as np

from ._ppl import deterministic, dist, factor, mask, plate, sample, scan

PRIOR_LOC, PRIOR_SCALE, NOISE = 1.0, 2.0, 1.5


def normal_normal(y):
    """mu ~ N(1, 2); y_i ~ N(mu, 1.5): conjugate, posterior in closed form."""
    mu = sample("mu", dist.Normal(PRIOR_LOC, PRIOR_SCALE))
    deterministic("mu2", 2.0 * mu)
    with plate("n", y.shape[0]):
        sample("y", dist.Normal(mu, NOISE), obs=y)


def deterministic_mean():
    """a ~ N(0, 1); d = 2a (deterministic); y ~ N(d, 0.001): y shows the value d took."""
    a = sample("a", dist.Normal(0.0, 1.0))
    d = deterministic("d", 2.0 * a)
    sample("y", dist.Normal(d, 0.001))


def masked_observations(y, valid):
    """mu ~ N(0, 1); y_i ~ N(mu, 1) counted only where `valid`."""
    mu = sample("mu", dist.Normal(0.0, 1.0))
    with mask(mask=valid), plate("n", y.shape[0]):
        sample("y", dist.Normal(mu, 1.0), obs=y)


def normal_normal_posterior(y):
    """(mean, sd) of mu given y for `normal_normal`."""
    precision = 1 / PRIOR_SCALE**2 + len(y) / NOISE**2
    mean = (PRIOR_LOC / PRIOR_SCALE**2 + np.sum(y) / NOISE**2) / precision
    return mean, precision**-0.5


def normal_normal_data(n=20, seed=0):
    return np.random.default_rng(seed).normal(2.5, NOISE, n)


def regression(X, y=None):
    """beta ~ N(0, 3 I); y ~ N(X beta, 1): Gaussian posterior in closed form."""
    beta = sample("beta", dist.Normal(0.0, 3.0).expand([X.shape[1]]).to_event(1))
    with plate("n", X.shape[0]):
        sample("y", dist.Normal(X @ beta, 1.0), obs=y)


def regression_data(n=30, seed=1):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=n)
    X = np.stack([z, z + 0.05 * rng.normal(size=n)], axis=1)  # strongly correlated columns
    y = X @ np.array([1.0, -1.0]) + rng.normal(size=n)
    return X, y


def regression_posterior(X, y):
    """(mean, covariance) of beta for `regression`."""
    cov = np.linalg.inv(X.T @ X + np.eye(X.shape[1]) / 9.0)
    return cov @ X.T @ y, cov


def scale_model(y=None):
    """sigma ~ HalfNormal(1) (constrained), mu ~ N(0, 1); y ~ N(mu, sigma)."""
    sigma = sample("sigma", dist.HalfNormal(1.0))
    mu = sample("mu", dist.Normal(0.0, 1.0))
    with plate("n", 5):
        sample("y", dist.Normal(mu, sigma), obs=y)


def hierarchical(y=None):
    """mu ~ N(3, 1); theta ~ N(mu, 0.01): theta's prior median follows mu's."""
    mu = sample("mu", dist.Normal(3.0, 1.0))
    theta = sample("theta", dist.Normal(mu, 0.01))
    sample("y", dist.Normal(theta, 1.0), obs=y)


def nan_region(y):
    """Log density NaN for x > 1: proposals there are divergences, not crashes."""
    x = sample("x", dist.Normal(0.0, 1.0))
    factor("wall", jnp.where(x > 1.0, jnp.nan, 0.0))
    sample("y", dist.Normal(x, 1.0), obs=y)


def always_nan(y):
    x = sample("x", dist.Normal(0.0, 1.0))
    factor("broken", jnp.nan * x)
    sample("y", dist.Normal(x, 1.0), obs=y)


def nan_gradient(y):
    """Finite log density, NaN gradient (the `where` trap: the dead branch's NaN derivative)."""
    x = sample("x", dist.Normal(0.0, 1.0))
    factor("trap", jnp.where(x > -100.0, 0.0, jnp.sqrt(-1.0 - x**2)))
    sample("y", dist.Normal(x, 1.0), obs=y)


def discrete_latent(y=None):
    k = sample("k", dist.Bernoulli(0.5))
    sample("y", dist.Normal(k, 1.0), obs=y)


def no_latent(y):
    sample("y", dist.Normal(0.0, 1.0), obs=y)


def local_level(y):
    """x_t ~ N(x_{t-1}, 0.5), y_t ~ N(x_t, 1): latent sites inside a scan."""
    x0 = sample("x0", dist.Normal(0.0, 1.0))

    def step(x_prev, y_t):
        x = sample("x", dist.Normal(x_prev, 0.5))
        sample("y", dist.Normal(x, 1.0), obs=y_t)
        return x, None

    scan(step, x0, y)


def local_level_prior(T=8):
    """`local_level` without observations (for predictive draws of `y` inside the scan)."""
    x0 = sample("x0", dist.Normal(0.0, 1.0))

    def step(x_prev, _):
        x = sample("x", dist.Normal(x_prev, 0.5))
        sample("y", dist.Normal(x, 1.0))
        return x, None

    scan(step, x0, None, length=T)


def improper_ordered(y=None):
    """A flat prior without a sampler (ImproperUniform) on a positive ordered vector."""
    mu = sample("mu", dist.ImproperUniform(dist.constraints.positive_ordered_vector, (), (2,)))
    factor("prior", dist.Normal(3.0, 1.0).log_prob(mu[0]) + dist.Normal(10.0, 1.0).log_prob(mu[1]))
    sample("y", dist.Normal(mu[0], 1.0), obs=y)
