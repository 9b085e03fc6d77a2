"""`markov` over Python loops (NumPyro's `numpyro.contrib.funsor.markov`): enumeration dims are
recycled, so a T-step HMM uses `history + 1` dims; its log density, potential and
TraceEnum_ELBO loss equal NumPyro's on the same program (imports swapped) and a hand-written
forward algorithm in float64."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.contrib.funsor as numpyro_funsor
import numpyro.handlers
import pytest
from jax.scipy.special import logsumexp
from numpyro.distributions import constraints
from numpyro.ops.indexing import Vindex

import effppl
import effppl.contrib.funsor as effppl_funsor
from effppl import distributions as dist
from effppl.infer import TraceEnum_ELBO

K, D, N = 3, 4, 2  # hidden states, tones, sequences

EFFPPL = types.SimpleNamespace(ppl=effppl, funsor=effppl_funsor, mask=effppl.handlers.mask)
NUMPYRO = types.SimpleNamespace(ppl=numpyro, funsor=numpyro_funsor, mask=numpyro.handlers.mask)


def _transitions(ppl, hidden, batch=None):
    batch = (hidden,) if batch is None else batch
    return ppl.sample("probs_x", dist.Dirichlet(0.9 * jnp.eye(hidden) + 0.1).expand(batch)
                      .to_event(len(batch)))


def model_1(lib):
    """NumPyro's `examples/hmm_enum.py` model_1 with a Python loop under `markov` (as Pyro's
    `examples/hmm.py` writes it)."""
    ppl, funsor = lib.ppl, lib.funsor

    def model(sequences, lengths):
        num_sequences, max_length, data_dim = sequences.shape
        probs_x = _transitions(ppl, K)
        probs_y = ppl.sample("probs_y", dist.Beta(0.1, 0.9).expand([K, data_dim]).to_event(2))
        with ppl.plate("sequences", num_sequences, dim=-2):
            x = 0
            for t in funsor.markov(range(max_length)):
                with lib.mask(mask=(t < lengths)[..., None]):
                    x = ppl.sample(f"x_{t}", dist.Categorical(probs_x[x]))
                    with ppl.plate("tones", data_dim, dim=-1):
                        ppl.sample(f"y_{t}", dist.Bernoulli(probs_y[x.squeeze(-1)]),
                                   obs=sequences[:, t])
    return funsor.config_enumerate(model)


def model_2(lib):
    """hmm_enum's model_2 (y[t] depends on x[t] and y[t-1]) with a Python loop."""
    ppl, funsor = lib.ppl, lib.funsor

    def model(sequences, lengths):
        num_sequences, max_length, data_dim = sequences.shape
        probs_x = _transitions(ppl, K)
        probs_y = ppl.sample("probs_y", dist.Beta(0.1, 0.9).expand([K, 2, data_dim]).to_event(3))
        with ppl.plate("sequences", num_sequences, dim=-2):
            x, y = 0, jnp.zeros((num_sequences, data_dim), jnp.int32)
            for t in funsor.markov(range(max_length)):
                with lib.mask(mask=(t < lengths)[..., None]):
                    x = ppl.sample(f"x_{t}", dist.Categorical(probs_x[x]))
                    with ppl.plate("tones", data_dim, dim=-1) as tones:
                        y = ppl.sample(f"y_{t}", dist.Bernoulli(probs_y[x, y, tones]),
                                       obs=sequences[:, t]).astype(jnp.int32)
    return funsor.config_enumerate(model)


def model_3(lib):
    """hmm_enum's model_3 (a factorial HMM: two chains w, x per step) with a Python loop."""
    ppl, funsor = lib.ppl, lib.funsor

    def model(sequences, lengths):
        num_sequences, max_length, data_dim = sequences.shape
        probs_w = ppl.sample("probs_w", dist.Dirichlet(0.9 * jnp.eye(2) + 0.1).to_event(1))
        probs_x = _transitions(ppl, 2)
        probs_y = ppl.sample("probs_y", dist.Beta(0.1, 0.9).expand([2, 2, data_dim]).to_event(3))
        with ppl.plate("sequences", num_sequences, dim=-2):
            w = x = 0
            for t in funsor.markov(range(max_length)):
                with lib.mask(mask=(t < lengths)[..., None]):
                    w = ppl.sample(f"w_{t}", dist.Categorical(probs_w[w]))
                    x = ppl.sample(f"x_{t}", dist.Categorical(probs_x[x]))
                    with ppl.plate("tones", data_dim, dim=-1) as tones:
                        ppl.sample(f"y_{t}", dist.Bernoulli(probs_y[w, x, tones]),
                                   obs=sequences[:, t])
    return funsor.config_enumerate(model)


