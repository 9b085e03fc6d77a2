"""NumPyro's `NUTS(max_tree_depth=(warmup depth, sampling depth))`. Oracle: the recorded tree
depths never exceed each phase's bound (warmup transitions collected through
`warmup(collect_warmup=True)`), and the posterior of a normal model is its analytic one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import MCMC, NUTS
from effppl.infer.mcmc._kernels import KernelSettingsError


def model(y):
    mu = effppl.sample("mu", dist.Normal(0.0, 10.0))
    with effppl.plate("n", y.shape[0]):
        effppl.sample("y", dist.Normal(mu, 1.0), obs=y)


Y = jnp.linspace(-1.0, 3.0, 20)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::effppl.infer.DivergenceWarning")
def test_each_phase_keeps_its_depth():
    mcmc = MCMC(NUTS(model, max_tree_depth=(1, 4)), num_warmup=200, num_samples=1000,
                progress_bar=False)
    mcmc.warmup(jax.random.key(0), Y, collect_warmup=True)
    assert int(np.max(mcmc.get_extra_fields()["tree_depth"])) <= 1
    mcmc.run(jax.random.key(1), Y)
    depth = np.asarray(mcmc.get_extra_fields()["tree_depth"])
    assert depth.max() <= 4 and depth.max() > 1  # (a depth of 1 alone would mix slowly)
    mu = np.asarray(mcmc.get_samples()["mu"])
    post_sd = 1 / np.sqrt(20 + 1 / 100)
    np.testing.assert_allclose(mu.mean(), float(Y.sum()) * post_sd ** 2, atol=0.3 * post_sd)
    np.testing.assert_allclose(mu.std(), post_sd, rtol=0.15)


@pytest.mark.parametrize("bad", [(5,), (0, 3), (2, 3, 4), 2.5])
def test_bad_depths_name_the_argument(bad):
    with pytest.raises(KernelSettingsError, match="max_tree_depth"):
        NUTS(model, max_tree_depth=bad)
