"""TraceEnum_ELBO against oracles: the marginal likelihood summed by hand (logsumexp over a
mixture's components, the forward algorithm of an HMM) and NumPyro's TraceEnum_ELBO on the same
model and guide (loss and gradient at the same params and key)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer.autoguide as numpyro_autoguide
import optax
import pytest
from numpyro.contrib.funsor import markov
from numpyro.distributions import constraints
from numpyro.ops.indexing import Vindex

import effppl
from effppl import distributions as dist
from effppl.infer import SVI, ELBOError, Trace_ELBO, TraceEnum_ELBO, autoguide, config_enumerate

Y = np.array([-2.1, -1.5, 0.3, 2.0, 2.5, 1.7, -0.4])


def _mixture(ppl):
    def model(y):
        w = ppl.sample("w", dist.Dirichlet(jnp.ones(2)))
        locs = ppl.sample("locs", dist.Normal(0.0, 5.0).expand([2]).to_event(1))
        with ppl.plate("n", y.shape[0]):
            z = ppl.sample("z", dist.Categorical(w), infer={"enumerate": "parallel"})
            ppl.sample("y", dist.Normal(locs[z], 1.0), obs=y)
    return model


def _mixture_guide(ppl):
    def guide(y):
        w = ppl.param("w_loc", jnp.ones(2) / 2, constraint=constraints.simplex)
        loc = ppl.param("locs_loc", jnp.array([-1.0, 1.0]))
        scale = ppl.param("locs_scale", jnp.ones(2), constraint=constraints.positive)
        ppl.sample("w", dist.Delta(w, event_dim=1))
        ppl.sample("locs", dist.Normal(loc, scale).to_event(1))
    return guide


MIX_PARAMS = {"w_loc": np.array([0.3, 0.7]), "locs_loc": np.array([-1.0, 2.0]),
              "locs_scale": np.array([0.4, 0.6])}


def _value_and_grad(loss, params, model, guide, *args, seed=0):
    return jax.jit(jax.value_and_grad(
        lambda p: loss.loss(jax.random.PRNGKey(seed), p, model, guide, *args)))(params)


def _assert_same(ours, theirs, rtol=1e-10):
    np.testing.assert_allclose(ours[0], theirs[0], rtol=rtol)
    for name in theirs[1]:
        np.testing.assert_allclose(ours[1][name], theirs[1][name], rtol=rtol, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_mixture_loss_is_the_hand_marginal_and_numpyros(seed):
    ours = _value_and_grad(TraceEnum_ELBO(), MIX_PARAMS, _mixture(effppl), _mixture_guide(effppl),
                           Y, seed=seed)
    theirs = _value_and_grad(numpyro.infer.TraceEnum_ELBO(), MIX_PARAMS, _mixture(numpyro),
                             _mixture_guide(numpyro), Y, seed=seed)
    _assert_same(ours, theirs)

    # by hand: the guide's draw of `locs` (NumPyro's key split: model key first), then
    # log p(w, locs) + sum_n logsumexp_k [log w_k + log N(y_n | locs_k, 1)] - log q(locs)
    _, guide_key = jax.random.split(jax.random.PRNGKey(seed))
    after_w, _ = jax.random.split(guide_key)   # `seed` splits its key at each site: `w`, then
    _, locs_key = jax.random.split(after_w)    # `locs`
    q = dist.Normal(MIX_PARAMS["locs_loc"], MIX_PARAMS["locs_scale"])
    locs = q.sample(locs_key)
    w = MIX_PARAMS["w_loc"]
    log_p = (dist.Dirichlet(jnp.ones(2)).log_prob(w) + dist.Normal(0.0, 5.0).log_prob(locs).sum()
             + jnp.sum(jax.nn.logsumexp(jnp.log(w) + dist.Normal(locs, 1.0).log_prob(Y[:, None]),
                                        axis=-1)))
    np.testing.assert_allclose(ours[0], -(log_p - q.log_prob(locs).sum()), rtol=1e-10)


def test_max_plate_nesting_moves_the_enumerated_dim_only():
    values = [TraceEnum_ELBO(max_plate_nesting=m).loss(jax.random.PRNGKey(0), MIX_PARAMS,
                                                       _mixture(effppl), _mixture_guide(effppl), Y)
              for m in (float("inf"), 1, 3)]
    np.testing.assert_allclose(values, values[0], rtol=1e-12)
    for bad in (-1, 1.5, "1"):
        with pytest.raises(ELBOError, match="max_plate_nesting"):
            TraceEnum_ELBO(max_plate_nesting=bad)


@pytest.mark.slow
def test_autoguides_leave_enumerated_sites_to_the_elbo():
    """effppl's autoguides guide the continuous sites only (NumPyro's need the discrete site
    hidden with `block`); at the same params, loss and gradient equal NumPyro's."""
    model = config_enumerate(_mixture(effppl))
    guide = autoguide.AutoDelta(model)
    svi = SVI(model, guide, optax.adam(0.01), TraceEnum_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), Y))
    assert sorted(params) == ["locs_auto_loc", "w_auto_loc"]
    hidden = numpyro.handlers.block(_mixture(numpyro), hide=["z"])
    theirs = _value_and_grad(numpyro.infer.TraceEnum_ELBO(), params, _mixture(numpyro),
                             numpyro_autoguide.AutoDelta(hidden), Y)
    ours = _value_and_grad(TraceEnum_ELBO(), params, model, guide, Y)
    _assert_same(ours, theirs)


