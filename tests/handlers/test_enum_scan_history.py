"""Enumerated sites in a `lax.scan` whose carry holds the enumerated values of the last k
steps (NumPyro's `scan(..., history=k)`): a k-th order forward algorithm, against brute-force
enumeration of every path and NumPyro's `scan(..., history=2)` (hmm_enum's model_6)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.contrib.funsor as numpyro_funsor
import pytest
from jax.scipy.special import logsumexp
from numpyro.contrib.control_flow import scan as numpyro_scan
from numpyro.ops.indexing import Vindex

import effppl
from effppl import distributions as dist
from effppl.contrib.control_flow import scan as effppl_scan
from effppl.infer import config_enumerate

K = 3
RNG = np.random.RandomState(0)
TRANS3 = RNG.dirichlet(np.ones(K), (K, K, K))  # p(z_t | z_{t-3}, z_{t-2}, z_{t-1})
LOCS = np.array([-1.0, 0.5, 2.0])
Y = RNG.randn(6)


def order_k(k):
    """A chain of order k (k <= 3) whose carry is the tuple of the last k values."""
    def model(y, trans, locs):
        def step(carry, y_t):
            index = (0,) * (3 - k) + tuple(carry)  # oldest first
            z = effppl.sample("z", dist.Categorical(Vindex(trans)[index]))
            effppl.sample("y", dist.Normal(locs[z], 1.0), obs=y_t)
            return (*carry[1:], z), None

        jax.lax.scan(step, (0,) * k, y)
    return config_enumerate(model)


def brute_force(k, y, trans, locs):
    """log sum over every path of p(path, y), step by step in float64."""
    totals = []
    for path in itertools.product(range(K), repeat=len(y)):
        last, total = (0,) * k, 0.0
        for z, y_t in zip(path, y):
            total += np.log(trans[(0,) * (3 - k) + last][z]) + dist.Normal(
                locs[z], 1.0).log_prob(y_t)
            last = (*last[1:], z)
        totals.append(total)
    return logsumexp(np.array(totals))


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2, 3])
def test_chain_of_order_k_in_scan_is_the_sum_over_every_path(k):
    args = (Y, jnp.asarray(TRANS3), jnp.asarray(LOCS))
    value, grad = jax.jit(jax.value_and_grad(
        lambda trans: effppl.log_density(order_k(k), (Y, trans, args[2]), {}, {})[0]))(args[1])
    np.testing.assert_allclose(value, brute_force(k, Y, TRANS3, LOCS), rtol=1e-12)
    eps, direction = 1e-6, RNG.randn(*TRANS3.shape)
    with effppl.validation_enabled(False):  # the shifted rows leave the simplex on purpose
        shifted = effppl.log_density(order_k(k), (Y, args[1] + eps * direction, args[2]), {},
                                     {})[0]
    np.testing.assert_allclose(jnp.sum(grad * direction), (shifted - value) / eps, rtol=1e-4)


def model_6(ppl, scan, mask):
    """NumPyro's `examples/hmm_enum.py` model_6 (a second-order HMM over sequences and tones)."""
    def model(sequences, lengths, hidden_dim=K):
        num_sequences, _, data_dim = sequences.shape
        probs_x = ppl.sample("probs_x", dist.Dirichlet(0.9 * jnp.eye(hidden_dim) + 0.1)
                             .expand([hidden_dim, hidden_dim]).to_event(2))
        probs_y = ppl.sample("probs_y", dist.Beta(0.1, 0.9).expand([hidden_dim, data_dim])
                             .to_event(2))

        def transition_fn(carry, y):
            x_prev, x_curr, t = carry
            with ppl.plate("sequences", num_sequences, dim=-2):
                with mask(mask=(t < lengths)[..., None]):
                    probs_x_t = Vindex(probs_x)[x_prev, x_curr]
                    x_prev, x_curr = x_curr, ppl.sample(
                        "x", dist.Categorical(probs_x_t), infer={"enumerate": "parallel"})
                    with ppl.plate("tones", data_dim, dim=-1):
                        ppl.sample("y", dist.Bernoulli(probs_y[x_curr.squeeze(-1)]), obs=y)
            return (x_prev, x_curr, t + 1), None

        x_init = jnp.zeros((num_sequences, 1), dtype=int)
        scan(transition_fn, (x_init, x_init, 0), jnp.swapaxes(sequences, 0, 1), history=2)
    return model


@pytest.mark.slow
def test_hmm_enum_model_6_potential_is_numpyros():
    from numpyro.infer.util import potential_energy as numpyro_potential_energy

    rng = np.random.RandomState(1)
    sequences = (rng.rand(2, 7, 4) > 0.6).astype(np.float64)
    args = (sequences, np.array([7, 5]))
    u = {"probs_x": rng.randn(K, K, K - 1), "probs_y": rng.randn(K, 4)}
    ours = jax.jit(jax.value_and_grad(lambda u: effppl.handlers.potential_energy(
        model_6(effppl, effppl_scan, effppl.handlers.mask), args, {}, u)))(u)
    enumerated = numpyro_funsor.enum(
        model_6(numpyro, numpyro_scan, numpyro.handlers.mask), first_available_dim=-3)
    theirs = jax.jit(jax.value_and_grad(
        lambda u: numpyro_potential_energy(enumerated, args, {}, u, enum=True)))(u)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-10)
    for name in u:
        np.testing.assert_allclose(ours[1][name], theirs[1][name], rtol=1e-8, atol=1e-10)


def _path_log_probs(k, y, trans, locs):
    """`{path: log p(path, y)}` for every path of the chain of order k."""
    out = {}
    for path in itertools.product(range(K), repeat=len(y)):
        last, total = (0,) * k, 0.0
        for z, y_t in zip(path, y):
            total += np.log(trans[(0,) * (3 - k) + last][z]) + float(
                dist.Normal(locs[z], 1.0).log_prob(y_t))
            last = (*last[1:], z)
        out[path] = total
    return out


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 3])
def test_infer_discrete_of_order_k_scan_is_the_most_likely_path_and_draws_the_posterior(k):
    """Viterbi over the joint states of the last k steps gives the brute-force argmax path;
    FFBS draws follow the exact posterior of (z_0, z_last)."""
    y = Y[:5]
    args = (y, jnp.asarray(TRANS3), jnp.asarray(LOCS))
    paths = _path_log_probs(k, y, TRANS3, LOCS)
    best = max(paths, key=paths.get)
    viterbi = effppl.handlers.trace(effppl.handlers.infer_discrete(
        order_k(k), temperature=0)).get_trace(*args)["z"]["value"]
    np.testing.assert_array_equal(viterbi, best)

    posterior = np.zeros((K, K))
    total = logsumexp(np.array(list(paths.values())))
    for path, lp in paths.items():
        posterior[path[0], path[-1]] += np.exp(lp - total)
    draw = jax.jit(jax.vmap(lambda key: effppl.handlers.trace(effppl.handlers.infer_discrete(
        order_k(k), temperature=1, rng_key=key)).get_trace(*args)["z"]["value"]))
    draws = np.asarray(draw(jax.random.split(jax.random.PRNGKey(k), 4000)))
    counts = np.zeros((K, K))
    np.add.at(counts, (draws[:, 0], draws[:, -1]), 1)
    np.testing.assert_allclose(counts / len(draws), posterior, atol=0.03)


@pytest.mark.parametrize("history", [-1, 1.5, True])
def test_scan_with_bad_history_raises(history):
    with pytest.raises(effppl.SiteError, match="history"):
        effppl_scan(lambda c, x: (c, x), 0, jnp.zeros(3), history=history)
