"""`handlers.reparam` with `LocScaleReparam`/`TransformReparam` against hand-written non-centred
densities and NumPyro (its funnel example: the centred funnel, reparametrized)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from jax.scipy import stats
from numpyro import handlers as nh
from numpyro.infer import reparam as np_reparam

import effppl
from effppl import distributions as dist
from effppl import handlers
from effppl.infer.reparam import LocScaleReparam, TransformReparam


def _close(a, b, tol=1e-10):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def funnel(sample, dim=4):
    def model():
        y = sample("y", dist.Normal(0, 3))
        sample("x", dist.Normal(jnp.zeros(dim - 1), jnp.exp(y / 2)))
    return model


def test_funnel_decentered_has_the_non_centred_density():
    model = handlers.reparam(funnel(effppl.sample), config={"x": LocScaleReparam(0)})
    xd = jnp.array([0.3, -1.2, 2.0])
    lp, tr = effppl.log_density(model, (), {}, {"y": 1.5, "x_decentered": xd})
    _close(lp, stats.norm.logpdf(1.5, 0, 3) + jnp.sum(stats.norm.logpdf(xd)))
    assert tr["x"]["type"] == "deterministic"
    _close(tr["x"]["value"], jnp.exp(1.5 / 2) * xd)
    theirs = nh.reparam(funnel(numpyro.sample), config={"x": np_reparam.LocScaleReparam(0)})
    np_lp, _ = numpyro.infer.util.log_density(theirs, (), {}, {"y": 1.5, "x_decentered": xd})
    _close(lp, np_lp)


def test_partial_centering_matches_numpyro():
    model = handlers.reparam(funnel(effppl.sample), config={"x": LocScaleReparam(0.3)})
    theirs = nh.reparam(funnel(numpyro.sample), config={"x": np_reparam.LocScaleReparam(0.3)})
    point = {"y": -0.7, "x_decentered": jnp.array([0.1, 0.5, -2.0])}
    lp, tr = effppl.log_density(model, (), {}, point)
    np_lp, np_tr = numpyro.infer.util.log_density(theirs, (), {}, point)
    _close(lp, np_lp)
    _close(tr["x"]["value"], np_tr["x"]["value"])


def test_reparam_inside_a_plain_scan_and_as_a_block():
    def model(T):
        def step(c, _):
            z = effppl.sample("z", dist.Normal(c, 2.0))
            return z, z
        return jax.lax.scan(step, 0.5, None, length=T)

    zd = jnp.array([0.2, -0.4, 1.0])
    model_r = handlers.reparam(model, config={"z": LocScaleReparam(0)})
    lp, tr = effppl.log_density(model_r, (3,), {}, {"z_decentered": zd})
    _close(lp, jnp.sum(stats.norm.logpdf(zd)))
    z = [0.5 + 2.0 * zd[0]]
    for t in (1, 2):
        z.append(z[-1] + 2.0 * zd[t])
    _close(tr["z"]["value"], jnp.stack(z))

    def blocked(T):
        with handlers.reparam(config={"z": LocScaleReparam(0)}):
            return model(T)
    lp2, tr2 = effppl.log_density(blocked, (3,), {}, {"z_decentered": zd})
    _close(lp2, lp)
    _close(tr2["z"]["value"], tr["z"]["value"])


def test_transform_reparam_draws_the_base():
    def model():
        effppl.sample("x", dist.TransformedDistribution(
            dist.Normal(0.0, 1.0), dist.transforms.ExpTransform()))
    model_r = handlers.reparam(model, config={"x": TransformReparam()})
    lp, tr = effppl.log_density(model_r, (), {}, {"x_base": 0.4})
    _close(lp, stats.norm.logpdf(0.4))
    _close(tr["x"]["value"], jnp.exp(0.4))


def test_reparam_of_an_observed_site_is_an_error():
    def model():
        effppl.sample("x", dist.Normal(0.0, 1.0), obs=1.0)
    with pytest.raises(effppl.SiteError, match="`x` is observed"):
        handlers.trace(handlers.reparam(model, config={"x": LocScaleReparam(0)})).get_trace()


@pytest.mark.slow
def test_nuts_on_the_reparametrized_funnel_recovers_the_prior_of_y():
    from effppl.infer import MCMC, NUTS
    model = handlers.reparam(funnel(effppl.sample, dim=10), config={"x": LocScaleReparam(0)})
    mcmc = MCMC(NUTS(model), num_warmup=500, num_samples=2000, num_chains=2,
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0))
    y = np.asarray(mcmc.get_samples()["y"])
    # y ~ N(0, 3) exactly (the funnel has no data): NUTS agrees within Monte Carlo error
    assert abs(y.mean()) < 0.3 and abs(y.std() - 3.0) < 0.3
    assert mcmc.get_samples()["x"].shape == (4000, 9)


def test_reparam_block_inside_a_model_runs_under_nuts():
    from effppl.infer import MCMC, NUTS

    def model(data):   # NumPyro's test_predictive_with_improper model
        alpha = effppl.sample("alpha", dist.Uniform(0, 1))
        with handlers.reparam(config={"loc": TransformReparam()}):
            loc = effppl.sample("loc", dist.TransformedDistribution(
                dist.Uniform(0, 1).mask(False), dist.transforms.AffineTransform(0, alpha)))
        effppl.sample("obs", dist.Normal(loc, 0.1), obs=data)
    data = 0.9 + 0.1 * jax.random.normal(jax.random.PRNGKey(0), (50,))
    mcmc = MCMC(NUTS(model), num_warmup=200, num_samples=200, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), data)
    assert set(mcmc.get_samples()) == {"alpha", "loc_base", "loc"}
    assert abs(float(mcmc.get_samples()["loc"].mean()) - float(data.mean())) < 0.05


def test_learnable_centering_is_a_param_site_fitted_by_svi_as_numpyros():
    from numpyro.infer import Trace_ELBO as NumPyroELBO

    from effppl.infer import SVI, Trace_ELBO
    from effppl.optim import Adam

    def guide(sample, param):
        def g():
            sample("y", dist.Delta(param("y_loc", 0.4)))
            sample("x_decentered", dist.Delta(param("xd_loc", jnp.array([0.3, -1.0, 0.8]))))
        return g

    ours = handlers.reparam(funnel(effppl.sample), config={"x": LocScaleReparam(centered=None)})
    theirs = nh.reparam(funnel(numpyro.sample), config={"x": np_reparam.LocScaleReparam(None)})
    params = {"y_loc": jnp.array(-0.6), "xd_loc": jnp.array([0.1, 0.5, -2.0]),
              "x_centered": jnp.array(0.3)}  # the site's event shape: ()

    def loss(elbo, model, g):
        return jax.value_and_grad(lambda p: elbo.loss(jax.random.PRNGKey(0), p, model, g))(params)

    value, grads = loss(Trace_ELBO(), ours, guide(effppl.sample, effppl.param))
    np_value, np_grads = loss(NumPyroELBO(), theirs, guide(numpyro.sample, numpyro.param))
    _close(value, np_value, 1e-8)
    for name in params:
        _close(grads[name], np_grads[name], 1e-8)
    assert abs(float(grads["x_centered"])) > 1e-3  # the centering is learnt

    svi = SVI(ours, guide(effppl.sample, effppl.param), Adam(0.05), Trace_ELBO())
    result = svi.run(jax.random.PRNGKey(1), 30, progress_bar=False)
    c = result.params["x_centered"]
    assert c.shape == () and 0 < float(c) < 1 and abs(float(c) - 0.5) > 1e-3


def test_array_centering_and_shape_params_match_numpyro():
    """An array `centered` (one centering per element) and a StudentT carried over with
    `shape_params=("df",)`, as NumPyro's."""
    def model(sample):
        def fn():
            y = sample("y", dist.Normal(0, 3))
            sample("x", dist.StudentT(4.0, jnp.zeros(3) + y, jnp.exp(y / 2)))
        return fn

    centered = jnp.array([0.0, 0.4, 1.0])
    ours = handlers.reparam(model(effppl.sample), config={
        "x": LocScaleReparam(centered, shape_params=("df",))})
    theirs = nh.reparam(model(numpyro.sample), config={
        "x": np_reparam.LocScaleReparam(centered, shape_params=("df",))})
    point = {"y": 0.8, "x_decentered": jnp.array([0.1, 0.5, -2.0])}
    lp, tr = effppl.log_density(ours, (), {}, point)
    np_lp, np_tr = numpyro.infer.util.log_density(theirs, (), {}, point)
    _close(lp, np_lp)
    _close(tr["x"]["value"], np_tr["x"]["value"])