@pytest.mark.slow
def test_svi_with_autodelta_follows_numpyros_steps():
    model = _mixture(effppl)
    init = {"w_auto_loc": jnp.array([0.5, 0.5]), "locs_auto_loc": jnp.array([-0.5, 0.5])}
    ours = SVI(model, autoguide.AutoDelta(model), optax.adam(0.05), TraceEnum_ELBO()).run(
        jax.random.PRNGKey(0), 300, Y, progress_bar=False, init_params=init)
    n_model = _mixture(numpyro)
    n_guide = numpyro_autoguide.AutoDelta(numpyro.handlers.block(n_model, hide=["z"]),
                                          init_loc_fn=numpyro.infer.init_to_value(values={
                                              "w": init["w_auto_loc"],
                                              "locs": init["locs_auto_loc"]}))
    theirs = numpyro.infer.SVI(n_model, n_guide, numpyro.optim.Adam(0.05),
                               numpyro.infer.TraceEnum_ELBO()).run(
        jax.random.PRNGKey(0), 300, Y, progress_bar=False)
    np.testing.assert_allclose(ours.losses, theirs.losses, rtol=1e-8)
    for name in init:
        np.testing.assert_allclose(ours.params[name], theirs.params[name], rtol=1e-7)
    assert ours.losses[-1] < ours.losses[0] - 1.0


K = 3
HMM_Y = np.array([0.1, -0.3, 2.2, 1.9, 4.1, 3.8, 0.2, 2.5])


def _hmm_scan(y):  # a plain lax.scan: effppl derives the forward algorithm
    trans = effppl.sample("trans", dist.Dirichlet(jnp.ones((K, K))).to_event(1))
    locs = effppl.sample("locs", dist.Normal(jnp.zeros(K), 3.0).to_event(1))

    def step(z_prev, y_t):
        z = effppl.sample("z", dist.Categorical(trans[z_prev]), infer={"enumerate": "parallel"})
        effppl.sample("y", dist.Normal(locs[z], 1.0), obs=y_t)
        return z, None

    jax.lax.scan(step, 0, y)


def _hmm_numpyro(y):  # NumPyro's enumerated HMM: a Python loop under `markov`
    trans = numpyro.sample("trans", dist.Dirichlet(jnp.ones((K, K))).to_event(1))
    locs = numpyro.sample("locs", dist.Normal(jnp.zeros(K), 3.0).to_event(1))
    z = 0
    for t in markov(range(len(y))):
        z = numpyro.sample(f"z_{t}", dist.Categorical(Vindex(trans)[z]),
                           infer={"enumerate": "parallel"})
        numpyro.sample(f"y_{t}", dist.Normal(Vindex(locs)[z], 1.0), obs=y[t])


