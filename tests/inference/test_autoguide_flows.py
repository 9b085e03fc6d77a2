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


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("name", ["AutoIAFNormal", "AutoBNAFNormal"])
def test_fit_to_a_correlated_gaussian_lowers_the_loss_and_finds_its_moments(name):
    guide = getattr(autoguide, name)(correlated)
    svi = SVI(correlated, guide, optax.adam(optax.exponential_decay(0.01, 2000, 0.1)),
              Trace_ELBO(num_particles=8))
    result = svi.run(jax.random.PRNGKey(0), 2000, None, progress_bar=False)
    # the loss is KL(guide || posterior) (the target is normalised): from several nats to ~0
    assert result.losses[:10].mean() > 1.0 and abs(result.losses[-200:].mean()) < 0.1
    z = guide.sample_posterior(jax.random.PRNGKey(1), result.params, sample_shape=(4000,))["z"]
    assert z.shape == (4000, 2)
    np.testing.assert_allclose(z.mean(0), MU, atol=0.1)
    np.testing.assert_allclose(np.cov(z.T), COV, atol=0.15)


def test_median_and_quantiles_raise_as_numpyros():
    (_, guide, params), _ = _both("AutoIAFNormal", {})
    with pytest.raises(NotImplementedError, match="sample_posterior"):
        guide.median(params)
    with pytest.raises(NotImplementedError, match="sample_posterior"):
        guide.quantiles(params, [0.5])


@pytest.mark.parametrize("name", ["AutoIAFNormal", "AutoBNAFNormal"])
def test_a_latent_of_size_one_raises_as_numpyros(name):
    """NumPyro's `ValueError` text, which its own tests match."""
    def model():
        effppl.sample("a", dist.Normal(0.0, 1.0))
    svi = SVI(model, getattr(autoguide, name)(model), optax.adam(0.01), Trace_ELBO())
    with pytest.raises(AutoGuideError, match="latent dim = 1. Consider using AutoDiagonalNormal"):
        svi.init(jax.random.PRNGKey(0))


@pytest.mark.parametrize("name, settings, argument", [
    ("AutoIAFNormal", {"num_flows": 0}, "num_flows"),
    ("AutoIAFNormal", {"num_flows": 1.5}, "num_flows"),
    ("AutoIAFNormal", {"hidden_dims": 8}, "hidden_dims"),
    ("AutoIAFNormal", {"hidden_dims": [8, "8"]}, "hidden_dims"),
    ("AutoIAFNormal", {"skip_connections": "yes"}, "skip_connections"),
    ("AutoIAFNormal", {"nonlinearity": jax.nn.elu}, "nonlinearity"),
    ("AutoBNAFNormal", {"num_flows": -1}, "num_flows"),
    ("AutoBNAFNormal", {"hidden_factors": [8, 0]}, "hidden_factors"),
    ("AutoBNAFNormal", {"hidden_factors": []}, "hidden_factors"),
])
def test_bad_settings_raise_errors_naming_the_argument(name, settings, argument):
    with pytest.raises(AutoGuideError, match=rf"{name}\({argument}="):
        getattr(autoguide, name)(correlated, **settings)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["AutoIAFNormal", "AutoBNAFNormal"])
def test_neutra_with_a_flow_guide_equals_numpyros(name):
    from numpyro.infer.reparam import NeuTraReparam as NumPyroNeuTra

    from effppl.infer.reparam import NeuTraReparam
    (model, guide, params), (np_model, np_guide, np_params) = _both(name, {})
    ours, theirs = NeuTraReparam(guide, _numpyro_leaves(np_params)), NumPyroNeuTra(np_guide,
                                                                                   np_params)
    z = jnp.array([0.3, -1.1, 0.5])
    lp, tr = effppl.log_density(ours.reparam(model), (0.7,), {}, {"auto_shared_latent": z})
    np_lp, np_tr = numpyro.infer.util.log_density(theirs.reparam(np_model), (0.7,), {},
                                                  {"auto_shared_latent": z})
    np.testing.assert_allclose(lp, np_lp, rtol=1e-6)
    for site in ("s", "x"):
        np.testing.assert_allclose(tr[site]["value"], np_tr[site]["value"], rtol=1e-6)
    draws = ours.transform_sample(jnp.stack([z, -z]))
    np.testing.assert_allclose(draws["x"][0], tr["x"]["value"], rtol=1e-6)


def test_neutra_on_a_simplex_site_equals_numpyros():
    """A Dirichlet site's unconstrained value has one entry fewer than its value: NeuTra on it
    (NumPyro's `test_neutra_reparam_unobserved_model`) gives NumPyro's log density."""
    import numpyro.infer.autoguide as np_autoguide
    from numpyro.infer.reparam import NeuTraReparam as NumPyroNeuTra

    from effppl.infer.reparam import NeuTraReparam

    def model(prims, data):
        p = prims.sample("p", dist.Dirichlet(jnp.ones(3)))
        with prims.plate("N", 4):
            prims.sample("obs", dist.Categorical(p), obs=data)

    data = jnp.array([0, 2, 2, 1])
    params = {"auto_loc": jnp.array([0.2, -0.4]), "auto_scale": jnp.array([0.5, 0.8])}
    ours = autoguide.AutoDiagonalNormal(lambda data: model(effppl, data))
    theirs = np_autoguide.AutoDiagonalNormal(lambda data: model(numpyro, data))
    for guide, prims in ((ours, effppl), (theirs, numpyro)):  # each sees the model once
        prims.handlers.seed(prims.handlers.substitute(guide, data=params), 0)(data)
    z = jnp.array([0.3, -1.1])
    lp, tr = effppl.log_density(NeuTraReparam(ours, params).reparam(ours.model), (data,), {},
                                {"auto_shared_latent": z})
    np_lp, np_tr = numpyro.infer.util.log_density(
        NumPyroNeuTra(theirs, params).reparam(theirs.model), (data,), {},
        {"auto_shared_latent": z})
    np.testing.assert_allclose(lp, np_lp, rtol=1e-6)
    np.testing.assert_allclose(tr["p"]["value"], np_tr["p"]["value"], rtol=1e-6)
