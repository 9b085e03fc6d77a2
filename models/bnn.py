"""Bayesian neural network: a two-hidden-layer tanh MLP regression with Normal weight priors.

Ported from NumPyro's `examples/bnn.py` (`model`, `get_data`; defaults D_X = 3, D_H = 5); a
benchmark model of the paper ("Handling JAX", §7.2; 50k rows there). Synthetic data: a noisy
non-linear function of x in [-1, 1] with polynomial features, standardised; numpy, fixed seed.
"""

import jax.numpy as jnp
import numpy as np
import numpyro
from jax.scipy.stats import gamma, norm

import effppl
from effppl import distributions as dist
from models._data import resolve_size

NAME = "bnn"
SIZES = {"quick": 100, "paper": 50_000}


def make_data(size="quick", seed=0, num_features=3, num_hidden=5, sigma_obs=0.05):
    """`((X (N, D_X), Y (N, 1)) float64, {"D_H": num_hidden})`.

    **Raises:** `SizeError` unless `size` is a key of `SIZES` or an int >= 2 (one row has no
    spread to standardise `Y` by).
    """
    n = resolve_size(SIZES, size, NAME, min_size=2)
    rng = np.random.default_rng(seed)
    x = np.linspace(-1, 1, n)
    X = np.power(x[:, None], np.arange(num_features))
    W = 0.5 * rng.standard_normal(num_features)
    Y = X @ W + 0.5 * np.power(0.5 + x, 2.0) * np.sin(4.0 * x)
    Y = Y + sigma_obs * rng.standard_normal(n)
    Y = ((Y - Y.mean()) / Y.std())[:, None]
    return (X, Y), {"D_H": num_hidden}


def effppl_model(X, Y=None, D_H=5, D_Y=1):
    N, D_X = X.shape
    w1 = effppl.sample("w1", dist.Normal(jnp.zeros((D_X, D_H)), jnp.ones((D_X, D_H))))
    z1 = jnp.tanh(X @ w1)
    w2 = effppl.sample("w2", dist.Normal(jnp.zeros((D_H, D_H)), jnp.ones((D_H, D_H))))
    z2 = jnp.tanh(z1 @ w2)
    w3 = effppl.sample("w3", dist.Normal(jnp.zeros((D_H, D_Y)), jnp.ones((D_H, D_Y))))
    z3 = z2 @ w3
    prec_obs = effppl.sample("prec_obs", dist.Gamma(3.0, 1.0))
    sigma_obs = 1.0 / jnp.sqrt(prec_obs)
    with effppl.plate("data", N):
        effppl.sample("Y", dist.Normal(z3, sigma_obs).to_event(1), obs=Y)


def numpyro_model(X, Y=None, D_H=5, D_Y=1):
    N, D_X = X.shape
    w1 = numpyro.sample("w1", dist.Normal(jnp.zeros((D_X, D_H)), jnp.ones((D_X, D_H))))
    z1 = jnp.tanh(jnp.matmul(X, w1))
    w2 = numpyro.sample("w2", dist.Normal(jnp.zeros((D_H, D_H)), jnp.ones((D_H, D_H))))
    z2 = jnp.tanh(jnp.matmul(z1, w2))
    w3 = numpyro.sample("w3", dist.Normal(jnp.zeros((D_H, D_Y)), jnp.ones((D_H, D_Y))))
    z3 = jnp.matmul(z2, w3)
    prec_obs = numpyro.sample("prec_obs", dist.Gamma(3.0, 1.0))
    sigma_obs = 1.0 / jnp.sqrt(prec_obs)
    with numpyro.plate("data", N):
        numpyro.sample("Y", dist.Normal(z3, sigma_obs).to_event(1), obs=Y)


def handwritten_log_density(params, X, Y, D_H=5, D_Y=1):
    """Log joint in unconstrained space; `prec_obs` is `exp` of its parameter."""
    w1, w2, w3, log_prec = params["w1"], params["w2"], params["w3"], params["prec_obs"]
    prec = jnp.exp(log_prec)
    lp = sum(jnp.sum(norm.logpdf(w)) for w in (w1, w2, w3))
    lp += gamma.logpdf(prec, 3.0) + log_prec
    z3 = jnp.tanh(jnp.tanh(X @ w1) @ w2) @ w3
    return lp + jnp.sum(norm.logpdf(Y, z3, 1.0 / jnp.sqrt(prec)))


def latent_shapes(X, Y=None, D_H=5, D_Y=1):
    D_X = X.shape[1]
    return {"w1": (D_X, D_H), "w2": (D_H, D_H), "w3": (D_H, D_Y), "prec_obs": ()}
