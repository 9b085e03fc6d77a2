"""`infer_discrete`: Viterbi and forward-filtering backward-sampling inside a plain `lax.scan`,
max-product and exact draws in plates, and `Predictive(..., infer_discrete=True)`, against
hand-written Viterbi, brute-force posteriors and chi-square tests."""

import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp
from scipy import stats

import effppl
from effppl import distributions as dist
from effppl.handlers import condition, trace
from effppl.infer import InferDiscreteError, Predictive, infer_discrete
from tests.handlers.test_enum import MU, W, mixture
from tests.handlers.test_enum_scan import LOCS, TRANS, K, hmm

PARAMS = {"trans": TRANS, "locs": LOCS}
Y = np.array([0.1, 2.2, 1.1, 3.9, 0.3])


def viterbi(trans, locs, y):
    """The oracle: Viterbi written by hand in numpy (z_0 follows row 0 of `trans`)."""
    emit = np.array([[stats.norm(m, 1.0).logpdf(v) for m in locs] for v in y])
    delta, back = np.log(trans[0]) + emit[0], []
    for t in range(1, len(y)):
        scores = delta[:, None] + np.log(trans)
        back.append(scores.argmax(0))
        delta = scores.max(0) + emit[t]
    path = [int(delta.argmax())]
    for pointers in reversed(back):
        path.append(int(pointers[path[-1]]))
    return path[::-1]


def path_posterior(trans, locs, y):
    """The oracle: p(path | y) of every one of the K^T paths, by brute force."""
    paths = list(itertools.product(range(K), repeat=len(y)))
    lps = []
    for path in paths:
        lp, prev = 0.0, 0
        for t, z in enumerate(path):
            lp += np.log(trans[prev, z]) + stats.norm(locs[z], 1.0).logpdf(y[t])
            prev = z
        lps.append(lp)
    lps = np.array(lps)
    return paths, np.exp(lps - logsumexp(lps))


@pytest.mark.slow
def test_viterbi_in_plain_scan_matches_hand_written_viterbi():
    for y in (Y, np.array([4.0, 0.0, 2.0, 2.1, 3.9, 0.2, 0.1])):
        tr = trace(infer_discrete(condition(hmm, PARAMS), temperature=0)).get_trace(y)
        assert tr["z"]["value"].shape == (len(y),)
        np.testing.assert_array_equal(tr["z"]["value"], viterbi(TRANS, LOCS, y))


def test_viterbi_in_reversed_scan_matches_hand_written_viterbi():
    def backwards(y):
        def step(z_prev, y_t):
            z = effppl.sample("z", dist.Categorical(jnp.asarray(TRANS)[z_prev]))
            effppl.sample("y", dist.Normal(jnp.asarray(LOCS)[z], 1.0), obs=y_t)
            return z, None

        jax.lax.scan(step, 0, y, reverse=True)

    model = effppl.infer.config_enumerate(backwards)
    tr = trace(infer_discrete(model, temperature=0)).get_trace(Y)
    # the chain runs from the last row to the first
    np.testing.assert_array_equal(tr["z"]["value"][::-1], viterbi(TRANS, LOCS, Y[::-1]))


def test_ffbs_draws_follow_the_exact_path_posterior():
    """Chi-square test of 4,000 joint paths against the brute-force posterior of all K^T."""
    y = Y[:4]

    def draw(key):
        model = infer_discrete(condition(hmm, PARAMS), temperature=1, rng_key=key)
        return trace(model).get_trace(y)["z"]["value"]

    num_draws = 4000
    paths = jax.jit(jax.vmap(draw))(jax.random.split(jax.random.PRNGKey(0), num_draws))
    index = {p: i for i, p in enumerate(itertools.product(range(K), repeat=len(y)))}
    counts = np.bincount([index[tuple(int(v) for v in p)] for p in np.asarray(paths)],
                         minlength=len(index))
    _, probs = path_posterior(TRANS, LOCS, y)
    keep = probs * num_draws >= 5  # chi-square cells with enough expected draws
    expected = np.append(probs[keep], probs[~keep].sum()) * num_draws
    observed = np.append(counts[keep], counts[~keep].sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    assert counts[~keep].sum() <= 4 * max(expected[-1], 1.0) + 10


def test_map_in_plate_is_the_argmax_of_each_point():
    tr = trace(infer_discrete(condition(mixture, {"w": W, "mu": MU}), temperature=0)).get_trace(
        np.array([-2.1, -1.7, 0.2, 2.9, 3.4, 4.0]))
    y = np.array([-2.1, -1.7, 0.2, 2.9, 3.4, 4.0])
    expected = np.argmax(np.log(W) + stats.norm(MU, 1.0).logpdf(y[:, None]), axis=-1)
    np.testing.assert_array_equal(tr["z"]["value"], expected)


def test_draws_in_plate_follow_exact_per_point_posterior():
    y = np.array([-1.0, 0.9, 1.6])

    def draw(key):
        model = infer_discrete(condition(mixture, {"w": W, "mu": MU}), rng_key=key)
        return trace(model).get_trace(y)["z"]["value"]

    num_draws = 3000
    z = np.asarray(jax.jit(jax.vmap(draw))(jax.random.split(jax.random.PRNGKey(1), num_draws)))
    assert z.shape == (num_draws, 3)
    lp = np.log(W) + stats.norm(MU, 1.0).logpdf(y[:, None])
    probs = np.exp(lp - logsumexp(lp, axis=-1, keepdims=True))
    for n in range(3):
        counts = np.bincount(z[:, n], minlength=3)
        assert stats.chisquare(counts, probs[n] * num_draws).pvalue > 1e-3


def test_predictive_with_infer_discrete_draws_states_given_each_posterior_draw():
    draws = {"trans": np.stack([TRANS, TRANS]), "locs": np.stack([LOCS, LOCS + 100.0])}
    y = np.array([0.0, 2.0, 4.0, 4.0])
    out = Predictive(hmm, draws, infer_discrete=True, return_sites=["z"])(
        jax.random.PRNGKey(0), y)
    assert out["z"].shape == (2, 4)
    # states near their locations under the first draw; all at the last state under the second
    np.testing.assert_array_equal(out["z"][0], [0, 1, 2, 2])
    np.testing.assert_array_equal(out["z"][1], [0, 0, 0, 0])


def test_infer_discrete_needs_a_key_to_draw_and_a_known_temperature():
    with pytest.raises(InferDiscreteError, match="rng_key"):
        infer_discrete(hmm, temperature=1)
    with pytest.raises(InferDiscreteError, match="temperature"):
        infer_discrete(hmm, temperature=0.5)


def test_nan_data_warn_that_the_decoded_path_is_arbitrary():
    """NaN is out of every support: no path has positive probability, so Viterbi's answer
    (here all zeros) means nothing; clean data decode without a warning, as Viterbi by hand."""
    def decode(y):
        decoded = trace(infer_discrete(condition(hmm, PARAMS), temperature=0)).get_trace(y)
        return list(np.asarray(decoded["z"]["value"]))

    y = Y.copy()
    y[2] = np.nan
    with pytest.warns(RuntimeWarning, match="site\\(s\\) `y` of model `hmm` hold NaN"):
        decode(y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert decode(Y) == viterbi(TRANS, LOCS, Y)
