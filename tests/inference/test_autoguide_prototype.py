"""An autoguide's prototype (the model's latent sites and arguments it keeps from its first run),
against NumPyro's autoguides on the same model and params: new model arguments given to
`sample_posterior` (an observed `y=None` that becomes latent, new covariates) do not change the
guide's latent sites, as NumPyro's guides ignore them."""

import warnings

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

X = jnp.array([0.0, 1.0, 2.0])
X_NEW = jnp.array([0.0, 1.0, 2.0, 3.0, 4.0])
Y = jnp.array([0.1, 0.5, -0.2])


def _regression(ppl):
    def model(x, y=None):
        a = ppl.sample("a", dist.Normal(0.0, 1.0))
        s = ppl.sample("s", dist.HalfNormal(1.0))
        ppl.deterministic("d", 2.0 * a + s)
        with ppl.plate("N", x.shape[0]):
            m = ppl.deterministic("m", a * x)
            ppl.sample("y", dist.Normal(m, s), obs=y)
    return model


def _params(name):
    """The same params for effppl's and NumPyro's guide `name` of `_regression`."""
    if name == "AutoNormal":
        params = {"a_auto_loc": 0.3, "a_auto_scale": 0.5, "s_auto_loc": -0.2,
                  "s_auto_scale": 0.4}
    elif name == "AutoDelta":
        params = {"a_auto_loc": 0.3, "s_auto_loc": 0.8}
    else:
        params = {"auto_loc": [0.3, -0.2]}
        if name == "AutoDiagonalNormal":
            params["auto_scale"] = [0.5, 0.4]
        elif name == "AutoMultivariateNormal":
            params["auto_scale_tril"] = [[0.5, 0.0], [0.1, 0.4]]
        elif name == "AutoLowRankMultivariateNormal":
            params.update(auto_scale=[0.5, 0.4], auto_cov_factor=[[0.2], [0.1]])
    return {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}


def _fitted(name):
    """`(ours, theirs)`: guide `name` of effppl and of NumPyro, set up by `SVI.init` at `(X,
    Y)`."""
    out = []
    for ppl, module, svi, loss in ((effppl, autoguide, SVI, Trace_ELBO),
                                   (numpyro, numpyro_autoguide, numpyro.infer.SVI,
                                    numpyro.infer.Trace_ELBO)):
        model = _regression(ppl)
        guide = getattr(module, name)(model)
        svi(model, guide, optax.adam(0.01), loss()).init(jax.random.PRNGKey(0), X, Y)
        out.append(guide)
    return out


def _assert_same(ours, theirs, rtol=1e-6):
    assert set(ours) == set(theirs)
    for k in theirs:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=rtol, atol=1e-12, err_msg=k)


GUIDES = ["AutoNormal", "AutoDelta", "AutoDiagonalNormal", "AutoMultivariateNormal",
          "AutoLowRankMultivariateNormal", "AutoLaplaceApproximation"]
NEW_ARGS = [((X,), {"y": None}), ((X_NEW,), {})]


@pytest.mark.parametrize("new_args, new_kwargs", NEW_ARGS, ids=["y=None", "new x"])
@pytest.mark.parametrize("name", [g for g in GUIDES if g != "AutoDelta"])
def test_sample_posterior_ignores_new_model_arguments_as_numpyros(name, new_args, new_kwargs):
    """NumPyro's guides draw the latent sites of their prototype and give the deterministic
    sites at the prototype's arguments: the draws at new arguments are those at none."""
    ours, theirs = _fitted(name)
    params = _params(name)
    key = jax.random.PRNGKey(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a singular Hessian would warn; none here)
        for guide in (ours, theirs):
            new = guide.sample_posterior(key, params, *new_args, sample_shape=(4,),
                                         **new_kwargs)
            _assert_same(new, guide.sample_posterior(key, params, sample_shape=(4,)),
                         rtol=1e-12)
            assert set(new) == {"a", "s", "d", "m"}  # `y` stays observed
            assert new["m"].shape == (4, 3)  # the prototype's `x`
            np.testing.assert_allclose(new["m"], new["a"][:, None] * X, rtol=1e-12)
        if name == "AutoLaplaceApproximation":  # the same draws as NumPyro's at the same key
            _assert_same(ours.sample_posterior(key, params, *new_args, sample_shape=(4,),
                                               **new_kwargs),
                         theirs.sample_posterior(key, params, *new_args, sample_shape=(4,),
                                                 **new_kwargs))


@pytest.mark.parametrize("new_args, new_kwargs", NEW_ARGS, ids=["y=None", "new x"])
def test_autodelta_sample_posterior_gives_deterministic_sites_at_new_arguments(new_args,
                                                                                 new_kwargs):
    """NumPyro's AutoDelta runs the model at the new arguments for its deterministic sites."""
    ours, theirs = _fitted("AutoDelta")
    params = _params("AutoDelta")
    key = jax.random.PRNGKey(1)
    got = ours.sample_posterior(key, params, *new_args, sample_shape=(2,), **new_kwargs)
    _assert_same(got, theirs.sample_posterior(key, params, *new_args, sample_shape=(2,),
                                              **new_kwargs))
    assert got["m"].shape == (2, new_args[0].shape[0])


@pytest.mark.parametrize("name", GUIDES)
def test_median_and_quantiles_after_new_arguments_are_the_prototypes(name):
    ours, theirs = _fitted(name)
    params = _params(name)
    ours.sample_posterior(jax.random.PRNGKey(1), params, X_NEW)
    _assert_same(ours.median(params), theirs.median(params))
    if name != "AutoDelta":
        _assert_same(ours.quantiles(params, [0.2, 0.7]), theirs.quantiles(params, [0.2, 0.7]))
