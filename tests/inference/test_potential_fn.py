"""NumPyro's `NUTS(potential_fn=...)` / `HMC(potential_fn=...)` with `init_params` and no model.
Oracles: analytic Gaussian targets (means, sds, a dense covariance, as NumPyro's
`test_unnormalized_normal_x64` and `test_correlated_mvn`), the potential itself at the last
state, and the structure of `init_params` (NumPyro returns draws in it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from effppl.infer import HMC, MCMC, NUTS, MCMCError
from effppl.infer.mcmc._kernels import KernelSettingsError


@pytest.mark.parametrize("kernel", ["HMC", "NUTS"])
def test_unnormalized_normal(kernel):
    with jax.enable_x64(True):
        def potential_fn(z):
            return 0.5 * jnp.sum(((z - 1.0) / 0.5) ** 2)
        k = (HMC(potential_fn=potential_fn, trajectory_length=8) if kernel == "HMC"
             else NUTS(potential_fn=potential_fn))
        mcmc = MCMC(k, num_warmup=500, num_samples=4000, progress_bar=False)
        mcmc.run(jax.random.key(0), init_params=jnp.array(0.0))
        draws = mcmc.get_samples()
        assert isinstance(draws, jax.Array) and draws.shape == (4000,)
        assert draws.dtype == jnp.float64
        np.testing.assert_allclose(jnp.mean(draws), 1.0, rtol=0.07)
        np.testing.assert_allclose(jnp.std(draws), 0.5, rtol=0.07)
        last = mcmc.last_state
        np.testing.assert_allclose(last.potential_energy, potential_fn(last.z["Param:0"]),
                                   rtol=1e-12)


def test_correlated_mvn_dense_mass():
    d = 5
    a = jnp.tril(0.5 * jnp.fliplr(jnp.eye(d)) + 0.1 * jnp.exp(
        jax.random.normal(jax.random.key(0), (d, d))))
    cov = a @ a.T
    prec = jnp.linalg.inv(cov)
    mcmc = MCMC(NUTS(potential_fn=lambda z: 0.5 * z @ prec @ z, dense_mass=True),
                num_warmup=1000, num_samples=4000, progress_bar=False)
    mcmc.run(jax.random.key(0), init_params=jnp.zeros(d))
    draws = np.asarray(mcmc.get_samples())
    assert draws.shape == (4000, d)
    np.testing.assert_allclose(draws.mean(0), 0.0, atol=0.1)
    assert np.abs(np.cov(draws.T) - np.asarray(cov)).sum() / d ** 2 < 0.05


@pytest.mark.slow
def test_draws_keep_the_structure_of_init_params():
    def pe(p):
        return 0.5 * jnp.sum(p["a"] ** 2) + 0.5 * jnp.sum((p["b"] - 2.0) ** 2 / 4.0)
    mcmc = MCMC(NUTS(potential_fn=pe), num_warmup=300, num_samples=1000, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(1), init_params={"a": jnp.zeros((2, 3)), "b": jnp.zeros(2)})
    draws = mcmc.get_samples()
    assert {k: v.shape for k, v in draws.items()} == {"a": (2000, 3), "b": (2000,)}
    np.testing.assert_allclose(jnp.mean(draws["b"]), 2.0, atol=0.25)
    np.testing.assert_allclose(jnp.std(draws["b"]), 2.0, rtol=0.15)
    pair = MCMC(NUTS(potential_fn=lambda t: pe({"a": t[0], "b": t[1]})), num_warmup=300,
                num_samples=500, progress_bar=False)
    pair.warmup(jax.random.key(2), init_params=(jnp.zeros(3), jnp.zeros(())))
    pair.run(jax.random.key(3))  # from the warmup's state, as NumPyro's
    first, second = pair.get_samples()
    assert first.shape == (500, 3) and second.shape == (500,)


def test_potential_fn_errors_name_what_is_wrong():
    with pytest.raises(MCMCError, match="needs `init_params`"):
        MCMC(NUTS(potential_fn=jnp.sum), num_warmup=2, num_samples=2,
             progress_bar=False).run(jax.random.key(0))
    with pytest.raises(MCMCError, match="takes no model arguments"):
        MCMC(NUTS(potential_fn=jnp.sum), num_warmup=2, num_samples=2,
             progress_bar=False).run(jax.random.key(0), jnp.ones(2), init_params=jnp.zeros(2))
    with pytest.raises(MCMCError, match="leading axis of 2"):
        MCMC(NUTS(potential_fn=jnp.sum), num_warmup=2, num_samples=2, num_chains=2,
             chain_method="vectorized", progress_bar=False).run(jax.random.key(0),
                                                                init_params=jnp.zeros(3))
    with pytest.raises(KernelSettingsError, match="only one of `model` or `potential_fn`"):
        NUTS(lambda: None, potential_fn=jnp.sum)
    with pytest.raises(KernelSettingsError, match="potential_fn"):
        HMC()

