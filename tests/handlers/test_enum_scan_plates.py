"""Enumerated sites in plates inside a plain `lax.scan` (a batch of independent HMMs): against a
hand-written forward algorithm per sequence and NumPyro's `contrib.control_flow.scan` enumerated
with funsor, value and gradient in float64; NUTS and `infer_discrete` on a small case."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as ndist
import pytest
from jax.scipy.special import logsumexp

import effppl
from effppl import distributions as dist
from effppl.handlers import condition, trace
from effppl.infer import MCMC, NUTS, config_enumerate, infer_discrete
from tests.handlers.test_enum_scan import assert_same_posterior_means

K, T, N, D = 3, 6, 4, 5
RNG = np.random.default_rng(11)
TONES = (RNG.uniform(size=(T, N, D)) < 0.4).astype(np.float64)  # (T, sequences, tones)
LOCS = np.array([0.0, 2.0, 4.0])


def tones(ys, numpyro_style=False):
    """NumPyro's `examples/hmm_enum.py` model_1 shape: sequences in a plate (dim -2), tones in a
    plate inside the body; written once, run by effppl (the sequences' plate around the plain
    scan) and by NumPyro (whose `scan` needs it inside the body)."""
    if numpyro_style:
        from numpyro.contrib.control_flow import scan

        plate, sample, d = numpyro.plate, numpyro.sample, ndist
    else:
        plate, sample, d, scan = effppl.plate, effppl.sample, dist, jax.lax.scan
    trans = sample("trans", d.Dirichlet(jnp.ones((K, K)) + 2 * jnp.eye(K)).to_event(1))
    probs = sample("probs", d.Beta(jnp.ones((K, D)), jnp.ones((K, D))).to_event(2))
    def sequences(inside):
        if inside == numpyro_style:
            return plate("sequences", ys.shape[1], dim=-2)
        return contextlib.nullcontext()

    def step(z_prev, y_t):
        with sequences(inside=True):
            z = sample("z", d.Categorical(trans[z_prev]))
            with plate("tones", D, dim=-1):
                sample("y", d.Bernoulli(probs[z.squeeze(-1)]), obs=y_t)
        return z, None

    with sequences(inside=False):
        scan(step, jnp.zeros((ys.shape[1], 1), int), ys)


def tones_oracle(params, ys):
    """The prior plus a forward algorithm per sequence, by hand."""
    trans, probs = params["trans"], params["probs"]
    prior = (ndist.Dirichlet(jnp.ones((K, K)) + 2 * jnp.eye(K)).log_prob(trans).sum()
             + ndist.Beta(1.0, 1.0).log_prob(probs).sum())
    emit = ndist.Bernoulli(probs).log_prob(ys[:, :, None, :]).sum(-1)  # (T, N, K)
    alpha = jnp.log(trans[0]) + emit[0]
    for t in range(1, ys.shape[0]):
        alpha = logsumexp(alpha[:, :, None] + jnp.log(trans), axis=1) + emit[t]
    return prior + logsumexp(alpha, axis=-1).sum()


PARAMS = {"trans": RNG.dirichlet(np.ones(K), size=K), "probs": RNG.uniform(0.1, 0.9, size=(K, D))}
SHIFTS = RNG.normal(size=T) * 0.3


@pytest.mark.slow
def test_batch_of_hmms_matches_hand_written_forward_and_numpyro_value_and_grad():
    from numpyro.contrib.funsor import config_enumerate as n_config
    from numpyro.contrib.funsor import enum as n_enum
    from numpyro.contrib.funsor import log_density as n_log_density

    ys = jnp.asarray(TONES)

    def ours(params):
        return effppl.log_density(config_enumerate(tones), (ys,), {}, params)[0]

    def theirs(params):
        return n_log_density(n_enum(n_config(tones), -3), (ys, True), {}, params)[0]

    params = {name: jnp.asarray(value) for name, value in PARAMS.items()}  # float64 (x64 now on)
    value, grad = jax.value_and_grad(ours)(params)
    for oracle in (lambda p: tones_oracle(p, ys), theirs):
        ref_value, ref_grad = jax.value_and_grad(oracle)(params)
        np.testing.assert_allclose(value, ref_value, rtol=1e-12)
        for name in params:
            np.testing.assert_allclose(grad[name], ref_grad[name], rtol=1e-9, atol=1e-12)


M = 2  # observations per sequence and step


def drifting(ys):
    """Sequences in a plate inside the body (dim -1), observations in a nested plate (dim -2),
    and a per-step latent `drift` outside the plate that every sequence reads."""
    trans = effppl.sample("trans", dist.Dirichlet(jnp.ones((K, K))))

    def step(z_prev, y_t):
        drift = effppl.sample("drift", dist.Normal(0.0, 0.5))
        with effppl.plate("sequences", ys.shape[2], dim=-1):
            z = effppl.sample("z", dist.Categorical(trans[z_prev]),
                              infer={"enumerate": "parallel"})
            with effppl.plate("obs", M, dim=-2):
                effppl.sample("y", dist.Normal(jnp.asarray(LOCS)[z] + drift, 1.0), obs=y_t)
        return z, None

    jax.lax.scan(step, jnp.zeros(ys.shape[2], int), ys)


def drifting_emissions(drift, ys):
    """`(T, N, K)`: each step's log likelihood of each sequence's observations per state."""
    locs = jnp.asarray(LOCS) + drift[:, None, None, None]  # (T, 1, 1, K)
    return dist.Normal(locs, 1.0).log_prob(ys[..., None]).sum(1)


def drifting_oracle(params, ys):
    trans, drift = params["trans"], params["drift"]
    emit = drifting_emissions(drift, ys)
    alpha = jnp.log(trans[0]) + emit[0]
    for t in range(1, ys.shape[0]):
        alpha = logsumexp(alpha[:, :, None] + jnp.log(trans), axis=1) + emit[t]
    return (dist.Dirichlet(jnp.ones((K, K))).log_prob(trans).sum()
            + dist.Normal(0.0, 0.5).log_prob(drift).sum() + logsumexp(alpha, axis=-1).sum())


def _drifting_data(num_steps, num_sequences, seed):
    rng = np.random.default_rng(seed)
    trans = np.array([rng.dirichlet(np.ones(K) + 4 * np.eye(K)[k]) for k in range(K)])
    z, ys = np.zeros(num_sequences, int), []
    for _ in range(num_steps):
        z = np.array([rng.choice(K, p=trans[s]) for s in z])
        ys.append(LOCS[z] + 0.3 + rng.normal(size=(M, num_sequences)))
    return np.asarray(ys)  # (T, M, N)


@pytest.mark.slow
def test_plate_inside_the_body_with_shared_latent_matches_hand_written_forward():
    ys = jnp.asarray(_drifting_data(T, N, 3))
    params = {"trans": jnp.asarray(PARAMS["trans"]), "drift": jnp.asarray(SHIFTS)}
    value, grad = jax.value_and_grad(
        lambda p: effppl.log_density(drifting, (ys,), {}, p)[0])(params)
    ref_value, ref_grad = jax.value_and_grad(lambda p: drifting_oracle(p, ys))(params)
    np.testing.assert_allclose(value, ref_value, rtol=1e-12)
    for name in params:
        np.testing.assert_allclose(grad[name], ref_grad[name], rtol=1e-9, atol=1e-12)


def test_viterbi_per_sequence_in_plate_inside_scan():
    ys = jnp.asarray(_drifting_data(T, N, 4))
    given = {"trans": jnp.asarray(PARAMS["trans"]), "drift": jnp.asarray(SHIFTS)}
    decoded = trace(infer_discrete(condition(drifting, given), temperature=0)).get_trace(ys)
    path = decoded["z"]["value"]
    assert path.shape == (T, N)
    emit = drifting_emissions(given["drift"], ys)
    log_trans = jnp.log(given["trans"])
    for n in range(N):  # hand-written Viterbi, sequence by sequence
        score, back = jnp.log(given["trans"][0]) + emit[0, n], []
        for t in range(1, T):
            cand = score[:, None] + log_trans
            back.append(jnp.argmax(cand, axis=0))
            score = jnp.max(cand, axis=0) + emit[t, n]
        best = [int(jnp.argmax(score))]
        for pointers in reversed(back):
            best.append(int(pointers[best[-1]]))
        np.testing.assert_array_equal(path[:, n], best[::-1])


def test_ffbs_draws_in_plate_inside_scan_have_the_exact_first_step_marginal():
    """Draws of z_0 per sequence follow the exact smoothing marginal p(z_0 | y) (forward
    filtering, backward sampling); 2000 draws, 4 standard errors."""
    ys = jnp.asarray(_drifting_data(3, 2, 5))
    given = {"trans": jnp.asarray(PARAMS["trans"]), "drift": jnp.zeros(3)}

    def draw(key):
        model = infer_discrete(condition(drifting, given), temperature=1, rng_key=key)
        return trace(model).get_trace(ys)["z"]["value"]

    draws = jax.jit(jax.vmap(draw))(jax.random.split(jax.random.PRNGKey(0), 2000))
    assert draws.shape == (2000, 3, 2)
    emit = drifting_emissions(given["drift"], ys)  # (3, 2, K)
    log_trans = jnp.log(given["trans"])
    for n in range(2):  # brute force over the K^3 paths
        paths = np.array(np.meshgrid(*[range(K)] * 3, indexing="ij")).reshape(3, -1).T
        lp = np.array([np.log(given["trans"][0, p[0]]) + log_trans[p[0], p[1]]
                       + log_trans[p[1], p[2]] + sum(emit[t, n, p[t]] for t in range(3))
                       for p in paths])
        weights = np.exp(lp - logsumexp(lp))
        exact = np.array([weights[paths[:, 0] == k].sum() for k in range(K)])
        freq = np.array([(draws[:, 0, n] == k).mean() for k in range(K)])
        np.testing.assert_array_less(np.abs(freq - exact),
                                     4 * np.sqrt(exact * (1 - exact) / 2000) + 1e-3)


def test_site_outside_the_chains_plate_that_reads_them_is_an_error_naming_it():
    def coupled(ys):
        def step(z_prev, y_t):
            with effppl.plate("sequences", N, dim=-1):
                z = effppl.sample("z", dist.Categorical(jnp.asarray(PARAMS["trans"])[z_prev]),
                                  infer={"enumerate": "parallel"})
            effppl.sample("total", dist.Normal(z.sum(), 1.0), obs=y_t)
            return z, None

        jax.lax.scan(step, jnp.zeros(N, int), ys)

    with pytest.raises(effppl.SiteError, match=r"`total`.*`z`.*plate `sequences`"):
        effppl.log_density(coupled, (jnp.ones(T),), {}, {})


def test_enumerated_site_with_undeclared_batch_dim_in_scan_is_an_error_naming_it():
    def undeclared(ys):
        def step(z_prev, y_t):
            z = effppl.sample("z", dist.Categorical(jnp.asarray(PARAMS["trans"])[z_prev]),
                              infer={"enumerate": "parallel"})
            effppl.sample("y", dist.Normal(z, 1.0), obs=y_t)
            return z, None

        jax.lax.scan(step, jnp.zeros(N, int), ys)

    with pytest.raises(effppl.SiteError, match=r"`z`.*dim -1 is declared by no `plate`"):
        effppl.log_density(undeclared, (jnp.ones((T, N)),), {}, {})


def _drifting_marginalised(ys):
    trans = effppl.sample("trans", dist.Dirichlet(jnp.ones((K, K))))
    with effppl.plate("steps", ys.shape[0]):
        drift = effppl.sample("drift", dist.Normal(0.0, 0.5))
    emit = drifting_emissions(drift, ys)

    def step(alpha, emit_t):
        return logsumexp(alpha[:, :, None] + jnp.log(trans), axis=1) + emit_t, None

    alpha, _ = jax.lax.scan(step, jnp.log(trans[0]) + emit[0], emit[1:])
    effppl.factor("forward", logsumexp(alpha, axis=-1).sum())


@pytest.mark.slow
def test_nuts_on_batch_of_hmms_agrees_with_hand_marginalised_model():
    ys = jnp.asarray(_drifting_data(12, 3, 6))
    draws = []
    for model in (drifting, _drifting_marginalised):
        mcmc = MCMC(NUTS(model), num_warmup=300, num_samples=500, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(1), ys)
        draws.append(mcmc.get_samples())
    assert set(draws[0]) == {"trans", "drift"}
    assert_same_posterior_means(draws[0], draws[1], ("trans", "drift"))


def test_enumerated_sites_of_one_scan_in_different_plates_is_an_error_naming_them():
    def mixed(ys):
        def step(carry, y_t):
            a_prev, b_prev = carry
            a = effppl.sample("a", dist.Categorical(jnp.asarray(PARAMS["trans"])[a_prev]),
                              infer={"enumerate": "parallel"})
            with effppl.plate("sequences", N, dim=-1):
                b = effppl.sample("b", dist.Categorical(jnp.asarray(PARAMS["trans"])[b_prev]),
                                  infer={"enumerate": "parallel"})
                effppl.sample("y", dist.Normal(a + b, 1.0), obs=y_t)
            return (a, b), None

        jax.lax.scan(step, (0, jnp.zeros(N, int)), ys)

    with pytest.raises(effppl.SiteError, match=r"`a` and `b`.*same plates"):
        effppl.log_density(mixed, (jnp.ones((T, N)),), {}, {})


def test_predictive_with_infer_discrete_draws_every_sequence_per_posterior_draw():
    from effppl.infer import Predictive

    ys = jnp.asarray(_drifting_data(T, N, 3))
    draws = {"trans": jnp.broadcast_to(jnp.asarray(PARAMS["trans"]), (4, K, K)),
             "drift": jnp.zeros((4, T))}
    z = Predictive(drifting, draws, infer_discrete=True, return_sites=["z"])(
        jax.random.PRNGKey(0), ys)["z"]
    assert z.shape == (4, T, N) and z.dtype.kind == "i"
    assert set(np.unique(z)) <= set(range(K)) and len(np.unique(np.asarray(z))) > 1