def model_6(lib):
    """hmm_enum's model_6 (a second-order HMM) with a Python loop under `markov(history=2)`."""
    ppl, funsor = lib.ppl, lib.funsor

    def model(sequences, lengths):
        num_sequences, max_length, data_dim = sequences.shape
        probs_x = _transitions(ppl, K, (K, K))
        probs_y = ppl.sample("probs_y", dist.Beta(0.1, 0.9).expand([K, data_dim]).to_event(2))
        with ppl.plate("sequences", num_sequences, dim=-2):
            x_prev = x_curr = 0
            for t in funsor.markov(range(max_length), history=2):
                with lib.mask(mask=(t < lengths)[..., None]):
                    x_prev, x_curr = x_curr, ppl.sample(
                        f"x_{t}", dist.Categorical(Vindex(probs_x)[x_prev, x_curr]))
                    with ppl.plate("tones", data_dim, dim=-1):
                        ppl.sample(f"y_{t}", dist.Bernoulli(probs_y[x_curr.squeeze(-1)]),
                                   obs=sequences[:, t])
    return funsor.config_enumerate(model)


def _data(num_steps, seed=0, masked=True):
    rng = np.random.RandomState(seed)
    sequences = (rng.rand(N, num_steps, D) > 0.6).astype(np.float64)
    lengths = np.array([num_steps, max(num_steps - 2, 1) if masked else num_steps])
    return sequences, lengths


def _params(seed=1):
    rng = np.random.RandomState(seed)
    return {"probs_x": rng.dirichlet(np.ones(K), K), "probs_y": rng.rand(K, D)}


def _numpyro_log_density(model, args, params):
    enumerated = numpyro_funsor.enum(model, first_available_dim=-3)
    return numpyro_funsor.log_density(enumerated, args, {}, params)[0]


def _effppl_log_density(model, args, params):
    return effppl_funsor.log_density(model, args, {}, params)[0]


def _forward_model_1(sequences, lengths, probs_x, probs_y):
    """model_1's log joint by hand: the priors, and per sequence the forward algorithm over the
    steps, a masked step contributing a factor 1 to every transition and emission."""
    log_p = (dist.Dirichlet(0.9 * jnp.eye(K) + 0.1).to_event(1).log_prob(probs_x)
             + dist.Beta(0.1, 0.9).expand([K, D]).to_event(2).log_prob(probs_y))
    for n in range(sequences.shape[0]):
        alpha = jnp.zeros(K).at[1:].set(-jnp.inf)  # x_{-1} = 0
        for t in range(sequences.shape[1]):
            on = t < lengths[n]
            emit = jnp.sum(dist.Bernoulli(probs_y).log_prob(sequences[n, t]), -1)  # (K,)
            step = jnp.log(probs_x) + emit[None, :]
            alpha = jax.nn.logsumexp(alpha[:, None] + jnp.where(on, step, 0.0), axis=0)
        log_p = log_p + jax.nn.logsumexp(alpha)
    return log_p


@pytest.mark.slow
@pytest.mark.parametrize("num_steps", [3, 50])
def test_python_loop_hmm_log_density_is_numpyros_and_the_forward_algorithm(num_steps):
    """Also: the T steps use two enumeration dims (left of the two plates), not T."""
    args, params, dims = _data(num_steps), _params(), {}

    def ours(p):
        lp, tr = effppl_funsor.log_density(model_1(EFFPPL), args, {}, p)
        dims.update((name, (site["infer"].get("_enumerate_dim"), site["log_prob"].ndim))
                    for name, site in tr.items() if site["type"] == "sample")
        return lp

    ours = jax.jit(ours)(params)
    theirs = jax.jit(lambda p: _numpyro_log_density(model_1(NUMPYRO), args, p))(params)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    np.testing.assert_allclose(ours, _forward_model_1(*args, **params), rtol=1e-12)
    assert {dims[f"x_{t}"][0] for t in range(num_steps)} == {-3, -4}
    assert max(dims[f"y_{t}"][1] for t in range(num_steps)) == 4


