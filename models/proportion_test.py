"""Proportion test: Bayesian logistic regression on a simulated A/B test.

Ported from NumPyro's `examples/proportion_test.py` (`model`, `make_dataset`); the first benchmark
model of the paper ("Handling JAX", §7.2, Tables 1-2; 3M rows there). Customers who got a sales
call buy with probability 0.084, the others with 0.061; the covariates are an intercept, whether
the customer was called, and gender. Synthetic data, from numpy with a fixed seed.

Deviation: `jnp.dot(design_matrix, beta)` for `design_matrix.dot(beta)`, so numpy data work too.
"""

import jax.numpy as jnp
import numpy as np
import numpyro
from jax.nn import softplus

import effppl
from effppl import distributions as dist
from models._data import resolve_size

NAME = "proportion_test"
SIZES = {"quick": 1_000, "paper": 3_000_000}


def make_data(size="quick", seed=0):
    """`((design_matrix (N, 3) float64, outcome (N,) float64), {})`; 51.342% of rows called.

    **Raises:** `SizeError` unless `size` is a key of `SIZES` or a positive int.
    """
    n = resolve_size(SIZES, size, NAME)
    rng = np.random.default_rng(seed)
    num_calls = round(n * 51342 / 100000)
    got_called = np.arange(n) < num_calls
    made_purchase = rng.random(n) < np.where(got_called, 0.084, 0.061)
    is_female = rng.random(n) < 0.5
    design_matrix = np.stack([np.ones(n), got_called, is_female], axis=1).astype(np.float64)
    return (design_matrix, made_purchase.astype(np.float64)), {}


def effppl_model(design_matrix, outcome=None):
    num_features = design_matrix.shape[1]
    beta = effppl.sample(
        "coefficients",
        dist.MultivariateNormal(loc=0.0, covariance_matrix=jnp.eye(num_features)),
    )
    logits = jnp.dot(design_matrix, beta)
    with effppl.plate("data", design_matrix.shape[0]):
        effppl.sample("obs", dist.Bernoulli(logits=logits), obs=outcome)


def numpyro_model(design_matrix, outcome=None):
    beta = numpyro.sample(
        "coefficients",
        dist.MultivariateNormal(loc=0.0, covariance_matrix=jnp.eye(design_matrix.shape[1])),
    )
    logits = jnp.dot(design_matrix, beta)
    with numpyro.plate("data", design_matrix.shape[0]):
        numpyro.sample("obs", dist.Bernoulli(logits=logits), obs=outcome)


def handwritten_log_density(params, design_matrix, outcome):
    """Log joint in unconstrained space (all sites are real: no Jacobian)."""
    beta = params["coefficients"]
    logits = design_matrix @ beta
    log_prior = -0.5 * jnp.sum(beta**2) - 0.5 * beta.shape[0] * jnp.log(2 * jnp.pi)
    return log_prior + jnp.sum(outcome * logits - softplus(logits))


def latent_shapes(design_matrix, outcome=None):
    return {"coefficients": (design_matrix.shape[1],)}
