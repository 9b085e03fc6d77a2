"""Stochastic volatility: a Gaussian random walk of log-volatilities behind S&P 500 returns.

Ported from NumPyro's `examples/stochastic_volatility.py` (`model`), itself after PyMC3's example
and Hoffman & Gelman (2014), NUTS paper §5; a benchmark model of the paper ("Handling JAX", §7.2;
2.5k days there). Data: daily S&P 500 returns in percent, 2006-09-26 .. 2016-09-23
(`models/data/SP500.csv`, see its SOURCE note), in file order as NumPyro reads them.
"""

import jax.numpy as jnp
import numpyro
from jax.scipy.stats import norm, t

import effppl
from effppl import distributions as dist
from models._data import SOURCES, load_sp500, resolve_size

NAME = "stochastic_volatility"
SIZES = {"quick": 250, "paper": 2_517}


def make_data(size="quick", seed=0):
    """`((returns (T,) float64,), {})`: the first `T` returns of the series; `seed` is unused.

    **Raises:** `SizeError` unless `size` is a key of `SIZES` or an int in 1..2517;
    `DataFormatError`, `DataNotFoundError` from `load_sp500`.
    """
    del seed
    n = resolve_size(SIZES, size, NAME, max_size=SOURCES["SP500.csv"].rows)
    _, returns = load_sp500()
    return (returns[:n],), {}


def effppl_model(returns):
    step_size = effppl.sample("sigma", dist.Exponential(50.0))
    s = effppl.sample("s", dist.GaussianRandomWalk(scale=step_size, num_steps=returns.shape[0]))
    nu = effppl.sample("nu", dist.Exponential(0.1))
    return effppl.sample("r", dist.StudentT(df=nu, loc=0.0, scale=jnp.exp(s)), obs=returns)


def numpyro_model(returns):
    step_size = numpyro.sample("sigma", dist.Exponential(50.0))
    s = numpyro.sample(
        "s", dist.GaussianRandomWalk(scale=step_size, num_steps=jnp.shape(returns)[0])
    )
    nu = numpyro.sample("nu", dist.Exponential(0.1))
    return numpyro.sample("r", dist.StudentT(df=nu, loc=0.0, scale=jnp.exp(s)), obs=returns)


def handwritten_log_density(params, returns):
    """Log joint in unconstrained space; `sigma` and `nu` are `exp` of their parameters."""
    log_sigma, s, log_nu = params["sigma"], params["s"], params["nu"]
    sigma, nu = jnp.exp(log_sigma), jnp.exp(log_nu)
    lp = jnp.log(50.0) - 50.0 * sigma + log_sigma  # Exponential(50) + log|d sigma/d log_sigma|
    lp += jnp.log(0.1) - 0.1 * nu + log_nu
    lp += norm.logpdf(s[0], 0.0, sigma) + jnp.sum(norm.logpdf(jnp.diff(s), 0.0, sigma))
    return lp + jnp.sum(t.logpdf(returns, nu, 0.0, jnp.exp(s)))


def latent_shapes(returns):
    return {"sigma": (), "s": (returns.shape[0],), "nu": ()}