@pytest.mark.slow
@pytest.mark.parametrize("make", [model_2, model_3, model_6])
def test_python_loop_hmm_enum_models_log_density_is_numpyros(make):
    args = _data(6)
    names = {model_2: ["probs_x", "probs_y"], model_3: ["probs_w", "probs_x", "probs_y"],
             model_6: ["probs_x", "probs_y"]}[make]
    rng = np.random.RandomState(2)
    params = {"probs_w": rng.dirichlet(np.ones(2), 2), "probs_x": rng.dirichlet(np.ones(K), K),
              "probs_y": rng.rand(K, D)}
    if make is model_2:
        params["probs_y"] = rng.rand(K, 2, D)
    if make is model_3:
        params["probs_x"], params["probs_y"] = rng.dirichlet(np.ones(2), 2), rng.rand(2, 2, D)
    if make is model_6:
        params["probs_x"] = rng.dirichlet(np.ones(K), (K, K))
    params = {name: params[name] for name in names}
    ours = jax.jit(lambda p: _effppl_log_density(make(EFFPPL), args, p))(params)
    theirs = jax.jit(lambda p: _numpyro_log_density(make(NUMPYRO), args, p))(params)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_history_two_uses_three_dims():
    dims = {}

    def log_density(p):
        lp, tr = effppl_funsor.log_density(model_6(EFFPPL), _data(9), {}, p)
        dims.update((t, tr[f"x_{t}"]["infer"]["_enumerate_dim"]) for t in range(9))
        return lp

    jax.jit(log_density)({"probs_x": np.random.RandomState(0).dirichlet(np.ones(K), (K, K)),
                          "probs_y": np.full((K, D), 0.3)})
    assert set(dims.values()) == {-3, -4, -5}


@pytest.mark.slow
@pytest.mark.parametrize("make", [model_1, model_2])
def test_python_loop_hmm_potential_energy_value_and_grad_is_numpyros(make):
    from numpyro.infer.util import potential_energy as numpyro_potential_energy

    from effppl.handlers import potential_energy

    args = _data(5)
    rng = np.random.RandomState(3)
    shape_y = (K, 2, D) if make is model_2 else (K, D)
    u = {"probs_x": rng.randn(K, K - 1), "probs_y": rng.randn(*shape_y)}
    ours = jax.jit(jax.value_and_grad(
        lambda u: potential_energy(make(EFFPPL), args, {}, u)))(u)
    enumerated = numpyro_funsor.enum(make(NUMPYRO), first_available_dim=-3)
    theirs = jax.jit(jax.value_and_grad(
        lambda u: numpyro_potential_energy(enumerated, args, {}, u, enum=True)))(u)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12)
    for name in u:
        np.testing.assert_allclose(ours[1][name], theirs[1][name], rtol=1e-9, atol=1e-12)


def _guide(ppl):
    def guide(sequences, lengths):
        px = ppl.param("px", jnp.ones((K, K)) / K, constraint=constraints.simplex)
        loc = ppl.param("loc", jnp.zeros((K, D)))
        ppl.sample("probs_x", dist.Delta(px, event_dim=2))
        ppl.sample("probs_y", dist.TransformedDistribution(
            dist.Normal(loc, 0.5), dist.transforms.SigmoidTransform()).to_event(2))
    return guide


@pytest.mark.slow
@pytest.mark.parametrize("num_steps", [3, pytest.param(50, marks=pytest.mark.slow)])
def test_python_loop_hmm_trace_enum_elbo_is_numpyros(num_steps):
    # unmasked: NumPyro's TraceEnum_ELBO sums a masked enumerated site under its unmasked
    # distribution (a factor 1), its log_density and effppl's under the mask (a factor K)
    args = _data(num_steps, masked=False)
    params = {"px": _params()["probs_x"],
              "loc": np.random.RandomState(4).randn(K, D)}

    def value_and_grad(loss, lib):
        return jax.jit(jax.value_and_grad(lambda p: loss.loss(
            jax.random.PRNGKey(0), p, model_1(lib), _guide(lib.ppl), *args)))(params)

    ours = value_and_grad(TraceEnum_ELBO(), EFFPPL)
    theirs = value_and_grad(numpyro.infer.TraceEnum_ELBO(max_plate_nesting=2), NUMPYRO)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-10)
    for name in params:
        np.testing.assert_allclose(ours[1][name], theirs[1][name], rtol=1e-8, atol=1e-10)


def _chain(y, trans, locs):
    """A one-sequence HMM's log likelihood by the forward algorithm (x_{-1} = 0)."""
    emit = dist.Normal(locs, 1.0).log_prob(y[:, None])
    alpha = jnp.log(trans[0]) + emit[0]
    for t in range(1, len(y)):
        alpha = jax.nn.logsumexp(alpha[:, None] + jnp.log(trans), axis=0) + emit[t]
    return jax.nn.logsumexp(alpha)


TRANS = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])
LOCS = np.array([-1.0, 0.5, 2.0])
Y = np.array([0.3, -1.2, 2.2, 1.8, 0.1, -0.4, 2.5])


