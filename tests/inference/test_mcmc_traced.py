"""`MCMC.run` inside a JAX transformation (NumPyro's `test_chain_inside_jit`): effppl refuses it
with an `MCMCError` naming why and what to do, never a raw JAX error or a leaked tracer."""

import jax
import jax.numpy as jnp
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import HMC, MCMC, NUTS, MCMCError


def model(data):
    p = effppl.sample("p_latent", dist.Dirichlet(jnp.ones(3)))
    effppl.sample("obs", dist.Categorical(p), obs=data)


DATA = jnp.array([0, 1, 1, 2, 1, 0, 1, 1])


def _run(key, data, kernel=HMC):
    mcmc = MCMC(kernel(model, step_size=1.0), num_warmup=5, num_samples=10, progress_bar=False)
    mcmc.run(key, data)
    return mcmc.get_samples()


@pytest.mark.parametrize("transform", ["jit", "vmap", "jit_key_only"])
def test_mcmc_run_inside_a_transformation_says_so(transform):
    with pytest.raises(MCMCError, match="inside a JAX transformation.*Call it outside"):
        if transform == "jit":
            jax.jit(_run)(jax.random.key(2), DATA)
        elif transform == "vmap":
            jax.vmap(_run, in_axes=(0, None))(jax.random.split(jax.random.key(2), 2), DATA)
        else:
            jax.jit(lambda k: _run(k, DATA, NUTS))(jax.random.key(2))
    # outside, the same call runs
    assert _run(jax.random.key(2), DATA)["p_latent"].shape == (10, 3)
