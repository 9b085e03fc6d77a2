"""NumPyro's `NUTS/HMC(model, forward_mode_differentiation=True)`: the log density's gradient in
forward mode, for a model with a `lax.while_loop` between a latent site and the density (reverse
mode fails there). Oracle: the analytic posterior of a conjugate normal model whose mean goes
through such a loop; without the option, the error suggests it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import effppl
from effppl import distributions as dist
from effppl.infer import HMC, MCMC, NUTS, InitializationError

Y = jnp.array([0.3, 1.2, 0.8, 2.1, 1.5, 0.9])


def model(y):
    x = effppl.sample("x", dist.Normal(0.0, 1.0))
    # five passes of a loop that leaves x unchanged: JAX cannot reverse-differentiate it
    _, mean = lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 1.0), (0, x))
    with effppl.plate("n", y.shape[0]):
        effppl.sample("y", dist.Normal(mean, 1.0), obs=y)


@pytest.mark.parametrize("kernel", [NUTS, HMC])
def test_forward_mode_gives_the_conjugate_posterior(kernel):
    kw = {"trajectory_length": 1.0} if kernel is HMC else {}  # (2π: whitened Gaussian's period)
    mcmc = MCMC(kernel(model, forward_mode_differentiation=True, **kw), num_warmup=300,
                num_samples=3000, progress_bar=False)
    mcmc.run(jax.random.key(0), Y)
    x = np.asarray(mcmc.get_samples()["x"])
    n = Y.shape[0]
    np.testing.assert_allclose(x.mean(), float(Y.sum()) / (n + 1), atol=0.1)  # 1/4 sd
    np.testing.assert_allclose(x.std(), 1 / np.sqrt(n + 1), rtol=0.1)


def test_reverse_mode_error_suggests_forward_mode():
    with pytest.raises(InitializationError, match="forward_mode_differentiation=True"):
        MCMC(NUTS(model), num_warmup=5, num_samples=5, progress_bar=False).run(
            jax.random.key(0), Y)
