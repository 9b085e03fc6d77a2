"""Slow statistical tests: posteriordb reference posteriors, and NumPyro's NUTS on a scan model."""

import json
import pathlib
import warnings
import zipfile

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions.constraints as constraints
import pytest
from numpyro.contrib.control_flow import scan as numpyro_scan

from effppl.infer import MCMC, NUTS, DivergenceWarning
from effppl.infer.mcmc._adaptation import MASS_MATRICES
from models import lotka_volterra

from ._models import local_level
from ._ppl import deterministic, dist, factor, plate, sample

POSTERIORDB = pathlib.Path(__file__).resolve().parents[1] / "data" / "posteriordb"

pytestmark = pytest.mark.slow


def _reference(name):
    """posteriordb reference draws (10 chains x 1000 Stan NUTS draws): name -> (mean, sd)."""
    folder = POSTERIORDB / name
    with zipfile.ZipFile(folder / "reference_draws.json.zip") as z:
        chains = json.loads(z.read(z.namelist()[0]))
    data = json.loads((folder / "data.json").read_text())
    draws = {k: np.concatenate([c[k] for c in chains]) for k in chains[0]}
    return data, {k: (v.mean(), v.std()) for k, v in draws.items()}


def _sample(model, *args, num_warmup=1000, num_samples=1000, num_chains=4, seed=0, **kwargs):
    mcmc = MCMC(NUTS(model, **kwargs), num_warmup=num_warmup, num_samples=num_samples,
                num_chains=num_chains, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DivergenceWarning)
        mcmc.run(jax.random.key(seed), *args)
    return mcmc


def _assert_matches_reference(draws, reference):
    """Means within 0.1 reference sd, sds within 15% (the acceptance rule of the issue)."""
    for name, (mean, sd) in reference.items():
        x = draws[name]
        assert abs(x.mean() - mean) < 0.1 * sd, (name, x.mean(), mean, sd)
        assert x.std() == pytest.approx(sd, rel=0.15), (name, x.std(), sd)


def _flat(samples, name, size):
    """posteriordb names (`theta[1]`, ...) -> 1-D draws."""
    x = np.asarray(samples[name])
    if size is None:
        return {name: x}
    return {f"{name}[{i + 1}]": x[:, i] for i in range(size)}


def eight_schools_noncentered(sigma, y):
    mu = sample("mu", dist.Normal(0.0, 5.0))
    tau = sample("tau", dist.HalfCauchy(5.0))
    with plate("J", sigma.shape[0]):
        theta_trans = sample("theta_trans", dist.Normal(0.0, 1.0))
        theta = deterministic("theta", mu + tau * theta_trans)
        sample("y", dist.Normal(theta, sigma), obs=y)


@pytest.mark.parametrize("mass_matrix", MASS_MATRICES)
def test_eight_schools_noncentered_matches_posteriordb(mass_matrix):
    data, reference = _reference("eight_schools-eight_schools_noncentered")
    mcmc = _sample(eight_schools_noncentered, jnp.asarray(data["sigma"], float),
                   jnp.asarray(data["y"], float), target_accept_prob=0.9,
                   mass_matrix=mass_matrix)
    s = mcmc.get_samples()
    draws = {**_flat(s, "theta", 8), **_flat(s, "mu", None), **_flat(s, "tau", None)}
    _assert_matches_reference(draws, reference)


def blr(X, y):
    beta = sample("beta", dist.Normal(0.0, 10.0).expand([X.shape[1]]).to_event(1))
    sigma = sample("sigma", dist.HalfNormal(10.0))
    with plate("N", X.shape[0]):
        sample("y", dist.Normal(X @ beta, sigma), obs=y)


@pytest.mark.parametrize("mass_matrix", MASS_MATRICES)
def test_bayesian_linear_regression_matches_posteriordb(mass_matrix):
    data, reference = _reference("sblrc-blr")
    mcmc = _sample(blr, jnp.asarray(data["X"], float), jnp.asarray(data["y"], float),
                   mass_matrix=mass_matrix)
    s = mcmc.get_samples()
    _assert_matches_reference({**_flat(s, "beta", 5), **_flat(s, "sigma", None)}, reference)


def hmm_example(y):
    theta1 = sample("theta1", dist.Dirichlet(jnp.ones(2)))
    theta2 = sample("theta2", dist.Dirichlet(jnp.ones(2)))
    mu = sample("mu", dist.ImproperUniform(constraints.positive_ordered_vector, (), (2,)))
    factor("mu_prior", dist.Normal(3.0, 1.0).log_prob(mu[0]) + dist.Normal(10.0, 1.0).log_prob(mu[1]))
    log_theta = jnp.log(jnp.stack([theta1, theta2]))  # [from, to]

    def forward(gamma, y_t):
        emission = dist.Normal(mu, 1.0).log_prob(y_t)
        gamma = jax.nn.logsumexp(gamma[:, None] + log_theta, axis=0) + emission
        return gamma, None

    gamma, _ = jax.lax.scan(forward, dist.Normal(mu, 1.0).log_prob(y[0]), y[1:])
    factor("forward", jax.nn.logsumexp(gamma))


