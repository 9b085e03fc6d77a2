"""NumPyro's site fields of `MCMC.run(..., extra_fields=...)`. Oracle: the constrained draws
(`exp` of a half-normal site's unconstrained ones) and NumPyro's semantics of `"~z.<site>"`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from effppl.infer import MCMC, NUTS, MCMCError


def test_site_extra_fields_as_numpyros():
    """NumPyro's `extra_fields=("z.x",)` (the unconstrained draws) and `("~z.a",)` (the site left
    out of the draws), as NumPyro's `test_extra_fields_include_unconstrained_samples` and
    `test_remove_sites` check them."""
    import effppl
    from effppl import distributions as dist

    def model():
        effppl.sample("x", dist.HalfNormal(1.0))
        effppl.sample("a", dist.Normal(0.0, 1.0))

    mcmc = MCMC(NUTS(model), num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.key(0), extra_fields=("z.x", "~z.a", "~z.a"))
    assert set(mcmc.get_samples()) == {"x"}
    np.testing.assert_allclose(mcmc.get_samples()["x"], jnp.exp(mcmc.get_extra_fields()["z.x"]),
                               rtol=1e-10)
    with pytest.raises(MCMCError, match="not latent sites"):
        mcmc.run(jax.random.key(0), extra_fields=("z.nope",))
