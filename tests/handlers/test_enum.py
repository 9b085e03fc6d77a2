"""Parallel enumeration in plates: `enum`, `config_enumerate`, and log densities that sum the
enumerated sites out, against hand-written densities and NumPyro's funsor enumeration."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as ndist
import pytest
from jax.scipy.special import logsumexp

import effppl
from effppl import distributions as dist
from effppl.handlers import enum, potential_energy, seed, trace
from effppl.infer import MCMC, NUTS, config_enumerate
from tests.handlers.test_enum_scan import assert_same_posterior_means

Y = np.array([-2.1, -1.7, 0.2, 2.9, 3.4, 4.0])
W = np.array([0.2, 0.3, 0.5])
MU = np.array([-2.0, 0.5, 3.0])


def mixture(y):
    w = effppl.sample("w", dist.Dirichlet(jnp.ones(3)))
    mu = effppl.sample("mu", dist.Normal(jnp.zeros(3), 5.0).to_event(1))
    with effppl.plate("data", y.shape[0]):
        z = effppl.sample("z", dist.Categorical(w), infer={"enumerate": "parallel"})
        effppl.sample("y", dist.Normal(mu[z], 1.0), obs=y)


def mixture_density(w, mu, y):
    """The oracle: the mixture's log joint with z summed out by hand."""
    prior = dist.Dirichlet(jnp.ones(3)).log_prob(w) + jnp.sum(dist.Normal(0.0, 5.0).log_prob(mu))
    per_point = jnp.log(w) + dist.Normal(mu, 1.0).log_prob(y[:, None])
    return prior + jnp.sum(logsumexp(per_point, axis=-1))


def test_enum_gives_support_left_of_plates():
    tr = trace(enum(seed(mixture, 0))).get_trace(Y)
    assert tr["z"]["value"].shape == (3, 1)
    np.testing.assert_array_equal(tr["z"]["value"][:, 0], [0, 1, 2])
    assert tr["z"]["infer"]["_enumerate_dim"] == -2
    assert tr["y"]["log_prob"].shape == (3, Y.shape[0])
    tr = trace(enum(seed(mixture, 0), first_available_dim=-3)).get_trace(Y)
    assert tr["z"]["value"].shape == (3, 1, 1)


def test_log_density_of_mixture_matches_hand_marginalised():
    log_joint, _ = effppl.log_density(mixture, (Y,), {}, {"w": W, "mu": MU})
    np.testing.assert_allclose(log_joint, mixture_density(W, MU, Y), rtol=1e-12)


def test_potential_energy_of_mixture_value_and_grad_match_hand_marginalised():
    from numpyro.distributions.transforms import biject_to

    to_simplex = biject_to(dist.Dirichlet(jnp.ones(3)).support)
    u = {"w": to_simplex.inv(W), "mu": MU}

    def oracle(u):
        w = to_simplex(u["w"])
        return -(mixture_density(w, u["mu"], Y) + to_simplex.log_abs_det_jacobian(u["w"], w))

    ours = jax.value_and_grad(lambda p: potential_energy(mixture, (Y,), {}, p))(u)
    ref = jax.value_and_grad(oracle)(u)
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-12)
    for name in u:
        np.testing.assert_allclose(ours[1][name], ref[1][name], rtol=1e-10, atol=1e-12)


def test_scaled_plate_scales_every_factor_before_summing_out():
    def scaled(y):
        w = effppl.sample("w", dist.Dirichlet(jnp.ones(3)))
        mu = effppl.sample("mu", dist.Normal(jnp.zeros(3), 5.0).to_event(1))
        with effppl.plate("data", y.shape[0]), effppl.handlers.scale(scale=2.0):
            z = effppl.sample("z", dist.Categorical(w), infer={"enumerate": "parallel"})
            effppl.sample("y", dist.Normal(mu[z], 1.0), obs=y)

    ours, _ = effppl.log_density(scaled, (Y,), {}, {"w": W, "mu": MU})
    per_point = 2.0 * (jnp.log(W) + dist.Normal(MU, 1.0).log_prob(Y[:, None]))
    ref = (dist.Dirichlet(jnp.ones(3)).log_prob(W) + jnp.sum(dist.Normal(0.0, 5.0).log_prob(MU))
           + jnp.sum(logsumexp(per_point, axis=-1)))
    np.testing.assert_allclose(ours, ref, rtol=1e-12)


def test_config_enumerate_marks_discrete_sites_only():
    def model():
        effppl.sample("a", dist.Bernoulli(0.3))
        effppl.sample("b", dist.Normal(0.0, 1.0))
        effppl.sample("c", dist.Poisson(2.0))
        effppl.sample("d", dist.Bernoulli(0.3), obs=1)
        effppl.sample("e", dist.Categorical(jnp.ones(3) / 3), infer={"enumerate": None})

    tr = trace(seed(config_enumerate(model), 0)).get_trace()
    assert {n: s["infer"].get("enumerate") for n, s in tr.items()} == {
        "a": "parallel", "b": None, "c": None, "d": None, "e": None}


