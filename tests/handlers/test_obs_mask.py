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


def test_trace_fn_is_masked_as_numpyros():
    """Under `handlers.mask`, a trace entry's `fn` is the masked distribution (NumPyro's), so
    log densities computed from a trace (NumPyro's `infer_discrete` tests do) agree with its
    `log_prob`; in a scan too."""
    import numpyro as real_numpyro

    import effppl

    def model(prims, z=None):
        z = prims.sample("z", effppl.distributions.Categorical(jnp.array([0.75, 0.25])), obs=z)
        with prims.plate("data", 3), prims.handlers.mask(mask=np.array([True, False, True])):
            prims.sample("x", effppl.distributions.Normal(z, 1.0), obs=np.array([1.0, 2.0, 3.0]))

    tr = effppl.handlers.trace(lambda: model(effppl, 1)).get_trace()
    theirs = real_numpyro.handlers.trace(lambda: model(real_numpyro, 1)).get_trace()
    np.testing.assert_allclose(tr["x"]["fn"].log_prob(tr["x"]["value"]),
                               theirs["x"]["fn"].log_prob(theirs["x"]["value"]), rtol=1e-6)
    np.testing.assert_allclose(tr["x"]["log_prob"], [-0.9189385, 0.0, -2.9189385], rtol=1e-6)

    def in_scan():
        def body(c, x):
            with effppl.handlers.mask(mask=x > 0):
                effppl.sample("y", effppl.distributions.Normal(0.0, 1.0), obs=x)
            return c, None
        jax.lax.scan(body, 0, jnp.array([1.0, -1.0, 2.0]))

    tr = effppl.handlers.trace(in_scan).get_trace()
    np.testing.assert_allclose(tr["y"]["fn"].log_prob(tr["y"]["value"]),
                               [-1.4189385, 0.0, -2.9189385], rtol=1e-6)
