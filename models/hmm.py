"""Semi-supervised HMM over words, the unsupervised part marginalised by the forward algorithm.

Ported from NumPyro's `examples/hmm.py` (`semi_supervised_hmm`, `simulate_data`; defaults 3
categories, 10 words, 100 supervised steps), after the Stan User's Guide HMM section; a benchmark
model of the paper ("Handling JAX", §7.2; 5k unsupervised steps there). The forward algorithm is a
plain `jax.lax.scan` with no site inside; its result enters through one `factor`. Synthetic data
drawn from the model's generative process with numpy and a fixed seed.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from jax.nn import log_sigmoid
from jax.scipy.special import gammaln, logsumexp

import effppl
from effppl import distributions as dist
from models._data import resolve_size

NAME = "hmm"
SIZES = {"quick": 200, "paper": 5_000}


def make_data(size="quick", seed=0, num_categories=3, num_words=10, num_supervised=100):
    """`((transition_prior (K,), emission_prior (W,), supervised_categories (S,),
    supervised_words (S,), unsupervised_words (T,)), {})`; T = the size.

    **Raises:** `SizeError` unless `size` is a key of `SIZES` or a positive int.
    """
    num_unsupervised = resolve_size(SIZES, size, NAME)
    rng = np.random.default_rng(seed)
    transition_prior = np.ones(num_categories)
    emission_prior = np.full(num_words, 0.1)
    transition_cdf = np.cumsum(rng.dirichlet(transition_prior, num_categories), axis=1)
    emission_cdf = np.cumsum(rng.dirichlet(emission_prior, num_categories), axis=1)
    total = num_supervised + num_unsupervised
    u = rng.random((total, 2))
    categories, words = np.empty(total, np.int64), np.empty(total, np.int64)
    for i in range(total):
        if i in (0, num_supervised):  # each part starts from a uniform category
            categories[i] = int(u[i, 0] * num_categories)
        else:
            cdf = transition_cdf[categories[i - 1]]
            categories[i] = min(np.searchsorted(cdf, u[i, 0], "right"), num_categories - 1)
        cdf = emission_cdf[categories[i]]
        words[i] = min(np.searchsorted(cdf, u[i, 1], "right"), num_words - 1)
    sup = slice(None, num_supervised)
    args = (transition_prior, emission_prior, categories[sup], words[sup], words[num_supervised:])
    return args, {}


def _forward_log_prob(init_log_prob, words, transition_log_prob, emission_log_prob):
    def step(log_prob, word):
        log_prob = jnp.expand_dims(log_prob, axis=1) + transition_log_prob
        return logsumexp(log_prob + emission_log_prob[:, word], axis=0), None

    log_prob, _ = jax.lax.scan(step, init_log_prob, words)
    return log_prob


def effppl_model(transition_prior, emission_prior, supervised_categories, supervised_words,
                 unsupervised_words):
    num_categories, num_words = transition_prior.shape[0], emission_prior.shape[0]
    transition_prob = effppl.sample("transition_prob", dist.Dirichlet(
        jnp.broadcast_to(transition_prior, (num_categories, num_categories))))
    emission_prob = effppl.sample("emission_prob", dist.Dirichlet(
        jnp.broadcast_to(emission_prior, (num_categories, num_words))))
    effppl.sample("supervised_categories",
                  dist.Categorical(transition_prob[supervised_categories[:-1]]),
                  obs=supervised_categories[1:])
    effppl.sample("supervised_words", dist.Categorical(emission_prob[supervised_categories]),
                  obs=supervised_words)
    transition_log_prob, emission_log_prob = jnp.log(transition_prob), jnp.log(emission_prob)
    init_log_prob = emission_log_prob[:, unsupervised_words[0]]
    log_prob = _forward_log_prob(init_log_prob, unsupervised_words[1:], transition_log_prob,
                                 emission_log_prob)
    effppl.factor("forward_log_prob", logsumexp(log_prob, axis=0, keepdims=True))


def numpyro_model(transition_prior, emission_prior, supervised_categories, supervised_words,
                  unsupervised_words):
    num_categories, num_words = transition_prior.shape[0], emission_prior.shape[0]
    transition_prob = numpyro.sample("transition_prob", dist.Dirichlet(
        jnp.broadcast_to(transition_prior, (num_categories, num_categories))))
    emission_prob = numpyro.sample("emission_prob", dist.Dirichlet(
        jnp.broadcast_to(emission_prior, (num_categories, num_words))))
    numpyro.sample("supervised_categories",
                   dist.Categorical(transition_prob[supervised_categories[:-1]]),
                   obs=supervised_categories[1:])
    numpyro.sample("supervised_words", dist.Categorical(emission_prob[supervised_categories]),
                   obs=supervised_words)
    transition_log_prob, emission_log_prob = jnp.log(transition_prob), jnp.log(emission_prob)
    init_log_prob = emission_log_prob[:, unsupervised_words[0]]
    log_prob = _forward_log_prob(init_log_prob, unsupervised_words[1:], transition_log_prob,
                                 emission_log_prob)
    log_prob = logsumexp(log_prob, axis=0, keepdims=True)
    numpyro.factor("forward_log_prob", log_prob)


def _stick_breaking(u):
    """NumPyro's `StickBreakingTransform` by hand: `(..., K-1)` reals -> simplex, log|det J|."""
    x = u - jnp.log(u.shape[-1] - jnp.arange(u.shape[-1]))
    z = jax.nn.sigmoid(x)
    remaining = jnp.cumprod(1 - z, axis=-1)
    ones = jnp.ones_like(z[..., :1])
    y = jnp.concatenate([z * jnp.concatenate([ones, remaining[..., :-1]], -1),
                         remaining[..., -1:]], -1)
    return y, jnp.sum(jnp.log(y[..., :-1]) + log_sigmoid(-x))


def _dirichlet_log_prob(x, alpha):
    return jnp.sum((alpha - 1) * jnp.log(x)) + x.shape[0] * (
        gammaln(jnp.sum(alpha)) - jnp.sum(gammaln(alpha)))


def handwritten_log_density(params, transition_prior, emission_prior, supervised_categories,
                            supervised_words, unsupervised_words):
    """Log joint in unconstrained space; each probability row is a stick-breaking transform."""
    transition_prob, log_det_t = _stick_breaking(params["transition_prob"])
    emission_prob, log_det_e = _stick_breaking(params["emission_prob"])
    log_a, log_b = jnp.log(transition_prob), jnp.log(emission_prob)
    lp = _dirichlet_log_prob(transition_prob, transition_prior) + log_det_t
    lp += _dirichlet_log_prob(emission_prob, emission_prior) + log_det_e
    lp += jnp.sum(log_a[supervised_categories[:-1], supervised_categories[1:]])
    lp += jnp.sum(log_b[supervised_categories, supervised_words])

    def forward(alpha, word):  # alpha[j] = log p(words so far, state_t = j)
        return logsumexp(alpha[:, None] + log_a, axis=0) + log_b[:, word], None

    alpha, _ = jax.lax.scan(forward, log_b[:, unsupervised_words[0]], unsupervised_words[1:])
    return lp + logsumexp(alpha)


def latent_shapes(transition_prior, emission_prior, *data):
    k, w = transition_prior.shape[0], emission_prior.shape[0]
    return {"transition_prob": (k, k - 1), "emission_prob": (k, w - 1)}