def test_enumerated_site_with_infinite_support_is_an_error_naming_it():
    def model():
        effppl.sample("count", dist.Poisson(2.0), infer={"enumerate": "parallel"})

    with pytest.raises(effppl.SiteError, match="`count`.*no finite support"):
        effppl.log_density(model, (), {}, {})


def test_enumerated_continuous_site_as_the_only_latent_is_the_same_error_in_mcmc():
    """MCMC used to say "no latent sample site" (the marked site is not HMC's), naming no
    cause; it names the site as `log_density` does. Predictive draws it, as NumPyro's does."""
    def model(y):
        x = effppl.sample("x", dist.Normal(0.0, 1.0), infer={"enumerate": "parallel"})
        effppl.sample("y", dist.Normal(x, 1.0), obs=y)

    mcmc = MCMC(NUTS(model), num_warmup=5, num_samples=5, progress_bar=False)
    with pytest.raises(effppl.SiteError, match="`x`.*Normal has no finite support"):
        mcmc.run(jax.random.PRNGKey(0), 1.0)
    draws = effppl.infer.Predictive(model, num_samples=3)(jax.random.PRNGKey(0), 1.0)["x"]
    def numpyro_model(y):
        x = numpyro.sample("x", dist.Normal(0.0, 1.0), infer={"enumerate": "parallel"})
        numpyro.sample("y", dist.Normal(x, 1.0), obs=y)

    theirs = numpyro.infer.Predictive(numpyro_model, num_samples=3)(jax.random.PRNGKey(0), 1.0)
    np.testing.assert_allclose(draws, theirs["x"], rtol=1e-12)


def test_enumerated_site_with_undeclared_batch_dim_is_an_error_naming_it():
    def model():
        effppl.sample("z", dist.Categorical(jnp.ones((4, 3)) / 3), infer={"enumerate": "parallel"})

    with pytest.raises(effppl.SiteError, match="`z`.*plate"):
        effppl.log_density(model, (), {}, {})


@pytest.mark.slow
def test_nuts_enumerates_an_unmarked_discrete_latent_as_numpyro_does():
    """NumPyro sums an unmarked discrete latent site out, with a `FutureWarning` naming it: the
    draws are those of the model wrapped in `config_enumerate`, and a second run compiles
    nothing new (one wrapper per model)."""
    def unmarked(y):
        mu = effppl.sample("mu", dist.Normal(jnp.zeros(2), 5.0).to_event(1))
        with effppl.plate("data", y.shape[0]):
            z = effppl.sample("label", dist.Bernoulli(0.5))
            effppl.sample("y", dist.Normal(mu[z], 1.0), obs=y)

    mcmc = MCMC(NUTS(unmarked), num_warmup=20, num_samples=20, progress_bar=False)
    with pytest.warns(FutureWarning, match="enumerate the discrete latent site.*'label'.*"
                                           "enumerated sites need to be marked"):
        mcmc.run(jax.random.PRNGKey(0), Y)
    marked = MCMC(NUTS(config_enumerate(unmarked)), num_warmup=20, num_samples=20,
                  progress_bar=False)
    marked.run(jax.random.PRNGKey(0), Y)
    assert set(mcmc.get_samples()) == {"mu"}
    np.testing.assert_array_equal(mcmc.get_samples()["mu"], marked.get_samples()["mu"])
    from effppl.infer.mcmc import _driver
    assert _driver._auto_enumerated(unmarked) is _driver._auto_enumerated(unmarked)


@pytest.mark.slow
def test_automatic_enumeration_keeps_models_that_compare_equal_apart():
    """The wrapper is kept per model object: two models equal by value (their data in a
    `compare=False` field) are not confused, and `clear_cache` drops the wrappers."""
    import dataclasses

    from effppl.infer import clear_cache
    from effppl.infer.mcmc import _driver

    @dataclasses.dataclass(frozen=True)
    class Mixture:
        k: int
        y: np.ndarray = dataclasses.field(compare=False)

        def __call__(self):
            mu = effppl.sample("mu", dist.Normal(jnp.zeros(self.k), 5.0).to_event(1))
            with effppl.plate("data", self.y.shape[0]):
                z = effppl.sample("label", dist.Bernoulli(0.5))
                effppl.sample("y", dist.Normal(mu[z], 1.0), obs=self.y)

    a, b = Mixture(2, Y), Mixture(2, Y + 10.0)
    assert a == b
    wa, wb = _driver._auto_enumerated(a), _driver._auto_enumerated(b)
    assert wa is not wb and wa._wraps_model[0] is a and wb._wraps_model[0] is b
    means = []
    for model in (a, b):
        mcmc = MCMC(NUTS(model), num_warmup=100, num_samples=100, progress_bar=False)
        with pytest.warns(FutureWarning):
            mcmc.run(jax.random.PRNGKey(0))
        means.append(float(np.mean(mcmc.get_samples()["mu"])))
    assert means[1] - means[0] > 5.0  # b's data, not a's
    clear_cache()
    assert _driver._auto_enumerated(a) is not wa


