"""NeuTraReparam with SVI and an autoguide, against NumPyro's on the same guide params."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.infer import autoguide as np_autoguide
from numpyro.infer import reparam as np_reparam

import effppl
from effppl import distributions as dist
from effppl.infer import MCMC, NUTS, SVI, Trace_ELBO, autoguide
from effppl.infer.reparam import NeuTraReparam
from effppl.optim import Adam


def funnel(sample):
    def model(dim):
        y = sample("y", dist.Normal(0.0, 3.0))
        sample("x", dist.Normal(jnp.zeros(dim), jnp.exp(y / 2)))
    return model


@pytest.mark.slow
@pytest.mark.parametrize("guide_name", ["AutoDiagonalNormal", "AutoMultivariateNormal"])
def test_warped_density_and_samples_equal_numpyros(guide_name):
    model = funnel(effppl.sample)
    guide = getattr(autoguide, guide_name)(model)
    svi = SVI(model, guide, Adam(0.01), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), 3))  # any params will do here
    ours = NeuTraReparam(guide, params)
    np_model = funnel(numpyro.sample)
    np_guide = getattr(np_autoguide, guide_name)(np_model)
    numpyro.infer.SVI(np_model, np_guide, numpyro.optim.Adam(0.01),
                      numpyro.infer.Trace_ELBO()).init(jax.random.PRNGKey(0), 3)  # its layout
    theirs = np_reparam.NeuTraReparam(np_guide, params)  # the same (constrained) params
    z = jnp.array([0.3, -1.1, 0.5, 2.0])
    lp, tr = effppl.log_density(ours.reparam(model), (3,), {}, {"auto_shared_latent": z})
    np_lp, np_tr = numpyro.infer.util.log_density(theirs.reparam(np_model), (3,), {},
                                                  {"auto_shared_latent": z})
    np.testing.assert_allclose(lp, np_lp, rtol=1e-6)
    for name in ("y", "x"):
        assert tr[name]["type"] == "deterministic"
        np.testing.assert_allclose(tr[name]["value"], np_tr[name]["value"], rtol=1e-6)
    draws = ours.transform_sample(jnp.stack([z, -z]))
    np.testing.assert_allclose(draws["y"][0], tr["y"]["value"], rtol=1e-6)
    assert draws["x"].shape == (2, 3)


@pytest.mark.slow
def test_nuts_on_the_warped_funnel_recovers_the_funnel():
    model = funnel(effppl.sample)
    guide = autoguide.AutoDiagonalNormal(model)
    result = SVI(model, guide, Adam(0.01), Trace_ELBO()).run(jax.random.PRNGKey(0), 1000, 3,
                                                             progress_bar=False)
    neutra = NeuTraReparam(guide, result.params)
    mcmc = MCMC(NUTS(neutra.reparam(model)), num_warmup=300, num_samples=1000, num_chains=2,
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), 3)
    y = neutra.transform_sample(mcmc.get_samples()["auto_shared_latent"])["y"]
    assert abs(float(np.mean(y))) < 0.8 and 2.0 < float(np.std(y)) < 4.0  # y ~ N(0, 3)


def test_bad_params_another_model_and_bad_draws_are_errors_naming_what_is_wrong():
    model = funnel(effppl.sample)
    guide = autoguide.AutoLowRankMultivariateNormal(model, rank=2)
    svi = SVI(model, guide, Adam(0.01), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), 3))  # latent size 1 + 3 = 4
    assert params["auto_cov_factor"].shape == (4, 2)
    with pytest.raises(autoguide.AutoGuideError, match=r"got NoneType"):
        NeuTraReparam(guide, None)
    with pytest.raises(autoguide.MissingParamError, match=r"lack `auto_cov_factor` \(shape "
                                                          r"\(4, r\)\).*`y`, `x`") as err:
        NeuTraReparam(guide, {"auto_loc": params["auto_loc"]})
    assert isinstance(err.value, KeyError)
    with pytest.raises(autoguide.AutoGuideError,
                       match=r"`auto_scale` has shape \(3,\).*has shape \(4,\)"):
        NeuTraReparam(guide, {**params, "auto_scale": jnp.ones(3)})
    neutra = NeuTraReparam(guide, params)
    with pytest.raises(autoguide.AutoGuideError, match=r"shape \(\.\.\., 4\), but got shape"):
        neutra.transform_sample(jnp.ones((5, 3)))

    def other(dim):
        effppl.sample("y", dist.Normal(0.0, 3.0))

    with pytest.raises(autoguide.AutoGuideError, match=r"model `other` has no sample site `x`"):
        effppl.log_density(neutra.reparam(other), (3,), {}, {"auto_shared_latent": jnp.ones(4)})
