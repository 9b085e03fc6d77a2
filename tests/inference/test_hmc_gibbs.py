"""`HMCGibbs` (NumPyro's HMC-within-Gibbs): draws against analytic posteriors, the Gibbs step's
values kept exactly, one compiled sampler per Gibbs function, and clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import HMC, MCMC, NUTS, BarkerMH, HMCGibbs, KernelSettingsError


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


# (x0, x1) ~ MVN(0, COV) with x0 drawn by its exact conditional given x1 (NumPyro's
# `test_gaussian_model`): the chain's moments are the joint's.
_A = np.random.default_rng(0).normal(size=(4, 4))
COV = _A @ _A.T + 0.25 * np.eye(4)
C00, C01, C10, C11 = COV[:2, :2], COV[:2, 2:], COV[2:, :2], COV[2:, 2:]


def _gaussian_model():
    x0 = effppl.sample("x0", dist.MultivariateNormal(jnp.zeros(2), covariance_matrix=C00))
    loc1 = C10 @ np.linalg.inv(C00) @ x0
    effppl.sample("x1", dist.MultivariateNormal(
        loc1, covariance_matrix=C11 - C10 @ np.linalg.inv(C00) @ C01))


def _x0_given_x1(rng_key, gibbs_sites, hmc_sites):
    loc = C01 @ np.linalg.inv(C11) @ hmc_sites["x1"]
    cov = C00 - C01 @ np.linalg.inv(C11) @ C10
    return {"x0": dist.MultivariateNormal(loc, covariance_matrix=cov).sample(rng_key)}


@pytest.mark.parametrize("inner", [NUTS, HMC])
def test_gaussian_joint_moments(inner):
    kernel = HMCGibbs(inner(_gaussian_model, dense_mass=True), gibbs_fn=_x0_given_x1,
                      gibbs_sites=["x0"])
    mcmc = MCMC(kernel, num_warmup=500, num_samples=3000, num_chains=2, progress_bar=False)
    mcmc.run(jax.random.key(0))
    draws = mcmc.get_samples()
    joint = np.concatenate([draws["x0"], draws["x1"]], axis=1)
    assert joint.shape == (6000, 4)
    sd = np.sqrt(np.diag(COV))
    np.testing.assert_allclose(joint.mean(0), 0.0, atol=0.15 * sd.max())
    np.testing.assert_allclose(np.std(joint, axis=0), sd, rtol=0.1)
    np.testing.assert_allclose(np.corrcoef(joint.T), COV / np.outer(sd, sd), atol=0.08)


def _normal_pair():
    x = effppl.sample("x", dist.Normal(0.0, 2.0))
    sigma = effppl.sample("sigma", dist.LogNormal(0.0, 0.3))
    effppl.sample("y", dist.Normal(x, sigma))


@pytest.mark.slow
@pytest.mark.parametrize("site,value", [("x", 1.5), ("sigma", 0.3)])
def test_the_gibbs_value_is_kept_and_the_rest_is_drawn_given_it(site, value):
    """A `gibbs_fn` returning a constant pins its site (positive support too: the value goes
    through the unconstraining transform and back exactly enough); the other sites then follow
    their conditional posterior given it (here `y | x, sigma` ~ Normal(x, sigma))."""
    def pin(rng_key, gibbs_sites, hmc_sites):
        return {site: jnp.asarray(value)}

    mcmc = MCMC(HMCGibbs(NUTS(_normal_pair), gibbs_fn=pin, gibbs_sites=[site]),
                num_warmup=300, num_samples=4000, progress_bar=False)
    mcmc.run(jax.random.key(1))
    draws = mcmc.get_samples()
    np.testing.assert_allclose(draws[site], value, rtol=1e-12)
    if site == "x":  # sigma ~ LogNormal(0, 0.3) and y | sigma ~ Normal(1.5, sigma)
        y = draws["y"]
        assert abs(y.mean() - 1.5) < 0.06
        assert abs(np.mean((y - 1.5) ** 2) - np.exp(2 * 0.3 ** 2)) < 0.1  # E[sigma^2]
        assert abs(np.log(draws["sigma"]).std() - 0.3) < 0.03
    else:  # x ~ Normal(0, 2) and y | x ~ Normal(x, 0.3): y ~ Normal(0, sqrt(4.09))
        assert abs(draws["y"].std() - np.sqrt(4.09)) < 0.2
        assert abs(np.std(draws["y"] - draws["x"]) - 0.3) < 0.03


def test_gibbs_fn_sees_constrained_values_and_deterministic_sites():
    seen = {}

    def model():
        s = effppl.sample("s", dist.LogNormal(0.0, 1.0))
        effppl.deterministic("twice", 2 * s)
        effppl.sample("g", dist.Normal(0.0, 1.0))

    def gibbs_fn(rng_key, gibbs_sites, hmc_sites):
        seen["args"] = (sorted(gibbs_sites), sorted(hmc_sites))
        # a function of the positive value and of the deterministic site: g = log s exactly
        return {"g": jnp.log(hmc_sites["twice"] / 2)}

    mcmc = MCMC(HMCGibbs(NUTS(model), gibbs_fn=gibbs_fn, gibbs_sites=["g"]), num_warmup=50,
                num_samples=100, progress_bar=False)
    mcmc.run(jax.random.key(2))
    draws = mcmc.get_samples()
    assert seen["args"] == (["g"], ["s", "twice"])
    assert np.all(draws["s"] > 0)
    # g is drawn before the HMC step moves s: it is log of the previous draw's s
    np.testing.assert_allclose(draws["g"][1:], np.log(draws["s"][:-1]), rtol=1e-10)


def test_each_gibbs_fn_gets_its_own_sampler():
    """The compiled sampler is cached by the kernel's settings: a second Gibbs function on the
    same model must not reuse the first one's program."""
    def pin(value):
        return lambda rng_key, gibbs_sites, hmc_sites: {"x": jnp.asarray(value)}

    for value in (1.0, 2.0):
        mcmc = MCMC(HMCGibbs(NUTS(_normal_pair), gibbs_fn=pin(value), gibbs_sites=["x"]),
                    num_warmup=10, num_samples=10, progress_bar=False)
        mcmc.run(jax.random.key(3))
        np.testing.assert_allclose(mcmc.get_samples()["x"], value)


