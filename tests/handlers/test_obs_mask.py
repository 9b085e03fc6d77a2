"""`sample(..., obs_mask=...)`: NumPyro's imputation (masked-out events become the latent site
`{name}_unobserved`), against NumPyro on the same model."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.handlers
from numpyro.infer.util import log_density as np_log_density

import effppl
from effppl import distributions as dist
from effppl import handlers

Y = jnp.array([0.5, 2.0, -1.0, 3.0])
MASK = jnp.array([True, False, True, False])


def imputation(sample, plate):
    def model(y, m):
        mu = sample("mu", dist.Normal(0.0, 2.0))
        with plate("N", y.shape[0]):
            return sample("y", dist.Normal(mu, 1.0), obs=y, obs_mask=m)
    return model


def test_masked_events_become_a_latent_site_as_in_numpyro():
    ours = imputation(effppl.sample, effppl.plate)
    theirs = imputation(numpyro.sample, numpyro.plate)
    tr = handlers.trace(handlers.seed(ours, 0)).get_trace(Y, MASK)
    np_tr = numpyro.handlers.trace(numpyro.handlers.seed(theirs, 0)).get_trace(Y, MASK)
    for name in ("mu", "y_observed", "y_unobserved", "y"):
        assert tr[name]["type"] == np_tr[name]["type"], name
        assert tr[name]["is_observed"] == np_tr[name].get("is_observed", False), name
    assert tr["y_unobserved"]["value"].shape == (4,)
    y = tr["y"]["value"]
    np.testing.assert_allclose(y[MASK], Y[MASK])
    np.testing.assert_allclose(y[~MASK], tr["y_unobserved"]["value"][~MASK])
    params = {"mu": 0.7, "y_unobserved": jnp.array([9.0, 1.5, 9.0, -0.5])}
    lp, _ = handlers.log_density(ours, (Y, MASK), {}, params)
    np_lp, _ = np_log_density(theirs, (Y, MASK), {}, params)
    hand = (jax.scipy.stats.norm.logpdf(0.7, 0.0, 2.0)
            + jax.scipy.stats.norm.logpdf(jnp.array([0.5, 2.0, -1.0, 3.0]), 0.7, 1.0)
              [jnp.array([0, 2])].sum()
            + jax.scipy.stats.norm.logpdf(jnp.array([1.5, -0.5]), 0.7, 1.0).sum())
    np.testing.assert_allclose(lp, np_lp, rtol=1e-6)
    np.testing.assert_allclose(lp, hand, rtol=1e-6)