def _hmm_guide(ppl):
    def guide(y):
        t = ppl.param("t", jnp.ones((K, K)) / K, constraint=constraints.simplex)
        loc = ppl.param("l", jnp.zeros(K))
        scale = ppl.param("s", 0.5 * jnp.ones(K), constraint=constraints.positive)
        ppl.sample("trans", dist.Delta(t, event_dim=2))
        ppl.sample("locs", dist.Normal(loc, scale).to_event(1))
    return guide


HMM_PARAMS = {"t": np.array([[0.8, 0.1, 0.1], [0.2, 0.6, 0.2], [0.1, 0.3, 0.6]]),
              "l": np.array([0.0, 2.0, 4.0]), "s": np.array([0.3, 0.4, 0.5])}


def _forward_algorithm_elbo(seed):
    """-(log p(trans, locs) + log sum_z p(y, z | trans, locs) - log q(locs)) by hand."""
    _, guide_key = jax.random.split(jax.random.PRNGKey(seed))
    after_trans, _ = jax.random.split(guide_key)
    _, locs_key = jax.random.split(after_trans)
    q = dist.Normal(HMM_PARAMS["l"], HMM_PARAMS["s"])
    locs, trans = q.sample(locs_key), HMM_PARAMS["t"]
    emit = dist.Normal(locs, 1.0).log_prob(HMM_Y[:, None])  # (T, K)
    alpha = jnp.log(trans[0]) + emit[0]
    for t in range(1, len(HMM_Y)):
        alpha = jax.nn.logsumexp(alpha[:, None] + jnp.log(trans), axis=0) + emit[t]
    log_p = (dist.Dirichlet(jnp.ones((K, K))).to_event(1).log_prob(trans)
             + dist.Normal(0.0, 3.0).log_prob(locs).sum() + jax.nn.logsumexp(alpha))
    return -(log_p - q.log_prob(locs).sum())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 3])
def test_hmm_in_a_plain_scan_equals_numpyros_markov_loop_and_the_forward_algorithm(seed):
    ours = _value_and_grad(TraceEnum_ELBO(), HMM_PARAMS, _hmm_scan, _hmm_guide(effppl), HMM_Y,
                           seed=seed)
    theirs = _value_and_grad(numpyro.infer.TraceEnum_ELBO(), HMM_PARAMS, _hmm_numpyro,
                             _hmm_guide(numpyro), HMM_Y, seed=seed)
    _assert_same(ours, theirs)
    np.testing.assert_allclose(ours[0], _forward_algorithm_elbo(seed), rtol=1e-10)


def test_guide_sampled_sites_are_scored_not_enumerated():
    """A site the model marks and the guide samples is the guide's (NumPyro replays it): the
    loss is Trace_ELBO's, and NumPyro's."""
    def pair(ppl):
        def model(y):
            locs = ppl.param("locs", jnp.array([-1.0, 1.0]))
            z = ppl.sample("z", dist.Bernoulli(0.3), infer={"enumerate": "parallel"})
            ppl.sample("y", dist.Normal(locs[z], 1.0), obs=y)

        def guide(y):
            ppl.sample("z", dist.Bernoulli(ppl.param("pz", 0.5,
                                                       constraint=constraints.unit_interval)))
        return model, guide

    params = {"locs": jnp.array([-1.0, 1.5]), "pz": jnp.array(0.4)}
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        ours = TraceEnum_ELBO().loss(key, params, *pair(effppl), jnp.array(0.7))
        np.testing.assert_allclose(
            ours, numpyro.infer.TraceEnum_ELBO().loss(key, params, *pair(numpyro),
                                                      jnp.array(0.7)), rtol=1e-12)
        np.testing.assert_allclose(
            ours, Trace_ELBO().loss(key, params, *pair(effppl), jnp.array(0.7)), rtol=1e-12)