def _run(kernel):
    MCMC(kernel, num_warmup=5, num_samples=5, progress_bar=False).run(jax.random.key(0))


def test_settings_errors():
    with pytest.raises(KernelSettingsError, match="NUTS. or .HMC. kernel"):
        HMCGibbs(BarkerMH(_normal_pair), gibbs_fn=lambda **kw: {}, gibbs_sites=["x"])
    with pytest.raises(KernelSettingsError, match="potential_fn"):
        HMCGibbs(NUTS(potential_fn=lambda z: z ** 2), gibbs_fn=lambda **kw: {},
                 gibbs_sites=["x"])
    with pytest.raises(KernelSettingsError, match="mass_matrix='low_rank'"):
        HMCGibbs(NUTS(_normal_pair, mass_matrix="low_rank"), gibbs_fn=lambda **kw: {},
                 gibbs_sites=["x"])
    with pytest.raises(KernelSettingsError, match="gibbs_fn"):
        HMCGibbs(NUTS(_normal_pair), gibbs_fn=None, gibbs_sites=["x"])
    for sites in ("x", [], ["x", "x"], [1]):
        with pytest.raises(KernelSettingsError, match="gibbs_sites"):
            HMCGibbs(NUTS(_normal_pair), gibbs_fn=lambda **kw: {}, gibbs_sites=sites)


def _keep(rng_key, gibbs_sites, hmc_sites):
    return dict(gibbs_sites)


def test_run_errors_name_the_site():
    with pytest.raises(KernelSettingsError, match=r"\['z'\] are not continuous latent sites"):
        _run(HMCGibbs(NUTS(_normal_pair), gibbs_fn=_keep, gibbs_sites=["z"]))
    with pytest.raises(KernelSettingsError, match="nothing left for the HMC kernel"):
        _run(HMCGibbs(NUTS(_normal_pair), gibbs_fn=_keep, gibbs_sites=["x", "sigma", "y"]))
    with pytest.raises(KernelSettingsError, match=r"returned \['y'\]"):
        _run(HMCGibbs(NUTS(_normal_pair), gibbs_fn=lambda **kw: {"y": 0.0},
                      gibbs_sites=["x"]))
    with pytest.raises(KernelSettingsError, match=r"dtype complex.* for Gibbs site 'x'"):
        _run(HMCGibbs(NUTS(_normal_pair), gibbs_fn=lambda **kw: {"x": jnp.asarray(2 + 1j)},
                      gibbs_sites=["x"]))
    with pytest.raises(KernelSettingsError, match=r"'a' for Gibbs site 'x'"):
        _run(HMCGibbs(NUTS(_normal_pair), gibbs_fn=lambda **kw: {"x": "a"}, gibbs_sites=["x"]))
    with pytest.raises(KernelSettingsError, match=r"shape \(2,\) for Gibbs site 'x'"):
        _run(HMCGibbs(NUTS(_normal_pair), gibbs_fn=lambda **kw: {"x": jnp.zeros(2)},
                      gibbs_sites=["x"]))


