"""NumPyro's `NUTS(..., regularize_mass_matrix=False)`: each window's inverse mass matrix is the
draws' sample covariance. Oracle: Stan's regularisation undone on the default's matrix (the same
keys give the same draws until the first window ends, so its first window's matrix is exactly
`(n + 5) / n * (regularised - 5 / (n + 5) * 1e-3 * I)`), and NumPyro's `test_correlated_mvn`
posterior covariance."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import MCMC, NUTS
from effppl.infer.mcmc._kernels import KernelSettingsError

D = 5
A = jnp.tril(0.5 * jnp.fliplr(jnp.eye(D)) + 0.1 * jnp.exp(
    jax.random.normal(jax.random.key(0), (D, D))))
COV = A @ A.T


def model():
    effppl.sample("z", dist.MultivariateNormal(jnp.zeros(D), COV))


@pytest.mark.slow
@pytest.mark.parametrize("dense", [True, False])
def test_first_window_matrix_is_the_unregularised_covariance(dense):
    # 100 warmup steps: Stan's schedule has one slow window (steps 15-90, n = 75 draws)
    out = {}
    for regularize in (True, False):
        mcmc = MCMC(NUTS(model, dense_mass=dense, regularize_mass_matrix=regularize),
                    num_warmup=100, num_samples=1, progress_bar=False)
        mcmc.warmup(jax.random.key(3))
        out[regularize] = np.asarray(mcmc.post_warmup_state.inverse_mass_matrix)[0]
    n = 75
    eye = np.eye(D) if dense else np.ones(D)
    undone = (out[True] - 5 / (n + 5) * 1e-3 * eye) * (n + 5) / n
    np.testing.assert_allclose(out[False], undone, rtol=1e-8, atol=1e-12)
    assert not np.allclose(out[False], out[True], rtol=1e-4)


def test_correlated_mvn_without_regularisation():
    mcmc = MCMC(NUTS(model, dense_mass=True, regularize_mass_matrix=False), num_warmup=1000,
                num_samples=4000, progress_bar=False)
    mcmc.run(jax.random.key(0))
    z = np.asarray(mcmc.get_samples()["z"])
    np.testing.assert_allclose(z.mean(0), 0.0, atol=0.1)
    assert np.abs(np.cov(z.T) - np.asarray(COV)).sum() / D ** 2 < 0.05


def test_only_stans_schemes_take_it():
    with pytest.raises(KernelSettingsError, match="regularize_mass_matrix"):
        NUTS(model, mass_matrix="low_rank", regularize_mass_matrix=False)
