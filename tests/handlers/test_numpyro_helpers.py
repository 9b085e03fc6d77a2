"""NumPyro's small helpers: `prng_key`, `get_mask`, `uncondition`, the platform settings, and
`Predictive`'s NumPyro arguments, against NumPyro on the same model."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.handlers
import pytest
from jax.scipy import stats
from numpyro.infer.util import log_density as np_log_density

import effppl
from effppl import distributions as dist
from effppl import handlers
from effppl.infer import Predictive


def test_prng_key_comes_from_the_seed_handler():
    def model():
        return effppl.prng_key(), effppl.prng_key()

    a, b = handlers.seed(model, 0)()
    assert a.shape == () and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)  # as NumPyro's
    a, b = jax.random.key_data(a), jax.random.key_data(b)
    assert not np.array_equal(a, b)
    a2, _ = handlers.seed(model, 0)()
    np.testing.assert_array_equal(a, jax.random.key_data(a2))
    with numpyro.handlers.seed(rng_seed=0):
        theirs = numpyro.prng_key()
    np.testing.assert_array_equal(a, jax.random.key_data(theirs))  # NumPyro's key too
    with pytest.raises(Exception, match="prng_key"):
        handlers.trace(model).get_trace()
    with pytest.warns(UserWarning, match="outside of `seed`"):  # at top level: None, as NumPyro
        assert effppl.prng_key() is None


def test_get_mask_sees_the_enclosing_masks():
    outside = []

    def model():
        outside.append(effppl.get_mask())  # a static answer (None or a bool) may leave the trace
        with handlers.mask(mask=jnp.array([True, False])):
            inner = effppl.get_mask()
        effppl.sample("x", dist.Normal())
        return inner

    np.testing.assert_array_equal(handlers.seed(model, 0)(), [True, False])
    assert outside == [None]
    np.testing.assert_array_equal(handlers.seed(handlers.mask(model, mask=False), 0)(),
                                  [False, False])
    assert outside == [None, False]


def regression(sample):
    def model(y):
        mu = sample("mu", dist.Normal(0.0, 1.0))
        return sample("y", dist.Normal(mu, 1.0), obs=y)
    return model


def test_uncondition_makes_observed_sites_latent_as_numpyro():
    y = jnp.array(3.0)
    tr = handlers.trace(handlers.seed(handlers.uncondition(regression(effppl.sample)), 0)) \
        .get_trace(y)
    np_tr = numpyro.handlers.trace(numpyro.handlers.seed(
        numpyro.handlers.uncondition(regression(numpyro.sample)), 0)).get_trace(y)
    assert not tr["y"]["is_observed"] and not np_tr["y"]["is_observed"]
    assert tr["y"]["infer"]["was_observed"] and np_tr["y"]["infer"]["was_observed"]
    assert float(tr["y"]["value"]) != 3.0
    # a conditioned site becomes latent too; its density is counted at the given value
    params = {"mu": 0.5, "y": 1.0}
    lp, _ = handlers.log_density(handlers.uncondition(regression(effppl.sample)), (y,), {}, params)
    np_lp, _ = np_log_density(numpyro.handlers.uncondition(regression(numpyro.sample)), (y,), {},
                              params)
    np.testing.assert_allclose(lp, np_lp, rtol=1e-10)
    cond = handlers.condition(regression(effppl.sample), data={"y": 2.0})
    tr = handlers.trace(handlers.seed(handlers.uncondition(cond), 1)).get_trace(None)
    assert not tr["y"]["is_observed"] and float(tr["y"]["value"]) != 2.0


def test_platform_settings_are_numpyros():
    assert effppl.set_platform is numpyro.set_platform
    assert effppl.set_host_device_count is numpyro.set_host_device_count
    assert effppl.enable_x64 is numpyro.enable_x64


def test_predictive_takes_numpyros_arguments():
    def model():
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
        effppl.deterministic("twice", 2 * mu)
        return effppl.sample("y", dist.Normal(mu, 0.1))

    samples = {"mu": jnp.array([0.0, 1.0]), "twice": jnp.array([5.0, 5.0])}
    key = jax.random.PRNGKey(0)
    with pytest.warns(FutureWarning, match="exclude_deterministic"):
        kept = Predictive(model, samples, exclude_deterministic=False, parallel=True)(key)
    np.testing.assert_allclose(kept["twice"], [5.0, 5.0])
    redone = Predictive(model, samples, return_sites=["twice"], parallel=False)(key)
    np.testing.assert_allclose(redone["twice"], [0.0, 2.0])
    assert set(redone) == {"twice"}


def test_predictive_runs_model_and_guide_masked_as_numpyro():
    called = []

    def model(y):
        x = effppl.sample("x", dist.Normal(0.0, 1.0))
        if effppl.get_mask() is not False:  # work only a log density needs
            called.append("model")
            effppl.factor("f", -x**2)
        effppl.sample("y", dist.Normal(x, 1.0), obs=y)

    def guide(y):
        if effppl.get_mask() is not False:
            called.append("guide")
        effppl.sample("x", dist.Normal(effppl.param("loc", 0.5), 1.0))

    out = Predictive(model, guide=guide, params={"loc": jnp.array(3.0)}, num_samples=400)(
        jax.random.PRNGKey(0), None)
    assert called == [] and out["y"].shape == (400,)
    np.testing.assert_allclose(out["y"].mean(), 3.0, atol=0.25)  # x ~ N(3, 1), y ~ N(x, 1)
    Predictive(model, num_samples=2)(jax.random.PRNGKey(0), None)
    assert called == []
    lp, _ = effppl.log_density(model, (jnp.array(0.0),), {}, {"x": 1.0})  # not masked elsewhere
    assert "model" in called
    np.testing.assert_allclose(lp, -1.0 + stats.norm.logpdf(1.0) + stats.norm.logpdf(0.0, 1.0),
                               rtol=1e-6)