def test_a_support_that_depends_on_an_hmc_site_is_refused():
    def model():
        theta = effppl.sample("theta", dist.Exponential(1.0))
        effppl.sample("u", dist.Uniform(0.0, theta))

    with pytest.raises(KernelSettingsError, match="support of Gibbs site 'u' depends"):
        _run(HMCGibbs(NUTS(model), gibbs_fn=_keep, gibbs_sites=["u"]))
    # the other way round is sound: theta's support is fixed
    _run(HMCGibbs(NUTS(model), gibbs_fn=_keep, gibbs_sites=["theta"]))


@pytest.mark.slow
def test_an_hmc_site_whose_support_depends_on_a_gibbs_site():
    """`u ~ Uniform(0, theta)` moved by NUTS, `theta` drawn by Gibbs from its exact conditional
    `u + Exponential(1)`: `u`'s value is kept through the Gibbs step (unconstrained anew under
    the new `theta`), so the chain targets the posterior that NUTS on the whole model finds."""
    def model(y):
        theta = effppl.sample("theta", dist.Gamma(2.0, 1.0))
        u = effppl.sample("u", dist.Uniform(0.0, theta))
        effppl.sample("y", dist.Normal(u, 0.3), obs=y)

    def gibbs_fn(rng_key, gibbs_sites, hmc_sites):
        return {"theta": hmc_sites["u"] + jax.random.exponential(rng_key)}

    runs = {}
    for name, kernel in [("gibbs", HMCGibbs(NUTS(model), gibbs_fn=gibbs_fn,
                                            gibbs_sites=["theta"])),
                         ("nuts", NUTS(model))]:
        mcmc = MCMC(kernel, num_warmup=500, num_samples=4000, num_chains=2,
                    progress_bar=False)
        mcmc.run(jax.random.key(4), jnp.asarray(1.0))
        runs[name] = mcmc.get_samples()
    for site, tol in [("u", 0.03), ("theta", 0.12)]:
        assert abs(runs["gibbs"][site].mean() - runs["nuts"][site].mean()) < tol, site
        assert abs(runs["gibbs"][site].std() - runs["nuts"][site].std()) < tol, site
    assert np.all(runs["gibbs"]["u"] < runs["gibbs"]["theta"])


def test_new_data_a_gibbs_fn_closes_over_are_read():
    """A `gibbs_fn` reading an array it closes over (here from a dict, as from a global): new
    values there are used by the next run, not the first run's (the compiled sampler is keyed
    by the function's program and the arrays it closes over)."""
    data = {"x": jnp.asarray(1.0)}

    def pin(rng_key, gibbs_sites, hmc_sites):
        return {"x": data["x"]}

    for value in (1.0, -3.0):
        data["x"] = jnp.asarray(value)
        mcmc = MCMC(HMCGibbs(NUTS(_normal_pair), gibbs_fn=pin, gibbs_sites=["x"]),
                    num_warmup=10, num_samples=10, progress_bar=False)
        mcmc.run(jax.random.key(5))
        np.testing.assert_allclose(mcmc.get_samples()["x"], value)


def _negative_sigma(rng_key, gibbs_sites, hmc_sites):
    return {"sigma": -jnp.abs(gibbs_sites["sigma"])}  # outside the positive support


def test_a_gibbs_value_outside_the_support_is_named():
    """A `gibbs_fn` returning a value outside its site's support leaves the chain at NaN: the
    warning names `gibbs_fn` and the site, not only a stuck chain."""
    mcmc = MCMC(HMCGibbs(NUTS(_normal_pair), gibbs_fn=_negative_sigma, gibbs_sites=["sigma"]),
                num_warmup=30, num_samples=20, progress_bar=False)
    with pytest.warns(UserWarning, match=r"not finite: 'sigma' in chains \[0\] .*_negative_sigma"
                                         r".*outside the site's support"):
        mcmc.run(jax.random.key(0))
    assert np.isnan(mcmc.get_samples()["sigma"]).all()
