"""Enumerated sites inside a plain `lax.scan`: the forward algorithm derived from the model,
against a hand-written forward algorithm and brute-force enumeration of every path."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp

import effppl
from effppl import distributions as dist
from effppl.infer import MCMC, NUTS, config_enumerate

K = 3
Y = np.array([0.1, 2.2, 3.9, 4.1, 0.3, 1.8])
TRANS = np.random.default_rng(0).dirichlet(np.ones(K), size=K)
LOCS = np.array([0.0, 2.0, 4.0])


def hmm(y):
    trans = effppl.sample("trans", dist.Dirichlet(jnp.ones((K, K))))
    locs = effppl.sample("locs", dist.Normal(jnp.arange(K) * 2.0, 1.0).to_event(1))

    def step(z_prev, y_t):
        z = effppl.sample("z", dist.Categorical(trans[z_prev]), infer={"enumerate": "parallel"})
        effppl.sample("y", dist.Normal(locs[z], 1.0), obs=y_t)
        return z, None

    jax.lax.scan(step, 0, y)


def prior(trans, locs):
    return (dist.Dirichlet(jnp.ones((K, K))).log_prob(trans).sum()
            + dist.Normal(jnp.arange(K) * 2.0, 1.0).log_prob(locs).sum())


def forward(trans, locs, y):
    """The oracle: the forward algorithm written by hand (z_0 follows row 0 of `trans`)."""
    alpha = jnp.log(trans[0]) + dist.Normal(locs, 1.0).log_prob(y[0])
    for t in range(1, len(y)):
        alpha = (logsumexp(alpha[:, None] + jnp.log(trans), axis=0)
                 + dist.Normal(locs, 1.0).log_prob(y[t]))
    return logsumexp(alpha)


@pytest.mark.slow
def test_hmm_in_plain_scan_matches_hand_written_forward_value_and_grad():
    def ours(params):
        return effppl.log_density(hmm, (Y,), {}, params)[0]

    def oracle(params):
        return prior(params["trans"], params["locs"]) + forward(params["trans"], params["locs"], Y)

    params = {"trans": jnp.asarray(TRANS), "locs": jnp.asarray(LOCS)}
    value, grad = jax.value_and_grad(ours)(params)
    ref_value, ref_grad = jax.value_and_grad(oracle)(params)
    np.testing.assert_allclose(value, ref_value, rtol=1e-12)
    for name in params:
        np.testing.assert_allclose(grad[name], ref_grad[name], rtol=1e-10)


def test_scan_with_other_carry_and_latent_site_matches_brute_force():
    """The carry also holds a counter; a continuous latent `s` sits in the body; every one of
    the K^T paths summed explicitly."""
    y = Y[:4]

    def model(y):
        trans = effppl.sample("trans", dist.Dirichlet(jnp.ones((K, K))))

        def step(carry, y_t):
            z_prev, t = carry
            z = effppl.sample("z", dist.Categorical(trans[z_prev]))
            s = effppl.sample("s", dist.HalfNormal(1.0))
            effppl.sample("y", dist.Normal(jnp.asarray(LOCS)[z] + 0.1 * t, s), obs=y_t)
            return (z, t + 1), z

        jax.lax.scan(step, (0, 0.0), y)

    s = np.array([0.7, 1.3, 0.9, 2.0])
    ours, tr = effppl.log_density(config_enumerate(model), (y,), {}, {"trans": TRANS, "s": s})
    assert tr["z"]["value"].shape == (4,)
    paths = []
    for path in itertools.product(range(K), repeat=len(y)):
        lp, prev = 0.0, 0
        for t, z in enumerate(path):
            lp += np.log(TRANS[prev, z]) + dist.Normal(LOCS[z] + 0.1 * t, s[t]).log_prob(y[t])
            prev = z
        paths.append(lp)
    brute = (dist.Dirichlet(jnp.ones((K, K))).log_prob(TRANS).sum()
             + dist.HalfNormal(1.0).log_prob(s).sum() + logsumexp(jnp.array(paths)))
    np.testing.assert_allclose(ours, brute, rtol=1e-12)


@pytest.mark.slow
def test_two_chains_in_one_scan_match_brute_force():
    a_trans = np.array([[0.9, 0.1], [0.2, 0.8]])
    b_trans = TRANS
    y = Y[:3]

    def factorial(y):
        def step(carry, y_t):
            a_prev, b_prev = carry
            a = effppl.sample("a", dist.Categorical(jnp.asarray(a_trans)[a_prev]))
            b = effppl.sample("b", dist.Categorical(jnp.asarray(b_trans)[b_prev]))
            effppl.sample("y", dist.Normal(jnp.asarray(LOCS)[b] - a, 1.0), obs=y_t)
            return (a, b), None

        jax.lax.scan(step, (0, 0), y)

    ours, _ = effppl.log_density(config_enumerate(factorial), (y,), {}, {})
    paths = []
    for a_path in itertools.product(range(2), repeat=len(y)):
        for b_path in itertools.product(range(K), repeat=len(y)):
            lp, a_prev, b_prev = 0.0, 0, 0
            for t, (a, b) in enumerate(zip(a_path, b_path)):
                lp += (np.log(a_trans[a_prev, a]) + np.log(b_trans[b_prev, b])
                       + dist.Normal(LOCS[b] - a, 1.0).log_prob(y[t]))
                a_prev, b_prev = a, b
            paths.append(lp)
    np.testing.assert_allclose(ours, logsumexp(jnp.array(paths)), rtol=1e-12)


def test_observations_in_nested_plates_inside_the_body():
    """Each step emits a 2 x 3 grid of observations in two plates, one of them scaled."""
    grid = np.random.default_rng(5).normal(size=(len(Y), 2, 3)) + Y[:, None, None]

    def model(grid):
        def step(z_prev, g_t):
            z = effppl.sample("z", dist.Categorical(jnp.asarray(TRANS)[z_prev]))
            with effppl.plate("rows", 2, dim=-2), effppl.plate("cols", 3, dim=-1):
                with effppl.handlers.scale(scale=0.5):
                    effppl.sample("g", dist.Normal(jnp.asarray(LOCS)[z], 1.0), obs=g_t)
            return z, None

        jax.lax.scan(step, 0, grid)

    ours, _ = effppl.log_density(config_enumerate(model), (grid,), {}, {})
    emit = 0.5 * dist.Normal(LOCS, 1.0).log_prob(grid[..., None]).sum((1, 2))  # (T, K)
    alpha = np.log(TRANS[0]) + emit[0]
    for t in range(1, len(Y)):
        alpha = logsumexp(alpha[:, None] + np.log(TRANS), axis=0) + emit[t]
    np.testing.assert_allclose(ours, logsumexp(alpha), rtol=1e-12)


def test_enumerated_site_not_in_the_carry_is_a_mixture_per_step():
    """The carry (a running sum of the data) does not depend on the site: each step is an
    independent mixture, summed out per step; stacked outputs of the data stay usable."""
    w = np.array([0.3, 0.7])

    def model(y):
        def step(total, y_t):
            z = effppl.sample("z", dist.Categorical(jnp.asarray(w)))
            effppl.sample("y", dist.Normal(jnp.asarray(LOCS)[z] + 0.01 * total, 1.0), obs=y_t)
            return total + y_t, 2 * y_t

        total, doubled = jax.lax.scan(step, 0.0, y)
        effppl.sample("after", dist.Normal(total + doubled[0], 1.0), obs=0.0)

    ours, _ = effppl.log_density(config_enumerate(model), (Y,), {}, {})
    shifts = 0.01 * np.concatenate([[0.0], np.cumsum(Y)[:-1]])
    per_step = logsumexp(np.log(w) + dist.Normal(LOCS[:2] + shifts[:, None], 1.0).log_prob(
        Y[:, None]), axis=-1)
    ref = per_step.sum() + dist.Normal(Y.sum() + 2 * Y[0], 1.0).log_prob(0.0)
    np.testing.assert_allclose(ours, ref, rtol=1e-12)


def test_enumerated_site_outside_a_scan_that_reads_it():
    """A global class read by every step of a scan (no carry depends on it): the scan's
    sites broadcast over its values and are summed out with it."""
    w = np.array([0.3, 0.7])

    def model(y):
        c = effppl.sample("c", dist.Categorical(jnp.asarray(w)))

        def step(total, y_t):
            effppl.sample("y", dist.Normal(jnp.asarray(LOCS)[c], 1.0), obs=y_t)
            return total + y_t, None

        jax.lax.scan(step, 0.0, y)

    ours, _ = effppl.log_density(config_enumerate(model), (Y,), {}, {})
    ref = logsumexp(np.log(w) + dist.Normal(LOCS[:2], 1.0).log_prob(Y[:, None]).sum(0))
    np.testing.assert_allclose(ours, ref, rtol=1e-12)


def test_carry_with_unbounded_history_is_an_error_naming_the_site():
    def running_sum(y):  # the carry sums every step's enumerated value: no finite order
        def step(total, y_t):
            z = effppl.sample("z", dist.Categorical(jnp.asarray(TRANS)[total % K]))
            effppl.sample("y", dist.Normal(jnp.asarray(LOCS)[z], 1.0), obs=y_t)
            return total + z, None

        jax.lax.scan(step, 0, y)

    with pytest.raises(effppl.SiteError, match="`z`.*carry element 0.*unbounded"):
        effppl.log_density(config_enumerate(running_sum), (Y,), {}, {})


def test_enumerated_value_used_after_the_scan_is_an_error():
    def leaky(y):
        def step(z_prev, y_t):
            z = effppl.sample("z", dist.Categorical(jnp.asarray(TRANS)[z_prev]))
            effppl.sample("y", dist.Normal(jnp.asarray(LOCS)[z], 1.0), obs=y_t)
            return z, None

        z_last, _ = jax.lax.scan(step, 0, y)
        effppl.sample("after", dist.Normal(jnp.asarray(LOCS)[z_last], 1.0), obs=0.0)

    with pytest.raises(effppl.SiteError, match="`z`.*used after the scan"):
        effppl.log_density(config_enumerate(leaky), (Y,), {}, {})


@pytest.mark.slow
def test_semi_supervised_hmm_with_discrete_latents_equals_its_forward_form():
    from models import hmm as bench

    args, _ = bench.make_data(size=30)
    transition_prior, emission_prior, sup_cat, sup_words, unsup_words = args
    num_categories = transition_prior.shape[0]

    def discrete(transition_prior, emission_prior, supervised_categories, supervised_words,
                 unsupervised_words):
        k, w = transition_prior.shape[0], emission_prior.shape[0]
        transition_prob = effppl.sample("transition_prob", dist.Dirichlet(
            jnp.broadcast_to(transition_prior, (k, k))))
        emission_prob = effppl.sample("emission_prob", dist.Dirichlet(
            jnp.broadcast_to(emission_prior, (k, w))))
        effppl.sample("supervised_categories",
                      dist.Categorical(transition_prob[supervised_categories[:-1]]),
                      obs=supervised_categories[1:])
        effppl.sample("supervised_words", dist.Categorical(emission_prob[supervised_categories]),
                      obs=supervised_words)

        def step(probs, word):  # the carry: the distribution of the next category
            category = effppl.sample("category", dist.Categorical(probs))
            effppl.sample("word", dist.Categorical(emission_prob[category]), obs=word)
            return transition_prob[category], None

        jax.lax.scan(step, jnp.ones(k) / k, unsupervised_words)

    rng = np.random.default_rng(1)
    params = {"transition_prob": rng.dirichlet(transition_prior, num_categories),
              "emission_prob": rng.dirichlet(emission_prior + 1.0, num_categories)}
    ours, _ = effppl.log_density(config_enumerate(discrete), args, {}, params)
    theirs, _ = effppl.log_density(bench.effppl_model, args, {}, params)
    # the forward form starts from the emission alone; the discrete one draws the first category
    # uniformly, which adds log(1/K)
    np.testing.assert_allclose(ours, theirs - np.log(num_categories), rtol=1e-12)


def _hand_marginalised_hmm(y):
    trans = effppl.sample("trans", dist.Dirichlet(jnp.ones((K, K))))
    locs = effppl.sample("locs", dist.Normal(jnp.arange(K) * 2.0, 1.0).to_event(1))

    def step(alpha, y_t):
        alpha = logsumexp(alpha[:, None] + jnp.log(trans), axis=0)
        return alpha + dist.Normal(locs, 1.0).log_prob(y_t), None

    alpha0 = jnp.log(trans[0]) + dist.Normal(locs, 1.0).log_prob(y[0])
    alpha, _ = jax.lax.scan(step, alpha0, y[1:])
    effppl.factor("forward", logsumexp(alpha))


def test_potential_energy_equals_hand_marginalised_model_at_random_points():
    from effppl.handlers import potential_energy

    rng = np.random.default_rng(4)
    for _ in range(2):
        u = {"trans": jnp.asarray(rng.normal(size=(K, K - 1))),
             "locs": jnp.asarray(rng.normal(size=K))}
        ours = jax.value_and_grad(lambda p: potential_energy(hmm, (Y,), {}, p))(u)
        ref = jax.value_and_grad(lambda p: potential_energy(_hand_marginalised_hmm, (Y,), {}, p))(u)
        np.testing.assert_allclose(ours[0], ref[0], rtol=1e-12)
        for name in u:
            np.testing.assert_allclose(ours[1][name], ref[1][name], rtol=1e-9, atol=1e-12)


def assert_same_posterior_means(a, b, names):
    """Posterior means agree within 4 Monte Carlo standard errors (ESS from NumPyro)."""
    from numpyro.diagnostics import effective_sample_size

    for name in names:
        mcse2 = 0.0
        for draws in (a[name], b[name]):
            ess = effective_sample_size(np.asarray(draws)[None])
            mcse2 = mcse2 + np.var(draws, axis=0) / ess
        np.testing.assert_array_less(np.abs(a[name].mean(0) - b[name].mean(0)),
                                     4 * np.sqrt(mcse2) + 1e-3)


@pytest.mark.slow
def test_nuts_on_hmm_in_plain_scan_agrees_with_hand_marginalised_model():
    rng = np.random.default_rng(2)
    states, z = [], 0
    for _ in range(60):
        z = rng.choice(K, p=TRANS[z])
        states.append(z)
    y = LOCS[np.array(states)] + rng.normal(size=60) * 0.5
    init = {"trans": jnp.full((K, K), 1.0 / K), "locs": jnp.asarray(LOCS)}
    draws = []
    for model in (hmm, _hand_marginalised_hmm):
        mcmc = MCMC(NUTS(model, init_strategy=effppl.infer.init_to_value(values=init)),
                    num_warmup=300, num_samples=500, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(3), y)
        draws.append(mcmc.get_samples())
    assert set(draws[0]) == {"trans", "locs"}
    assert_same_posterior_means(draws[0], draws[1], ("trans", "locs"))


def test_site_in_a_cond_inside_the_enumerated_body_is_an_error_naming_it():
    def branching(y):
        def step(z_prev, y_t):
            z = effppl.sample("z", dist.Categorical(jnp.asarray(TRANS)[z_prev]),
                              infer={"enumerate": "parallel"})
            jax.lax.cond(y_t > 1.0,
                         lambda: effppl.sample("big", dist.Normal(jnp.asarray(LOCS)[z], 1.0),
                                               obs=y_t),
                         lambda: effppl.sample("small", dist.Normal(0.0, 1.0), obs=y_t))
            return z, None

        jax.lax.scan(step, 0, y)

    with pytest.raises(effppl.SiteError, match=r"`z`.*site `(big|small)` inside a nested `cond`"):
        effppl.log_density(branching, (Y,), {}, {})


def test_handler_applied_to_a_function_inside_the_model_is_an_error_naming_its_use():
    """`handlers.scale(fn, 2)(y)` called inside the model hides the scan from the forward
    algorithm; the error names the site and the call, and the form it suggests, the handler
    around the whole model, gives the scaled marginal: twice the forward algorithm."""
    values = {"trans": jnp.asarray(TRANS), "locs": jnp.asarray(LOCS)}

    def called(y):
        effppl.handlers.scale(hmm, 2.0)(y)

    with pytest.raises(effppl.SiteError, match=r"site `z`.*handler it applies to a function.*"
                                               r"test_enum_scan.py:\d+.*whole model"):
        effppl.log_density(called, (Y,), {}, values)
    np.testing.assert_allclose(
        effppl.log_density(effppl.handlers.scale(hmm, 2.0), (Y,), {}, values)[0],
        2 * (prior(TRANS, LOCS) + forward(TRANS, LOCS, Y)), rtol=1e-10)
