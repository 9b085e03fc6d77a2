"""Expressiveness showcase: three models with sites inside plain `lax.scan` and `lax.cond`.

The paper's models of §7.2, Figs. 13-14 ("Handling JAX"), written with effppl and plain JAX
control flow, each with a NumPyro version (its `numpyro.contrib.control_flow.scan`/`cond`), a
hand-written log joint in *constrained* space as the test oracle, and a small synthetic data set
drawn with numpy and a fixed seed:

- `hmm`: a two-state Gaussian HMM (the Stan example of posteriordb's `hmm_example`), its discrete
  states marginalised by the forward algorithm in a plain scan, one observed site per step.
  NumPyro expresses it with its own `scan`.
- `hierarchical_hmm`: nested scans, a group level sampled in the outer scan and a random-walk
  state in the inner one. NumPyro traces the nested `scan` but its `log_density` raises
  `RuntimeError: ... nested scan, which is currently not supported`.
- `regime_switching_ssm`: a state-space model whose step is a `lax.cond` on a known regime, with a
  Normal step in calm and a StudentT step in turbulent regimes. NumPyro's `cond` rejects it at
  trace time (`TypeError: cond branch outputs must have the same pytree structure`): both branches
  must sample from the same distribution class.

`SHOWCASE` maps each name to a `Showcase` of its functions.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import numpyro
from jax import lax
from jax.scipy.special import gammaln, logsumexp
from jax.scipy.stats import gamma, norm, t
from numpyro.contrib.control_flow import cond as np_cond
from numpyro.contrib.control_flow import scan as np_scan

import effppl
from effppl import distributions as dist


class Showcase(NamedTuple):
    model: Callable  # effppl, plain lax control flow
    numpyro_model: Callable  # NumPyro, its contrib scan/cond
    log_joint: Callable  # log_joint(values, *args): hand-written, constrained space
    make_data: Callable  # make_data(seed=0) -> (args, kwargs)
    numpyro_fails: bool  # True if NumPyro cannot evaluate numpyro_model's log density


# --- (a) HMM, forward algorithm in a plain scan (Fig. 13) ---
HMM_MU_PRIOR = np.array([3.0, 10.0])


def hmm(y):
    theta = effppl.sample("theta", dist.Dirichlet(jnp.ones((2, 2))))  # rows: p(z_t | z_{t-1})
    mu = effppl.sample("mu", dist.Normal(HMM_MU_PRIOR, 1.0))
    log_theta = jnp.log(theta)

    def step(log_pred, y_t):  # log_pred = log p(z_t | y_{<t})
        emission = dist.MixtureSameFamily(dist.Categorical(logits=log_pred), dist.Normal(mu, 1.0))
        effppl.sample("y", emission, obs=y_t)
        log_post = log_pred + norm.logpdf(y_t, mu, 1.0)
        log_post = log_post - logsumexp(log_post)
        return logsumexp(log_post[:, None] + log_theta, axis=0), None

    lax.scan(step, jnp.log(jnp.full(2, 0.5)), y)


def hmm_numpyro(y):
    theta = numpyro.sample("theta", dist.Dirichlet(jnp.ones((2, 2))))
    mu = numpyro.sample("mu", dist.Normal(HMM_MU_PRIOR, 1.0))
    log_theta = jnp.log(theta)

    def step(log_pred, y_t):
        emission = dist.MixtureSameFamily(dist.Categorical(logits=log_pred), dist.Normal(mu, 1.0))
        numpyro.sample("y", emission, obs=y_t)
        log_post = log_pred + norm.logpdf(y_t, mu, 1.0)
        log_post = log_post - logsumexp(log_post)
        return logsumexp(log_post[:, None] + log_theta, axis=0), None

    np_scan(step, jnp.log(jnp.full(2, 0.5)), y)


def hmm_log_joint(values, y):
    """Dirichlet and Normal priors plus the unnormalised forward recursion
    `alpha_t = logsumexp_i(alpha_{t-1, i} + log theta_ij) + log N(y_t | mu_j, 1)`."""
    theta, mu = values["theta"], values["mu"]
    lp = 2 * gammaln(2.0) + jnp.sum(norm.logpdf(mu, HMM_MU_PRIOR, 1.0))  # Dirichlet(1, 1) = 1
    log_lik = norm.logpdf(y[:, None], mu, 1.0)  # (T, K)

    def forward(alpha, log_lik_t):
        return logsumexp(alpha[:, None] + jnp.log(theta), axis=0) + log_lik_t, None

    alpha, _ = lax.scan(forward, jnp.log(0.5) + log_lik[0], log_lik[1:])
    return lp + logsumexp(alpha)


def hmm_data(seed=0, num_steps=60):
    rng = np.random.default_rng(seed)
    theta = np.array([[0.9, 0.1], [0.2, 0.8]])
    z = [rng.integers(2)]
    for _ in range(num_steps - 1):
        z.append(int(rng.random() < theta[z[-1], 1]))
    y = rng.normal(HMM_MU_PRIOR[np.array(z)], 1.0)
    return (y,), {}


# --- (b) hierarchical HMM, nested scans (Fig. 14, left) ---
def hierarchical_hmm(y):
    """`y`: `(groups, steps)`. Sites: `level` `(G,)` in the outer scan, `z` `(G, T)` inside."""
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
    tau = effppl.sample("tau", dist.HalfNormal(1.0))
    sigma_walk = effppl.sample("sigma_walk", dist.HalfNormal(0.5))
    sigma_obs = effppl.sample("sigma_obs", dist.HalfNormal(1.0))

    def group(carry, y_g):
        level = effppl.sample("level", dist.Normal(mu, tau))

        def step(z_prev, y_gt):
            z = effppl.sample("z", dist.Normal(z_prev, sigma_walk))
            effppl.sample("y", dist.Normal(level + z, sigma_obs), obs=y_gt)
            return z, None

        lax.scan(step, jnp.zeros(()), y_g)
        return carry, None

    lax.scan(group, jnp.zeros(()), y)


def hierarchical_hmm_numpyro(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    tau = numpyro.sample("tau", dist.HalfNormal(1.0))
    sigma_walk = numpyro.sample("sigma_walk", dist.HalfNormal(0.5))
    sigma_obs = numpyro.sample("sigma_obs", dist.HalfNormal(1.0))

    def group(carry, y_g):
        level = numpyro.sample("level", dist.Normal(mu, tau))

        def step(z_prev, y_gt):
            z = numpyro.sample("z", dist.Normal(z_prev, sigma_walk))
            numpyro.sample("y", dist.Normal(level + z, sigma_obs), obs=y_gt)
            return z, None

        np_scan(step, jnp.zeros(()), y_g)
        return carry, None

    np_scan(group, jnp.zeros(()), y)


def hierarchical_hmm_log_joint(values, y):
    mu, tau, level, z = values["mu"], values["tau"], values["level"], values["z"]
    sigma_walk, sigma_obs = values["sigma_walk"], values["sigma_obs"]
    lp = norm.logpdf(mu) + 3 * jnp.log(2.0) + norm.logpdf(tau, 0.0, 1.0)
    lp += norm.logpdf(sigma_walk, 0.0, 0.5) + norm.logpdf(sigma_obs, 0.0, 1.0)
    lp += jnp.sum(norm.logpdf(level, mu, tau))
    z_prev = jnp.concatenate([jnp.zeros_like(z[:, :1]), z[:, :-1]], axis=1)
    lp += jnp.sum(norm.logpdf(z, z_prev, sigma_walk))
    return lp + jnp.sum(norm.logpdf(y, level[:, None] + z, sigma_obs))


def hierarchical_hmm_data(seed=0, num_groups=4, num_steps=25):
    rng = np.random.default_rng(seed)
    level = rng.normal(0.5, 1.0, num_groups)
    z = np.cumsum(rng.normal(0.0, 0.3, (num_groups, num_steps)), axis=1)
    return (level[:, None] + z + rng.normal(0.0, 0.5, z.shape),), {}


# --- (c) regime-switching state-space model, a different family per branch (Fig. 14, right) ---
def regime_switching_ssm(regime, y):
    """`regime`: `(T,)` ints, 1 = turbulent (StudentT step), 0 = calm (Normal step)."""
    sigma_calm = effppl.sample("sigma_calm", dist.HalfNormal(0.5))
    sigma_turbulent = effppl.sample("sigma_turbulent", dist.HalfNormal(2.0))
    nu = effppl.sample("nu", dist.Gamma(2.0, 0.1))
    sigma_obs = effppl.sample("sigma_obs", dist.HalfNormal(1.0))

    def step(x_prev, inputs):
        regime_t, y_t = inputs
        x = lax.cond(
            regime_t == 1,
            lambda: effppl.sample("x", dist.StudentT(nu, x_prev, sigma_turbulent)),
            lambda: effppl.sample("x", dist.Normal(x_prev, sigma_calm)),
        )
        effppl.sample("y", dist.Normal(x, sigma_obs), obs=y_t)
        return x, None

    lax.scan(step, jnp.zeros(()), (regime, y))


def regime_switching_ssm_numpyro(regime, y):
    sigma_calm = numpyro.sample("sigma_calm", dist.HalfNormal(0.5))
    sigma_turbulent = numpyro.sample("sigma_turbulent", dist.HalfNormal(2.0))
    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
    sigma_obs = numpyro.sample("sigma_obs", dist.HalfNormal(1.0))

    def step(x_prev, inputs):
        regime_t, y_t = inputs
        x = np_cond(
            regime_t == 1,
            lambda x_prev: numpyro.sample("x", dist.StudentT(nu, x_prev, sigma_turbulent)),
            lambda x_prev: numpyro.sample("x", dist.Normal(x_prev, sigma_calm)),
            x_prev,
        )
        numpyro.sample("y", dist.Normal(x, sigma_obs), obs=y_t)
        return x, None

    np_scan(step, jnp.zeros(()), (regime, y))


def regime_switching_ssm_log_joint(values, regime, y):
    x, nu = values["x"], values["nu"]
    sigma_calm, sigma_turbulent = values["sigma_calm"], values["sigma_turbulent"]
    sigma_obs = values["sigma_obs"]
    lp = 3 * jnp.log(2.0) + norm.logpdf(sigma_calm, 0.0, 0.5)
    lp += norm.logpdf(sigma_turbulent, 0.0, 2.0) + norm.logpdf(sigma_obs, 0.0, 1.0)
    lp += gamma.logpdf(nu, 2.0, scale=10.0)
    x_prev = jnp.concatenate([jnp.zeros(1), x[:-1]])
    step = jnp.where(regime == 1, t.logpdf(x, nu, x_prev, sigma_turbulent),
                     norm.logpdf(x, x_prev, sigma_calm))
    return lp + jnp.sum(step) + jnp.sum(norm.logpdf(y, x, sigma_obs))


def regime_switching_ssm_data(seed=0, num_steps=60):
    rng = np.random.default_rng(seed)
    regime = (np.arange(num_steps) // 15 % 2).astype(np.int64)  # calm, turbulent, calm, ...
    steps = np.where(regime == 1, 1.0 * rng.standard_t(3.0, num_steps),
                     0.2 * rng.standard_normal(num_steps))
    x = np.cumsum(steps)
    return (regime, x + rng.normal(0.0, 0.3, num_steps)), {}


SHOWCASE = {
    "hmm": Showcase(hmm, hmm_numpyro, hmm_log_joint, hmm_data, numpyro_fails=False),
    "hierarchical_hmm": Showcase(hierarchical_hmm, hierarchical_hmm_numpyro,
                                 hierarchical_hmm_log_joint, hierarchical_hmm_data,
                                 numpyro_fails=True),
    "regime_switching_ssm": Showcase(regime_switching_ssm, regime_switching_ssm_numpyro,
                                     regime_switching_ssm_log_joint, regime_switching_ssm_data,
                                     numpyro_fails=True),
}