def test_unmarked_discrete_model_site_is_an_error_and_a_guide_may_enumerate_it():
    def model(y):
        z = effppl.sample("z", dist.Bernoulli(0.3))
        effppl.sample("y", dist.Normal(z, 1.0), obs=y)

    def enumerated_guide(y):
        effppl.sample("z", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})

    def empty_guide(y):
        effppl.param("unused", 0.0)

    with pytest.raises(ELBOError, match="site `z` of model `.*model` is discrete"):
        TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {"unused": 0.0}, model, empty_guide, 0.5)
    # marked in the model: summed out, log p(y) = log(0.7 N(y|0,1) + 0.3 N(y|1,1))
    value = TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {"unused": 0.0},
                                  config_enumerate(model), empty_guide, 0.5)
    exact = jnp.logaddexp(jnp.log(0.7) + dist.Normal(0.0, 1.0).log_prob(0.5),
                          jnp.log(0.3) + dist.Normal(1.0, 1.0).log_prob(0.5))
    np.testing.assert_allclose(value, -exact, rtol=1e-12)
    # enumerated in the guide: sum_z q(z) [log p(z) + log p(y | z) - log q(z)], q(z) = 1/2
    value = TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {}, model, enumerated_guide, 0.5)
    by_hand = 0.5 * sum(jnp.log(pz) + dist.Normal(float(z), 1.0).log_prob(0.5) - jnp.log(0.5)
                        for z, pz in ((0, 0.7), (1, 0.3)))
    np.testing.assert_allclose(value, -by_hand, rtol=1e-12)


@pytest.mark.slow
def test_subsampled_plate_scales_the_marginal_not_the_components():
    """With `subsample_size`, the plate's scale N / n multiplies each data point's marginal
    log-likelihood (log sum_z ...), as in NumPyro, not each component inside the sum."""
    def subsampled(ppl):
        def model(y):
            w = ppl.sample("w", dist.Dirichlet(jnp.ones(2)))
            locs = ppl.sample("locs", dist.Normal(0.0, 5.0).expand([2]).to_event(1))
            with ppl.plate("n", y.shape[0], subsample_size=3) as idx:
                z = ppl.sample("z", dist.Categorical(w), infer={"enumerate": "parallel"})
                ppl.sample("y", dist.Normal(locs[z], 1.0), obs=jnp.asarray(y)[idx])
        return model

    for seed in (0, 1):
        ours = _value_and_grad(TraceEnum_ELBO(), MIX_PARAMS, subsampled(effppl),
                               _mixture_guide(effppl), Y, seed=seed)
        theirs = _value_and_grad(numpyro.infer.TraceEnum_ELBO(), MIX_PARAMS,
                                 subsampled(numpyro), _mixture_guide(numpyro), Y, seed=seed)
        _assert_same(ours, theirs)


@pytest.mark.slow
def test_particles_average_the_single_particle_losses():
    """`num_particles=n`: the mean of the single-particle losses at the split keys (vectorised or
    sequential), as NumPyro's; over many particles it approaches the exact expectation."""
    model, guide = _mixture(effppl), _mixture_guide(effppl)
    keys = jax.random.split(jax.random.PRNGKey(4), 3)
    singles = [TraceEnum_ELBO().loss(k, MIX_PARAMS, model, guide, Y) for k in keys]
    for vectorize in (True, False):
        value = TraceEnum_ELBO(num_particles=3, vectorize_particles=vectorize).loss(
            jax.random.PRNGKey(4), MIX_PARAMS, model, guide, Y)
        np.testing.assert_allclose(value, np.mean(singles), rtol=1e-10)
    theirs = numpyro.infer.TraceEnum_ELBO(num_particles=3).loss(
        jax.random.PRNGKey(4), MIX_PARAMS, _mixture(numpyro), _mixture_guide(numpyro), Y)
    np.testing.assert_allclose(value, theirs, rtol=1e-10)


