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


@pytest.mark.parametrize("kernel", [HMC, NUTS])
def test_traced_kernel_settings_say_so(kernel):
    """NumPyro's `test_chain_inside_jit` passes the step size and trajectory length as traced
    arguments: the kernel says which setting is traced and why, not JAX's `float()` error."""
    from effppl.infer import KernelSettingsError

    def build(step_size, target_accept_prob):
        kernel(model, step_size=step_size, target_accept_prob=target_accept_prob)

    with pytest.raises(KernelSettingsError, match=r"step_size=\.\.\.\)` got a traced value.*"
                                                  r"inside a JAX transformation"):
        jax.jit(build)(1.0, 0.8)
    with pytest.raises(KernelSettingsError, match=r"target_accept_prob=\.\.\.\)` got a traced"):
        jax.jit(build, static_argnums=0)(1.0, 0.8)
    if kernel is HMC:
        with pytest.raises(KernelSettingsError, match=r"trajectory_length=\.\.\.\)` got a traced"):
            jax.jit(lambda t: HMC(model, trajectory_length=t))(1.0)
    build(1.0, 0.8)  # outside, the same settings are fine