def _nested(data, numpyro_style=False):
    """Global class `c`, per-group class `g` (plate "groups"), observations in plates
    "groups" x "items": written once, run by effppl and by NumPyro."""
    if numpyro_style:
        plate, sample, d = numpyro.plate, numpyro.sample, ndist
    else:
        plate, sample, d = effppl.plate, effppl.sample, dist
    p = sample("p", d.Beta(2.0, 2.0))
    loc = sample("loc", d.Normal(jnp.zeros(2), 2.0).to_event(1))
    c = sample("c", d.Bernoulli(p))
    with plate("groups", data.shape[0], dim=-2):
        g = sample("g", d.Categorical(jnp.array([[0.6, 0.4], [0.3, 0.7]])[c]))
        with plate("items", data.shape[1], dim=-1):
            sample("x", d.Normal(loc[g] + 0.5 * c, 1.0), obs=data)


@pytest.mark.slow
def test_nested_plates_match_numpyro_funsor_enumeration():
    from numpyro.contrib.funsor import config_enumerate as n_config
    from numpyro.contrib.funsor import enum as n_enum
    from numpyro.contrib.funsor import log_density as n_log_density

    data = jnp.array(np.random.default_rng(0).normal(size=(4, 3)))
    params = {"p": jnp.array(0.3), "loc": jnp.array([-1.0, 1.5])}
    ours, _ = effppl.log_density(config_enumerate(_nested), (data,), {}, params)
    theirs, _ = n_log_density(n_enum(n_config(_nested), -3), (data, True), {}, params)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)

    # and the brute-force oracle: every assignment of c and g summed explicitly
    total = []
    for c in range(2):
        per_group = []
        for g in range(2):
            lp_g = jnp.log(jnp.array([[0.6, 0.4], [0.3, 0.7]])[c, g])
            lp_x = dist.Normal(params["loc"][g] + 0.5 * c, 1.0).log_prob(data).sum(-1)
            per_group.append(lp_g + lp_x)
        total.append(dist.Bernoulli(params["p"]).log_prob(c)
                     + logsumexp(jnp.stack(per_group), axis=0).sum())
    brute = (dist.Beta(2.0, 2.0).log_prob(params["p"])
             + dist.Normal(0.0, 2.0).log_prob(params["loc"]).sum() + logsumexp(jnp.stack(total)))
    np.testing.assert_allclose(ours, brute, rtol=1e-12)


def _marginal_mixture(y):
    w = effppl.sample("w", dist.Dirichlet(jnp.ones(2)))
    mu = effppl.sample("mu", dist.Normal(jnp.zeros(2), 5.0).to_event(1))
    with effppl.plate("data", y.shape[0]):
        effppl.sample("y", dist.MixtureSameFamily(dist.Categorical(w), dist.Normal(mu, 1.0)),
                      obs=y)


@pytest.mark.slow
def test_nuts_on_enumerated_mixture_agrees_with_hand_marginalised_model():
    def two(y):
        w = effppl.sample("w", dist.Dirichlet(jnp.ones(2)))
        mu = effppl.sample("mu", dist.Normal(jnp.zeros(2), 5.0).to_event(1))
        with effppl.plate("data", y.shape[0]):
            z = effppl.sample("z", dist.Categorical(w))
            effppl.sample("y", dist.Normal(mu[z], 1.0), obs=y)

    y = jnp.concatenate([jnp.linspace(-3.0, -1.0, 10), jnp.linspace(2.0, 4.0, 10)])
    # an ordered start (both runs) so that neither chain switches labels
    init = {"w": jnp.array([0.5, 0.5]), "mu": jnp.array([-2.0, 3.0])}
    draws = []
    for model in (config_enumerate(two), _marginal_mixture):
        mcmc = MCMC(NUTS(model, init_strategy=effppl.infer.init_to_value(values=init)),
                    num_warmup=300, num_samples=600, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(1), y)
        draws.append(mcmc.get_samples())
    assert set(draws[0]) == {"w", "mu"}
    assert_same_posterior_means(draws[0], draws[1], ("w", "mu"))
    np.testing.assert_allclose(draws[0]["mu"].mean(0), [-2.0, 3.0], atol=0.3)