def test_enumerated_site_under_vmap_is_an_error_naming_the_site_not_a_draw():
    """A marked site inside a `jax.vmap` of the model cannot be enumerated: it used to be drawn,
    giving a loss that changed with the key. Its plate twin is the exact marginal."""
    y = jnp.array([0.0, 3.0, 3.0, 0.0])

    @config_enumerate
    def vmapped(y):
        def one(y_i):
            z = effppl.sample("z", dist.Bernoulli(0.5))
            effppl.sample("y", dist.Normal(z * 3.0, 1.0), obs=y_i)
        jax.vmap(one)(y)

    @config_enumerate
    def plated(y):
        with effppl.plate("n", 4):
            z = effppl.sample("z", dist.Bernoulli(0.5))
            effppl.sample("y", dist.Normal(z * 3.0, 1.0), obs=y)

    exact = -jnp.sum(jnp.logaddexp(jnp.log(0.5) + dist.Normal(0.0, 1.0).log_prob(y),
                                   jnp.log(0.5) + dist.Normal(3.0, 1.0).log_prob(y)))
    for seed in range(3):
        np.testing.assert_allclose(TraceEnum_ELBO().loss(jax.random.PRNGKey(seed), {}, plated,
                                                         lambda y: None, y), exact, rtol=1e-12)
    match = "site `z` is marked for enumeration inside a `jax.vmap`.*effppl.plate"
    with pytest.raises(effppl.primitives.SiteError, match=match):
        TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {}, vmapped, lambda y: None, y)
    with pytest.raises(effppl.primitives.SiteError, match=match):
        effppl.handlers.log_density(effppl.handlers.enum(vmapped), (y,), {}, {})
    with pytest.raises(effppl.primitives.SiteError, match=match):
        effppl.handlers.trace(effppl.infer.infer_discrete(vmapped, temperature=0)).get_trace(y)


def _wrapped(ppl, handlers, loc_scale, model, how):
    """`model` wrapped by a handler that leaves enumeration alone: the loss scaled, a site
    conditioned, or a site that does not depend on the enumerated one reparametrized."""
    if how == "scale":
        return handlers.scale(model, 2.0)
    if how == "condition":
        return handlers.condition(model, {"trans": jnp.asarray(HMM_PARAMS["t"])})
    return handlers.reparam(model, config={"locs": loc_scale(0.0)})


def _wrapped_guide(ppl, how):
    def guide(y):
        loc = ppl.param("l", jnp.zeros(K))
        scale = ppl.param("s", 0.5 * jnp.ones(K), constraint=constraints.positive)
        if how != "condition":
            t = ppl.param("t", jnp.ones((K, K)) / K, constraint=constraints.simplex)
            ppl.sample("trans", dist.Delta(t, event_dim=2))
        name = "locs_decentered" if how == "reparam" else "locs"
        ppl.sample(name, dist.Normal(loc, scale).to_event(1))
    return guide


@pytest.mark.slow
@pytest.mark.parametrize("how", ["scale", "condition", "reparam"])
def test_hmm_in_a_plain_scan_under_a_handler_equals_numpyros_markov_loop(how):
    """`scale`/`condition`/`reparam` (of a site the enumerated one does not reach) around a model
    enumerating a site in a plain `lax.scan`: the scan's forward algorithm still sees the model's
    own program (the ELBO's `config_enumerate`-style wrapper used to hide it, raising a
    `SiteError` about an `enum` the user never wrote). Oracle: NumPyro's markov loop, wrapped
    alike."""
    from numpyro.infer.reparam import LocScaleReparam as NumPyroLocScale

    from effppl.infer.reparam import LocScaleReparam

    params = {k: v for k, v in HMM_PARAMS.items() if how != "condition" or k != "t"}
    ours = _wrapped(effppl, effppl.handlers, LocScaleReparam, _hmm_scan, how)
    theirs = _wrapped(numpyro, numpyro.handlers, NumPyroLocScale, _hmm_numpyro, how)
    for seed in (0, 3):
        _assert_same(
            _value_and_grad(TraceEnum_ELBO(), params, ours, _wrapped_guide(effppl, how), HMM_Y,
                            seed=seed),
            _value_and_grad(numpyro.infer.TraceEnum_ELBO(), params, theirs,
                            _wrapped_guide(numpyro, how), HMM_Y, seed=seed))