def test_reparam_of_a_family_it_cannot_rebuild_is_an_error_naming_site_and_family():
    def model():
        effppl.sample("tau", dist.HalfCauchy(5.0))
        effppl.sample("d", dist.StudentT(3.0, 0.0, 1.0))

    point = {"tau": 1.0, "d_decentered": 0.5}
    with pytest.raises(effppl.primitives.SiteError, match="site `tau` has a HalfCauchy with "
                                                          "support"):
        effppl.log_density(handlers.reparam(model, config={"tau": LocScaleReparam(0)}), (), {},
                           point)

    def walk():
        effppl.sample("w", dist.GaussianRandomWalk(1.0, num_steps=3))
    with pytest.raises(effppl.primitives.SiteError, match="site `w` has a GaussianRandomWalk, "
                                                          "which is not a location-scale"):
        effppl.log_density(handlers.reparam(walk, config={"w": LocScaleReparam(0)}), (), {},
                           {"w_decentered": jnp.zeros(3)})
    with pytest.raises(effppl.primitives.SiteError, match=r"site `d` has a StudentT, which also "
                                                          r"needs `df`.*shape_params=\('df',\)"):
        effppl.log_density(handlers.reparam(model, config={"d": LocScaleReparam(0)}), (), {},
                           point)
    for bad in ("a", float("nan"), jnp.array([0.3, 2.0]), True):
        with pytest.raises(ValueError, match="expected a number in \\[0, 1\\]"):
            LocScaleReparam(bad)
