"""`BarkerMH` (Barker's proposal on blackjax's `barker` kernel, with effppl's warmup): analytic
posteriors, NumPyro's `BarkerMH` on the same model, preconditioning across scales, statistics
and settings errors."""

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import MCMC, BarkerMH, KernelSettingsError


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _ess(draws):
    """Bulk ESS per scalar of `draws[chain, draw, ...]`."""
    return az.ess(az.convert_to_dataset({"x": np.asarray(draws)}))["x"].values.ravel()


def scales(p):
    p.sample("a", dist.Normal(0.0, 0.01))
    p.sample("b", dist.Normal(5.0, 100.0))
    p.sample("c", dist.Normal(jnp.zeros(3), jnp.array([1.0, 2.0, 3.0])))


def test_preconditions_by_the_adapted_covariance():
    """Coordinates four orders of magnitude apart: each is explored at its own scale (blackjax's
    kernel scales by the square root of what its metric takes as the mass matrix, so it gets
    the precision; given the covariance itself, `b` moved by ~1/100 of its sd: ESS 2)."""
    mcmc = MCMC(BarkerMH(lambda: scales(effppl)), num_warmup=1500, num_samples=3000,
                num_chains=2, progress_bar=False)
    mcmc.run(jax.random.key(0))
    s = mcmc.get_samples(group_by_chain=True)
    for name, sd in (("a", [0.01]), ("b", [100.0]), ("c", [1.0, 2.0, 3.0])):
        draws = np.asarray(s[name]).reshape(2, 3000, -1)
        np.testing.assert_allclose(draws.std((0, 1)), sd, rtol=0.15)
        assert _ess(draws).min() > 300, name


