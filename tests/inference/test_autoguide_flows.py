"""The flow autoguides (`AutoIAFNormal`, `AutoBNAFNormal`) against NumPyro's on the same model:
param names and shapes, the ELBO and the posterior's density at the same params, a fit, bad
settings."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer.autoguide as numpyro_autoguide
import optax
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import SVI, Trace_ELBO, autoguide
from effppl.infer.autoguide import AutoGuideError

GUIDES = [("AutoIAFNormal", {}), ("AutoIAFNormal", {"num_flows": 2, "hidden_dims": [5],
                                                    "skip_connections": True}),
          ("AutoBNAFNormal", {}), ("AutoBNAFNormal", {"num_flows": 2, "hidden_factors": [3]})]


def make_model(sample):
    def model(y):
        s = sample("s", dist.LogNormal(0.0, 0.5))
        x = sample("x", dist.Normal(jnp.zeros(2), 1.0))
        sample("y", dist.Normal(x.sum() * s, 0.3), obs=y)
    return model


def _numpyro_leaves(params):
    """NumPyro's params, each network's weight pytree as `effppl.module`'s named leaves."""
    return {name + jax.tree_util.keystr(path): leaf for name, value in params.items()
            for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]}


def _both(name, settings):
    model, np_model = make_model(effppl.sample), make_model(numpyro.sample)
    guide = getattr(autoguide, name)(model, **settings)
    np_guide = getattr(numpyro_autoguide, name)(np_model, **settings)
    svi = SVI(model, guide, optax.adam(0.01), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), 0.7))
    np_svi = numpyro.infer.SVI(np_model, np_guide, numpyro.optim.Adam(0.01),
                               numpyro.infer.Trace_ELBO())
    np_params = np_svi.get_params(np_svi.init(jax.random.PRNGKey(0), 0.7))
    return (model, guide, params), (np_model, np_guide, np_params)


@pytest.mark.parametrize("name, settings", GUIDES)
def test_params_loss_and_density_equal_numpyros(name, settings):
    (model, guide, params), (np_model, np_guide, np_params) = _both(name, settings)
    leaves = _numpyro_leaves(np_params)
    assert all("$params" in k for k in np_params)
    assert {k: v.shape for k, v in params.items()} == {k: v.shape for k, v in leaves.items()}
    # the same params, the same key: the same draws and loss (NumPyro's ELBO reads the draw's
    # intermediates, as our guide's latent site does)
    for seed in (1, 2):
        loss = Trace_ELBO().loss(jax.random.PRNGKey(seed), leaves, model, guide, 0.7)
        np_loss = numpyro.infer.Trace_ELBO().loss(jax.random.PRNGKey(seed), np_params,
                                                  np_model, np_guide, 0.7)
        np.testing.assert_allclose(loss, np_loss, rtol=1e-6)
    posterior, np_posterior = guide.get_posterior(leaves), np_guide.get_posterior(np_params)
    x, intermediates = np_posterior.sample_with_intermediates(jax.random.PRNGKey(3), (5,))
    assert x.shape == (5, 3)
    np.testing.assert_allclose(posterior.log_prob(x, intermediates),
                               np_posterior.log_prob(x, intermediates), rtol=1e-6)
    if name == "AutoIAFNormal":  # the IAF has an inverse: the density of any point
        z = jnp.array([[0.3, -1.2, 0.4], [-0.7, 0.1, 2.0]])
        np.testing.assert_allclose(posterior.log_prob(z), np_posterior.log_prob(z), rtol=1e-6)
    np.testing.assert_allclose(guide.get_transform(leaves)(x),
                               np_guide.get_transform(np_params)(x), rtol=1e-6)
    assert guide.get_base_dist().event_shape == (3,)


MU = jnp.array([1.0, -2.0])
COV = jnp.array([[1.0, 0.8], [0.8, 1.0]])


def correlated(target):
    effppl.sample("z", dist.MultivariateNormal(MU, COV))


@pytest.mark.parametrize("name", ["AutoIAFNormal", "AutoBNAFNormal"])
def test_one_latent_coordinate_is_refused_as_numpyro(name):
    """NumPyro's `ValueError` text (its tests match it) for a flow guide of one coordinate."""
    def model():
        effppl.sample("x", dist.Normal(0.0, 1.0))

    svi = SVI(model, getattr(autoguide, name)(model), optax.adam(1e-2), Trace_ELBO())
    with pytest.raises(ValueError, match="latent dim = 1. Consider using AutoDiagonalNormal"):
        svi.init(jax.random.PRNGKey(0))