@pytest.mark.slow
def test_markov_as_recursive_decorator_is_the_forward_algorithm():
    markov = effppl_funsor.markov

    @effppl_funsor.config_enumerate
    def model(y):
        @markov
        def step(t, x):
            if t < len(y):
                x = effppl.sample(f"x_{t}", dist.Categorical(jnp.asarray(TRANS)[x]))
                effppl.sample(f"y_{t}", dist.Normal(jnp.asarray(LOCS)[x], 1.0), obs=y[t])
                step(t + 1, x)
        step(0, 0)

    lp, tr = effppl_funsor.log_density(model, (Y,), {}, {})
    np.testing.assert_allclose(lp, _chain(Y, TRANS, LOCS), rtol=1e-12)
    assert {tr[f"x_{t}"]["infer"]["_enumerate_dim"] for t in range(len(Y))} == {-1, -2}


def test_nested_with_markov_blocks_are_numpyros():
    def make(lib):
        def model(y):
            x = 0
            for t in lib.funsor.markov(range(len(y))):
                x = lib.ppl.sample(f"x_{t}", dist.Categorical(Vindex(jnp.asarray(TRANS))[x]))
                with lib.funsor.markov():  # sees this step only
                    z = lib.ppl.sample(f"z_{t}", dist.Bernoulli(0.2 + 0.3 * (x == 1)))
                    lib.ppl.sample(f"y_{t}", dist.Normal(Vindex(jnp.asarray(LOCS))[x] + z, 1.0), obs=y[t])
        return lib.funsor.config_enumerate(model)

    ours = jax.jit(lambda y: effppl_funsor.log_density(make(EFFPPL), (y,), {}, {})[0])(Y)
    theirs = jax.jit(lambda y: numpyro_funsor.log_density(
        numpyro_funsor.enum(make(NUMPYRO)), (y,), {}, {})[0])(Y)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_history_zero_makes_steps_independent():
    @effppl_funsor.config_enumerate
    def model(y):
        for t in effppl_funsor.markov(range(len(y)), history=0):
            x = effppl.sample(f"x_{t}", dist.Categorical(jnp.asarray(TRANS[0])))
            effppl.sample(f"y_{t}", dist.Normal(jnp.asarray(LOCS)[x], 1.0), obs=y[t])

    lp, tr = effppl_funsor.log_density(model, (Y,), {}, {})
    by_hand = jnp.sum(jax.nn.logsumexp(jnp.log(TRANS[0]) + dist.Normal(LOCS, 1.0).log_prob(
        Y[:, None]), axis=-1))
    np.testing.assert_allclose(lp, by_hand, rtol=1e-12)
    assert {tr[f"x_{t}"]["infer"]["_enumerate_dim"] for t in range(len(Y))} == {-1}


def test_value_used_after_its_markov_loop_raises_naming_the_site():
    @effppl_funsor.config_enumerate
    def model(y):
        x = 0
        for t in effppl_funsor.markov(range(len(y))):
            x = effppl.sample(f"x_{t}", dist.Categorical(jnp.asarray(TRANS)[x]))
        effppl.sample("last", dist.Normal(jnp.asarray(LOCS)[x], 1.0), obs=y[-1])

    with pytest.raises(effppl.SiteError, match="Site `last`.*markov"):
        effppl_funsor.log_density(model, (Y,), {}, {})


@pytest.mark.parametrize("kwargs", [{"history": -1}, {"history": 1.5}, {"history": True},
                                    {"keep": "yes"}])
def test_bad_markov_arguments_raise(kwargs):
    with pytest.raises(effppl.SiteError, match="markov"):
        effppl_funsor.markov(range(3), **kwargs)


def test_markov_without_enum_only_iterates():
    def model(y):
        for t in effppl_funsor.markov(range(len(y))):
            effppl.sample(f"y_{t}", dist.Normal(0.0, 1.0), obs=y[t])
        return t

    lp, _ = effppl.log_density(model, (Y,), {}, {})
    np.testing.assert_allclose(lp, jnp.sum(dist.Normal(0.0, 1.0).log_prob(Y)), rtol=1e-12)
    assert effppl.handlers.seed(model, 0)(Y) == len(Y) - 1