@pytest.mark.slow
def test_normal_mean_matches_the_analytic_posterior_and_numpyro():
    y = np.asarray(jax.random.normal(jax.random.key(1), (50,))) * 2.0 + 1.5

    def model(p, y):
        mu = p.sample("mu", dist.Normal(0.0, 10.0))
        with p.plate("N", y.shape[0]):
            p.sample("y", dist.Normal(mu, 2.0), obs=y)

    # conjugate: precision 1/100 + 50/4
    prec = 1 / 100 + len(y) / 4
    mean, sd = (y.sum() / 4) / prec, prec ** -0.5
    ours = MCMC(BarkerMH(lambda y: model(effppl, y)), num_warmup=1000, num_samples=4000,
                num_chains=2, progress_bar=False)
    ours.run(jax.random.key(2), jnp.asarray(y), extra_fields=("accept_prob",))
    theirs = numpyro.infer.MCMC(numpyro.infer.BarkerMH(lambda y: model(numpyro, y)),
                                num_warmup=1000, num_samples=4000, num_chains=2,
                                chain_method="sequential", progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs.run(jax.random.PRNGKey(2), jnp.asarray(y), extra_fields=("accept_prob",))
    for mcmc in (ours, theirs):
        draws = np.asarray(mcmc.get_samples(group_by_chain=True)["mu"])
        mcse = draws.std() / np.sqrt(_ess(draws)[0])
        assert abs(draws.mean() - mean) < 4 * mcse + 1e-3
        np.testing.assert_allclose(draws.std(), sd, rtol=0.1)
    # the same target acceptance (NumPyro's 0.4) is reached by both adaptations
    ours_acc = float(np.mean(ours.get_extra_fields()["acceptance_rate"]))
    np.testing.assert_array_equal(ours.get_extra_fields()["accept_prob"],
                                  ours.get_extra_fields()["acceptance_rate"])
    theirs_acc = float(np.mean(theirs.get_extra_fields()["accept_prob"]))
    assert abs(ours_acc - theirs_acc) < 0.15, (ours_acc, theirs_acc)


def test_dense_mass_on_a_correlated_gaussian():
    """Scales 10 and 1, correlation 0.9: explored only if the kernel is preconditioned by the
    adapted covariance (given the covariance itself, it moves along the wrong axes)."""
    cov = np.array([[100.0, 9.0], [9.0, 1.0]])

    def model():
        effppl.sample("x", dist.MultivariateNormal(jnp.zeros(2), jnp.asarray(cov)))

    mcmc = MCMC(BarkerMH(model, dense_mass=True), num_warmup=1500, num_samples=3000,
                num_chains=2, progress_bar=False)
    mcmc.run(jax.random.key(3))
    x = np.asarray(mcmc.get_samples()["x"])
    np.testing.assert_allclose(np.cov(x.T), cov, rtol=0.2)
    assert _ess(np.asarray(mcmc.get_samples(group_by_chain=True)["x"])).min() > 200
    imm = np.asarray(mcmc.last_state.inverse_mass_matrix)[0]
    assert imm.shape == (2, 2) and imm[0, 1] / np.sqrt(imm[0, 0] * imm[1, 1]) > 0.8
    # NumPyro's BarkerMH `adapt_state`: arrays over the flat position (no dicts keyed by
    # blocks), `S S^T` the mass matrix, so its inverse is the adapted covariance
    adapt = mcmc.last_state.adapt_state
    root = np.asarray(adapt.mass_matrix_sqrt)[0]
    np.testing.assert_allclose(np.linalg.inv(root @ root.T), imm, rtol=1e-8)
    np.testing.assert_allclose(np.linalg.inv(root @ root.T), cov, rtol=0.25)
    root_inv = np.asarray(adapt.mass_matrix_sqrt_inv)[0]
    np.testing.assert_allclose(root_inv @ root, np.eye(2), atol=1e-8)
    np.testing.assert_allclose(np.asarray(adapt.inverse_mass_matrix)[0], imm)


def test_a_non_finite_proposal_is_rejected_and_counted():
    """A proposal outside a region where the log density is finite: rejected, acceptance 0
    (not NaN), counted in `diverging`; the step size stays finite."""
    def model():
        x = effppl.sample("x", dist.Normal(0.0, 1.0))
        effppl.factor("wall", jnp.where(x > 1.5, jnp.nan, 0.0))

    mcmc = MCMC(BarkerMH(model, step_size=3.0), num_warmup=200, num_samples=500,
                progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.key(5))
    fields = mcmc.get_extra_fields()
    assert np.all(np.isfinite(np.asarray(fields["acceptance_rate"])))
    assert np.all(np.isfinite(np.asarray(mcmc.last_state.step_size)))
    assert int(np.sum(np.asarray(fields["diverging"]))) > 0
    assert float(np.max(np.asarray(mcmc.get_samples()["x"]))) <= 1.5


def test_statistics_are_those_of_a_metropolis_hastings_step():
    def model():
        effppl.sample("x", dist.Normal(0.0, 1.0))

    mcmc = MCMC(BarkerMH(model), num_warmup=100, num_samples=200, progress_bar=False)
    mcmc.run(jax.random.key(4))
    fields = mcmc.get_extra_fields()
    assert np.all(np.asarray(fields["n_steps"]) == 1)
    assert not np.any(np.asarray(fields["diverging"]))
    assert "energy" not in fields
    acc = np.asarray(fields["acceptance_rate"])
    assert np.all((acc >= 0) & (acc <= 1)) and 0.2 < acc.mean() < 0.8
    idata = mcmc.to_arviz()
    assert idata.posterior["x"].shape == (1, 200)
    assert "acceptance_rate" in idata.sample_stats


def test_settings_errors():
    def model():
        effppl.sample("x", dist.Normal(0.0, 1.0))

    with pytest.raises(KernelSettingsError, match=r"BarkerMH\(..., mass_matrix='low_rank'\)"):
        BarkerMH(model, mass_matrix="low_rank")
    with pytest.raises(KernelSettingsError, match="target_accept_prob"):
        BarkerMH(model, target_accept_prob=1.5)
    with pytest.raises(KernelSettingsError, match="step_size"):
        BarkerMH(model, step_size=-1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_tree_depth'"):
        BarkerMH(model, max_tree_depth=5)
    with pytest.raises(KernelSettingsError, match="got a traced value"):
        jax.jit(lambda s: BarkerMH(model, step_size=s))(1.0)