@pytest.mark.parametrize("mass_matrix", MASS_MATRICES)
def test_hidden_markov_model_matches_posteriordb(mass_matrix):
    data, reference = _reference("hmm_example-hmm_example")
    mcmc = _sample(hmm_example, jnp.asarray(data["y"], float), mass_matrix=mass_matrix)
    s = mcmc.get_samples()
    draws = {**_flat(s, "theta1", 2), **_flat(s, "theta2", 2), **_flat(s, "mu", 2)}
    _assert_matches_reference(draws, reference)


def local_level_numpyro(y):
    """The same model for NumPyro, with its contrib `scan`."""
    x0 = numpyro.sample("x0", dist.Normal(0.0, 1.0))

    def step(x_prev, y_t):
        x = numpyro.sample("x", dist.Normal(x_prev, 0.5))
        numpyro.sample("y", dist.Normal(x, 1.0), obs=y_t)
        return x, None

    numpyro_scan(step, x0, y)


def test_scan_model_matches_numpyro_nuts():
    y = jnp.asarray(np.random.default_rng(3).normal(np.linspace(0.0, 3.0, 12), 1.0))
    ours = _sample(local_level, y).get_samples(group_by_chain=True)
    theirs = numpyro.infer.MCMC(
        numpyro.infer.NUTS(local_level_numpyro), num_warmup=1000, num_samples=1000, num_chains=4,
        chain_method="vectorized", progress_bar=False,
    )
    theirs.run(jax.random.PRNGKey(1), y)
    theirs = theirs.get_samples(group_by_chain=True)
    assert ours["x"].shape == theirs["x"].shape == (4, 1000, 12)
    for name in ("x0", "x"):
        a, b = np.asarray(ours[name]), np.asarray(theirs[name])
        se_a = np.asarray(az.mcse(az.convert_to_dataset({name: a}))[name])
        se_b = np.asarray(az.mcse(az.convert_to_dataset({name: b}))[name])
        z = np.abs(a.mean((0, 1)) - b.mean((0, 1))) / np.sqrt(se_a**2 + se_b**2)
        assert np.all(z < 4.5), (name, z)
        np.testing.assert_allclose(a.std((0, 1)), b.std((0, 1)), rtol=0.1)


def test_lotka_volterra_ode_model_matches_posteriordb():
    """An ODE model: `effppl.ode.solve` (Dormand-Prince, Stan's tolerances) inside NUTS."""
    folder = POSTERIORDB / "hudson_lynx_hare-lotka_volterra"
    _, reference = _reference("hudson_lynx_hare-lotka_volterra")
    mcmc = _sample(lotka_volterra.effppl_model, *lotka_volterra.load(folder), num_chains=2)
    s = mcmc.get_samples()
    draws = {**_flat(s, "theta", 4), **_flat(s, "z_init", 2), **_flat(s, "sigma", 2)}
    _assert_matches_reference(draws, reference)

@pytest.mark.parametrize("mass_matrix", MASS_MATRICES)
def test_arma11_matches_posteriordb(mass_matrix):
    """posteriordb's arma-arma11 (explosive for |theta| > 1), seed 1: the issue's failure."""
    from .test_warmup import arma11, arma_reference

    y = jnp.asarray(json.loads((POSTERIORDB / "arma-arma11" / "data.json").read_text())["y"])
    mcmc = _sample(arma11, y, seed=1, mass_matrix=mass_matrix)
    _assert_matches_reference({k: np.asarray(v) for k, v in mcmc.get_samples().items()},
                              arma_reference())


def correlated_gaussian(scale_tril):
    sample("x", dist.MultivariateNormal(jnp.zeros(scale_tril.shape[0]), scale_tril=scale_tril))


@pytest.mark.parametrize("mass_matrix", MASS_MATRICES)
def test_correlated_gaussian_matches_analytic_posterior(mass_matrix):
    """A 20-d Gaussian with covariance eigenvalues 1e-2..1e2 in a random basis. Oracle: its
    means (0) and sds (sqrt of the covariance's diagonal), in units of arviz's MCSE."""
    rng = np.random.default_rng(7)
    q, _ = np.linalg.qr(rng.normal(size=(20, 20)))
    cov = q @ np.diag(np.logspace(-2, 2, 20)) @ q.T
    mcmc = _sample(correlated_gaussian, jnp.asarray(np.linalg.cholesky(cov)),
                   mass_matrix=mass_matrix)
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    se = np.asarray(az.mcse(az.convert_to_dataset({"x": x}))["x"])
    assert np.all(np.abs(x.mean((0, 1))) < 5 * se), (x.mean((0, 1)), se)
    np.testing.assert_allclose(x.std((0, 1)), np.sqrt(np.diag(cov)), rtol=0.15)