@pytest.mark.slow
def test_infer_discrete_viterbi_path_of_python_loop_hmm_is_numpyros():
    def make(lib):
        def model(y):
            x = 0
            for t in lib.funsor.markov(range(len(y))):
                x = lib.ppl.sample(f"x_{t}", dist.Categorical(jnp.asarray(TRANS)[x]),
                                   infer={"enumerate": "parallel"})
                lib.ppl.sample(f"y_{t}", dist.Normal(jnp.asarray(LOCS)[x], 1.0), obs=y[t])
        return model

    ours = effppl_funsor.trace(effppl_funsor.infer_discrete(
        make(EFFPPL), temperature=0, first_available_dim=-1)).get_trace(Y)
    theirs = numpyro.handlers.trace(numpyro_funsor.infer_discrete(
        make(NUMPYRO), temperature=0, first_available_dim=-1,
        rng_key=jax.random.PRNGKey(0))).get_trace(Y)
    path = [int(ours[f"x_{t}"]["value"]) for t in range(len(Y))]
    assert path == [int(theirs[f"x_{t}"]["value"]) for t in range(len(Y))]
    assert len(set(path)) == K  # the data visit every state: a path that can be wrong


def _scan_model_1(sequences, lengths):
    """model_1 as effppl writes it: a plain `lax.scan` (NumPyro's hmm_enum model_1)."""
    num_sequences, _, data_dim = sequences.shape
    probs_x = _transitions(effppl, K)
    probs_y = effppl.sample("probs_y", dist.Beta(0.1, 0.9).expand([K, data_dim]).to_event(2))

    def step(carry, y):
        x_prev, t = carry
        with effppl.plate("sequences", num_sequences, dim=-2):
            with effppl.handlers.mask(mask=(t < lengths)[..., None]):
                x = effppl.sample("x", dist.Categorical(probs_x[x_prev]),
                                  infer={"enumerate": "parallel"})
                with effppl.plate("tones", data_dim, dim=-1):
                    effppl.sample("y", dist.Bernoulli(probs_y[x.squeeze(-1)]), obs=y)
        return (x, t + 1), None

    jax.lax.scan(step, (jnp.zeros((num_sequences, 1), int), 0), jnp.swapaxes(sequences, 0, 1))


@pytest.mark.slow
def test_nuts_on_python_loop_hmm_draws_where_the_scan_model_has_the_same_potential():
    from effppl.infer import MCMC, NUTS

    args = _data(5)
    mcmc = MCMC(NUTS(model_1(EFFPPL)), num_warmup=30, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *args)
    draws = mcmc.get_samples()
    assert draws["probs_x"].shape == (20, K, K) and draws["probs_y"].shape == (20, K, D)
    assert float(jnp.std(draws["probs_y"][:, 0, 0])) > 0  # the chain moves

    def both(sample):
        return (effppl.log_density(model_1(EFFPPL), args, {}, sample)[0],
                effppl.log_density(_scan_model_1, args, {}, sample)[0])

    ours, scan = jax.jit(jax.vmap(both))(draws)
    np.testing.assert_allclose(ours, scan, rtol=1e-10)


def test_keep_reopens_the_frame_so_a_later_block_sees_the_earlier_one():
    def make(lib, keep):
        def model(y):
            m = lib.funsor.markov(keep=keep)
            with m:
                a = lib.ppl.sample("a", dist.Categorical(jnp.asarray(TRANS[0])))
            with m:  # keep=True: the frame of `a`, so `b` gets another dim
                b = lib.ppl.sample("b", dist.Categorical(Vindex(jnp.asarray(TRANS))[a]))
                lib.ppl.sample("y", dist.Normal(Vindex(jnp.asarray(LOCS))[b] + a, 1.0), obs=y)
        return lib.funsor.config_enumerate(model)

    joint = (np.log(TRANS[0])[:, None] + np.log(TRANS)
             + dist.Normal(LOCS[None, :] + np.arange(K)[:, None], 1.0).log_prob(0.7))
    ours, tr = effppl_funsor.log_density(make(EFFPPL, True), (0.7,), {}, {})
    theirs = numpyro_funsor.log_density(numpyro_funsor.enum(make(NUMPYRO, True)), (0.7,), {},
                                        {})[0]
    np.testing.assert_allclose(ours, logsumexp(joint), rtol=1e-12)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    assert tr["a"]["infer"]["_enumerate_dim"] != tr["b"]["infer"]["_enumerate_dim"]


def test_an_error_inside_a_markov_loop_leaves_no_frame_open():
    from effppl.handlers.enumeration import _markov

    @effppl_funsor.config_enumerate
    def broken(y):
        x = 0
        for t in effppl_funsor.markov(range(len(y))):
            x = effppl.sample(f"x_{t}", dist.Categorical(jnp.asarray(TRANS)[x]))
            if t == 2:
                raise RuntimeError("in the loop")

    with pytest.raises(RuntimeError, match="in the loop"):
        effppl_funsor.log_density(broken, (Y,), {}, {})
    assert _markov.frames() == []
