"""`MCMC.to_arviz` names a site's axes after its plates, as arviz's `from_numpyro` does."""

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as ndist
import pytest
from jax import lax
from numpyro.infer import MCMC as NumPyroMCMC
from numpyro.infer import NUTS as NumPyroNUTS

import effppl
from effppl import distributions as dist
from effppl.handlers import seed, trace
from effppl.infer import MCMC, NUTS

GROUP = np.array([0, 1, 2, 0, 1, 2, 0, 1])
Y = np.linspace(-1.0, 1.0, 8)


def _ppl(numpyro_style):
    """`(plate, sample, deterministic, distributions)` of NumPyro or effppl: one model, twice."""
    if numpyro_style:
        return numpyro.plate, numpyro.sample, numpyro.deterministic, ndist
    return effppl.plate, effppl.sample, effppl.deterministic, dist


def hierarchical(group, y, numpyro_style=False):
    plate, sample, deterministic, d = _ppl(numpyro_style)
    mu = sample("mu", d.Normal(0.0, 1.0))
    with plate("groups", 3):
        a = sample("a", d.Normal(mu, 1.0))
        deterministic("a2", 2 * a)
    with plate("rows", 2, dim=-2), plate("cols", 4):
        sample("b", d.Normal(0.0, 1.0))
    with plate("data", y.shape[0]):
        sample("y", d.Normal(a[group], 1.0), obs=y)


def _dims(idata):
    return {(group, name): idata[group][name].dims
            for group in ("posterior", "log_likelihood", "observed_data") if group in idata.groups()
            for name in idata[group].data_vars}


def test_trace_records_plates_as_numpyro_does():
    ours = trace(seed(hierarchical, 0)).get_trace(GROUP, Y)
    theirs = numpyro.handlers.trace(numpyro.handlers.seed(hierarchical, 0)).get_trace(GROUP, Y, True)
    for name in ("mu", "a", "a2", "b", "y"):
        expected = [(f.name, f.dim, f.size) for f in theirs[name]["cond_indep_stack"]]
        assert [(f.name, f.dim, f.size) for f in ours[name]["cond_indep_stack"]] == expected, name


@pytest.mark.slow
def test_to_arviz_names_dims_after_plates_like_from_numpyro():
    mcmc = MCMC(NUTS(hierarchical), num_warmup=20, num_samples=10, num_chains=1,
                progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.key(0), GROUP, Y)
    ours = _dims(mcmc.to_arviz())
    theirs = NumPyroMCMC(NumPyroNUTS(hierarchical), num_warmup=20, num_samples=10,
                         progress_bar=False)
    theirs.run(jax.random.key(0), GROUP, Y, True)
    expected = _dims(az.from_numpyro(theirs))
    assert ours[("posterior", "a")] == ("chain", "draw", "groups")
    assert ours[("posterior", "b")] == ("chain", "draw", "rows", "cols")
    assert ours[("log_likelihood", "y")] == ("chain", "draw", "data")
    assert ours == expected


def test_a_plate_inside_scan_names_its_axis_and_the_loop_axis_keeps_the_default():
    def walk(y):
        def step(carry, y_t):
            with effppl.plate("units", 3):
                z = effppl.sample("z", dist.Normal(carry, 1.0))
                effppl.sample("y", dist.Normal(z, 1.0), obs=y_t)
            return z, None

        lax.scan(step, jnp.zeros(3), y)

    mcmc = MCMC(NUTS(walk), num_warmup=10, num_samples=5, num_chains=1, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.key(0), jnp.ones((4, 3)))
    idata = mcmc.to_arviz()
    assert idata.posterior["z"].dims == ("chain", "draw", "z_dim_0", "units")
    assert idata.posterior["z"].shape == (1, 5, 4, 3)
    assert idata.log_likelihood["y"].dims == ("chain", "draw", "y_dim_0", "units")
    assert idata.observed_data["y"].dims == ("y_dim_0", "units")


def _idata(model, *args, num_chains=1):
    mcmc = MCMC(NUTS(model), num_warmup=5, num_samples=5, num_chains=num_chains,
                progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.key(0), *args)
    return mcmc.to_arviz()


@pytest.mark.slow
def test_a_deterministic_sites_plate_axes_lead_as_in_from_numpyro():
    def simplexes(numpyro_style=False):
        plate, sample, deterministic, d = _ppl(numpyro_style)
        with plate("groups", 3):
            p = sample("p", d.Dirichlet(jnp.ones(3)))
            deterministic("logp", jnp.log(p))

    ours = _dims(_idata(simplexes))
    theirs = NumPyroMCMC(NumPyroNUTS(simplexes), num_warmup=5, num_samples=5, progress_bar=False)
    theirs.run(jax.random.key(0), True)
    assert ours[("posterior", "logp")] == ("chain", "draw", "groups", "logp_dim_1")
    assert ours == _dims(az.from_numpyro(theirs))


def test_plate_names_arviz_cannot_use_leave_the_default_names_and_keep_the_data():
    def clashing(y1, y2):
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
        with effppl.plate("y1", 3):  # a plate named like a site
            effppl.sample("y1", dist.Normal(mu, 1.0), obs=y1)
        with effppl.plate("data", 3):
            a = effppl.sample("a", dist.Normal(mu, 1.0))
        with effppl.plate("data", 5):  # the same name, another size
            effppl.sample("y2", dist.Normal(a.sum(), 1.0), obs=y2)

    idata = _idata(clashing, jnp.ones(3), jnp.ones(5))
    assert idata.log_likelihood["y1"].dims == ("chain", "draw", "y1_dim_0")
    assert idata.posterior["a"].dims == ("chain", "draw", "a_dim_0")
    assert idata.observed_data["y2"].dims == ("y2_dim_0",)
    np.testing.assert_array_equal(idata.observed_data["y1"], np.ones(3))  # no NaN padding
    assert np.all(np.isfinite(idata.posterior["a"]))


def test_a_site_that_cond_branches_put_in_different_plates_records_no_plate():
    def branches(flag):
        def inside(_):
            with effppl.plate("a", 3):
                return effppl.sample("z", dist.Normal(0.0, 1.0))

        def outside(_):
            return effppl.sample("z", dist.Normal(0.0, 1.0).expand([3]))

        return lax.cond(flag, inside, outside, None)

    site = trace(seed(branches, 0)).get_trace(True)["z"]
    assert site["cond_indep_stack"] == [] and site["value"].shape == (3,)


def test_nested_plates_on_one_dim_are_an_error_naming_both():
    def model():
        with effppl.plate("a", 3), effppl.plate("b", 3, dim=-1):
            effppl.sample("z", dist.Normal(0.0, 1.0))

    with pytest.raises(effppl.SiteError, match=r"plate\('b', 3, dim=-1\).*enclosing plate 'a'"):
        trace(seed(model, 0)).get_trace()


def test_to_arviz_with_an_improper_uniform_latent():
    def model(y):
        mu = effppl.sample("mu", dist.ImproperUniform(dist.constraints.real, (), ()))
        effppl.sample("y", dist.Normal(mu, 1.0), obs=y)

    y = jnp.array([0.5, 1.0, 2.0])
    mcmc = MCMC(NUTS(model), num_warmup=50, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y)
    idata = mcmc.to_arviz()
    np.testing.assert_allclose(idata.observed_data["y"].values, y)
    expected = -0.5 * (y - mcmc.get_samples()["mu"][:, None]) ** 2 - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(idata.log_likelihood["y"].values[0], expected, rtol=1e-6)
