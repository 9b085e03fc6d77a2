"""`DiscreteHMCGibbs` (NumPyro's Gibbs updates of discrete sites within HMC) and `MixedHMC`
(discrete updates inside the HMC trajectory): draws against
analytic moments and against NUTS with the discrete sites summed out by enumeration (an
independent path), the carrier's log density against a hand-written one, what the user sees
(samples, summary, arviz, Predictive), and clear errors."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.distributions import Normal

import effppl
from effppl import distributions as dist
from effppl.handlers.internal import SiteError
from effppl.infer import (
    HMC,
    MCMC,
    NUTS,
    BarkerMH,
    DiscreteHMCGibbs,
    KernelSettingsError,
    MCMCError,
    MixedHMC,
    Predictive,
)
from effppl.infer.util import log_density


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


PROBS = np.array([0.15, 0.3, 0.3, 0.25])
LOCS = np.array([-1.0, 0.0, 1.0, 2.0])


def _mixture(probs, locs):
    c = effppl.sample("c", dist.Categorical(probs))
    effppl.sample("x", dist.Normal(locs[c], 1.0))


def _moments():
    k = np.arange(4)
    mean_c, mean_x = PROBS @ k, PROBS @ LOCS
    return mean_x, 1.0 + PROBS @ LOCS**2 - mean_x**2, mean_c, PROBS @ k**2 - mean_c**2


def _gibbs(random_walk, modified):
    return DiscreteHMCGibbs(NUTS(_mixture), random_walk=random_walk, modified=modified)


def _mixed(random_walk, modified):
    return MixedHMC(HMC(_mixture, trajectory_length=1.2), num_discrete_updates=5,
                    random_walk=random_walk, modified=modified)


@pytest.mark.parametrize("make,random_walk,modified", [
    (_gibbs, False, False), (_gibbs, False, True), (_gibbs, True, False), (_gibbs, True, True),
    (_mixed, False, False), (_mixed, True, True)])
def test_mixture_moments_are_the_joints(make, random_walk, modified):
    """The joint of a label and a value: its four moments are known exactly."""
    kernel = make(random_walk, modified)
    mcmc = MCMC(kernel, num_warmup=300, num_samples=4000, num_chains=4, progress_bar=False)
    mcmc.run(jax.random.key(1), PROBS, LOCS)
    draws = mcmc.get_samples()
    assert sorted(draws) == ["c", "x"]
    assert jnp.issubdtype(draws["c"].dtype, jnp.integer) and draws["c"].shape == (16000,)
    mean_x, var_x, mean_c, var_c = _moments()
    np.testing.assert_allclose(draws["x"].mean(), mean_x, atol=0.07)
    np.testing.assert_allclose(draws["x"].var(), var_x, rtol=0.06)
    np.testing.assert_allclose(draws["c"].mean(), mean_c, atol=0.05)
    np.testing.assert_allclose(draws["c"].var(), var_c, rtol=0.06)
    assert set(np.unique(draws["c"])) == {0, 1, 2, 3}


def test_carrier_log_density_is_the_models():
    """The model the chains run: the discrete site's log probability at the carrier's value
    (a hand-written density); off the support (an initial point), at its nearest end."""
    kernel = DiscreteHMCGibbs(NUTS(_mixture))
    for index in range(4):
        lp, tr = log_density(kernel.model, (PROBS, LOCS), {},
                             {"c_gibbs_index": float(index), "x": 0.3})
        want = np.log(PROBS[index]) + Normal(LOCS[index], 1.0).log_prob(0.3)
        np.testing.assert_allclose(lp, want, rtol=1e-12)
        assert int(tr["c"]["value"]) == index
    for off, end in ((-1.7, 0), (4.2, 3)):
        lp, tr = log_density(kernel.model, (PROBS, LOCS), {}, {"c_gibbs_index": off, "x": 0.3})
        np.testing.assert_allclose(lp, np.log(PROBS[end]) + Normal(LOCS[end], 1.0).log_prob(0.3))
        assert int(tr["c"]["value"]) == end


def _clusters(y):
    p = effppl.sample("p", dist.Beta(2.0, 2.0))
    mu = effppl.sample("mu", dist.Normal(jnp.zeros(2), 3.0).to_event(1))
    with effppl.plate("N", y.shape[0]):
        z = effppl.sample("z", dist.Bernoulli(p))
        effppl.sample("y", dist.Normal(mu[z], 1.0), obs=y)


@pytest.mark.slow
def test_matches_nuts_with_the_sites_summed_out():
    """A two-cluster model with a label per point: the continuous posterior of the Gibbs chain
    against NUTS on the same model with the labels enumerated (summed out exactly)."""
    rng = np.random.default_rng(0)
    y = np.where(rng.random(30) < 0.3, -2.0, 2.5) + rng.normal(size=30)
    settings = dict(num_warmup=400, num_samples=2000, num_chains=4, progress_bar=False)
    gibbs = MCMC(DiscreteHMCGibbs(NUTS(_clusters, init_strategy=effppl.infer.init_to_value(
        values={"mu": np.array([-1.0, 1.0])}))), **settings)
    gibbs.run(jax.random.key(0), y)
    exact = MCMC(NUTS(effppl.infer.config_enumerate(_clusters), init_strategy=effppl.infer
                      .init_to_value(values={"mu": np.array([-1.0, 1.0])})), **settings)
    exact.run(jax.random.key(0), y)
    a, b = gibbs.get_samples(), exact.get_samples()
    assert a["z"].shape == (8000, 30) and "z" not in b
    for name in ("p", "mu"):
        sd = np.std(b[name], axis=0)
        np.testing.assert_allclose(np.mean(a[name], 0), np.mean(b[name], 0), atol=0.25 * sd.max())
        np.testing.assert_allclose(np.std(a[name], 0), sd, rtol=0.2)
    # the labels' posterior probabilities: each point's, from the cluster it is nearest to
    assert np.mean(a["z"][:, y > 0.25]) > 0.9 and np.mean(a["z"][:, y < -0.25]) < 0.1


def _discrete_only():
    effppl.sample("x", dist.Bernoulli(0.7).expand([3]))
    effppl.sample("y", dist.Binomial(10, 0.3))


@pytest.mark.parametrize("kernel", [DiscreteHMCGibbs, MixedHMC])
def test_a_model_of_discrete_sites_only_runs_without_warnings(kernel):
    """No continuous site: the discrete updates alone (NumPyro's `test_discrete_gibbs_multiple_
    sites_chain`), and the empty inner kernel's step size does not degenerate."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mcmc = MCMC(kernel(HMC(_discrete_only)), num_warmup=200, num_samples=4000,
                    num_chains=2, progress_bar=False)
        mcmc.run(jax.random.key(0))
    draws = mcmc.get_samples()
    np.testing.assert_allclose(draws["x"].mean(0), 0.7, atol=0.03)
    np.testing.assert_allclose(draws["y"].mean(), 3.0, atol=0.1)
    np.testing.assert_allclose(draws["y"].var(), 2.1, rtol=0.1)
    assert np.all(np.isfinite(mcmc.last_state.step_size))


def _partly_enumerated():
    effppl.sample("x", dist.Bernoulli(0.7), infer={"enumerate": "parallel"})
    y = effppl.sample("y", dist.Binomial(10, 0.3))
    effppl.deterministic("y2", y**2)


def test_an_enumerated_site_stays_summed_out():
    mcmc = MCMC(DiscreteHMCGibbs(NUTS(_partly_enumerated)), num_warmup=200, num_samples=4000,
                progress_bar=False)
    mcmc.run(jax.random.key(0))
    draws = mcmc.get_samples()
    assert sorted(draws) == ["y", "y2"]
    np.testing.assert_allclose(draws["y"].mean(), 3.0, atol=0.15)
    np.testing.assert_array_equal(draws["y2"], draws["y"] ** 2)


def test_the_user_sees_the_discrete_sites_not_their_carriers(capsys):
    mcmc = MCMC(DiscreteHMCGibbs(NUTS(_mixture)), num_warmup=100, num_samples=200,
                num_chains=2, progress_bar=False)
    mcmc.run(jax.random.key(0), PROBS, LOCS)
    assert sorted(mcmc.get_samples(group_by_chain=True)) == ["c", "x"]
    mcmc.print_summary()
    out = capsys.readouterr().out
    assert " c " in out and "gibbs_index" not in out
    posterior = mcmc.to_arviz().posterior
    assert sorted(posterior.data_vars) == ["c", "x"]
    # the draws drive `Predictive` of the user's own model: its label is the drawn one
    predicted = Predictive(_mixture, mcmc.get_samples(), return_sites=["c"])(
        jax.random.key(1), PROBS, LOCS)
    np.testing.assert_array_equal(predicted["c"], mcmc.get_samples()["c"])


def test_errors_name_what_is_wrong():
    with pytest.raises(KernelSettingsError, match="NUTS.*HMC"):
        DiscreteHMCGibbs(BarkerMH(_mixture))
    with pytest.raises(KernelSettingsError, match="random_walk"):
        DiscreteHMCGibbs(NUTS(_mixture), random_walk="yes")
    with pytest.raises(KernelSettingsError, match="mass_matrix"):
        DiscreteHMCGibbs(NUTS(_mixture, mass_matrix="fisher_diag"))
    with pytest.raises(KernelSettingsError, match="`HMC`.*DiscreteHMCGibbs"):
        MixedHMC(NUTS(_mixture))
    with pytest.raises(KernelSettingsError, match="num_discrete_updates"):
        MixedHMC(HMC(_mixture), num_discrete_updates=0)

    def continuous():
        effppl.sample("x", dist.Normal(0.0, 1.0))

    with pytest.raises(KernelSettingsError, match="no discrete latent site"):
        MCMC(DiscreteHMCGibbs(NUTS(continuous)), num_warmup=10, num_samples=10,
             progress_bar=False).run(jax.random.key(0))

    def an_event():
        effppl.sample("c", dist.Bernoulli(0.5 * jnp.ones(2)).to_event(1))

    with pytest.raises(SiteError, match="`c`.*event shape"):
        MCMC(DiscreteHMCGibbs(NUTS(an_event)), num_warmup=10, num_samples=10,
             progress_bar=False).run(jax.random.key(0))

    def counts():
        with effppl.plate("d", 3):
            effppl.sample("k", dist.Binomial(jnp.array([4, 4, 4]), 0.5))

    for kernel in (DiscreteHMCGibbs(NUTS(counts)), MixedHMC(HMC(counts))):
        with pytest.raises(SiteError, match=f"{type(kernel).__name__}.*`k`.*Python int"):
            MCMC(kernel, num_warmup=10, num_samples=10,
                 progress_bar=False).run(jax.random.key(0))

    def poisson():
        effppl.sample("n", dist.Poisson(3.0))
        effppl.sample("x", dist.Normal(0.0, 1.0))

    with pytest.raises(MCMCError, match="`n`"):
        MCMC(DiscreteHMCGibbs(NUTS(poisson)), num_warmup=10, num_samples=10,
             progress_bar=False).run(jax.random.key(0))
