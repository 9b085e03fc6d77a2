"""A tiny logistic regression with the interface of a `models/` module, for the harness tests."""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

NAME = "toy"
SIZES = {"quick": 50, "paper": 1000}


def make_data(size="quick", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]
    x = rng.normal(size=(n, 2))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-x @ np.array([1.0, -0.5])))).astype(np.int32)
    return (x,), {"y": y}


def numpyro_model(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    numpyro.sample("y", dist.Bernoulli(logits=s * (x @ w)), obs=y)


def handwritten_log_density(params, x, y=None):
    w, log_s = params["w"], params["s"]
    s = jnp.exp(log_s)
    lp = -0.5 * jnp.sum(w**2) - jnp.log(2 * jnp.pi)
    lp += jnp.log(jnp.sqrt(2 / jnp.pi)) - 0.5 * s**2 + log_s
    logits = s * (x @ w)
    lp += jnp.sum(y * logits - jnp.logaddexp(0.0, logits))
    return lp


def latent_shapes(x, y=None):
    return {"w": (2,), "s": ()}
