"""Handlers as `with` blocks (NumPyro's context-manager use): inside a model, compiled away by the
translator; outside any entry point, eagerly, site by site, as NumPyro's."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from jax.scipy import stats
from numpyro import handlers as nh

import effppl
from effppl import distributions as dist
from effppl import handlers

from ..effects._util import assert_translated


def _close(a, b, tol=1e-10):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def test_eager_seed_block_draws_numpyros_values():
    with handlers.seed(rng_seed=0):
        ours = [effppl.sample("x", dist.Normal()), effppl.sample("y", dist.Normal())]
    with nh.seed(rng_seed=0):
        theirs = [numpyro.sample("x", dist.Normal()), numpyro.sample("y", dist.Normal())]
    _close(jnp.stack(ours), jnp.stack(theirs))
    assert ours[0] != ours[1]


def ar_model(y):
    """A latent mean, and `z` observed through a `with condition` around a plain `lax.scan`
    (NumPyro's ar2/holt_winters shape)."""
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))

    def step(prev, _):
        z = effppl.sample("z", dist.Normal(mu + 0.5 * prev, 1.0))
        return z, z
    with handlers.condition(data={"z": y}):
        jax.lax.scan(step, 0.0, None, length=y.shape[0])
    return mu


def _ar_log_density(mu, y):
    prev = jnp.concatenate([jnp.zeros(1), y[:-1]])
    return stats.norm.logpdf(mu) + jnp.sum(stats.norm.logpdf(y, mu + 0.5 * prev, 1.0))


def test_condition_block_around_a_plain_scan_observes_each_row():
    y = jnp.array([0.3, -1.0, 2.0, 0.5])
    lp, tr = effppl.log_density(ar_model, (y,), {}, {"mu": 0.7})
    _close(lp, _ar_log_density(0.7, y))
    assert tr["z"]["is_observed"] and not tr["mu"]["is_observed"]
    _close(tr["z"]["value"], y)
    assert_translated(lambda y: effppl.log_density(ar_model, (y,), {}, {"mu": 0.7})[0], y)


def test_condition_block_model_runs_under_nuts():
    from effppl.infer import MCMC, NUTS
    y = jnp.array([0.3, -1.0, 2.0, 0.5, 1.0, 0.0])
    mcmc = MCMC(NUTS(ar_model), num_warmup=200, num_samples=400, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y)
    assert set(mcmc.get_samples()) == {"mu"}
    # conjugate: mu ~ N(0, 1), y_t - 0.5 y_{t-1} ~ N(mu, 1)
    prev = jnp.concatenate([jnp.zeros(1), y[:-1]])
    post_mean = jnp.sum(y - 0.5 * prev) / (1 + y.shape[0])
    assert abs(float(mcmc.get_samples()["mu"].mean()) - float(post_mean)) < 0.15


def test_trace_block_records_an_entry_point_like_wrapping():
    y = jnp.array([0.3, -1.0])
    with handlers.trace() as tr:
        handlers.seed(ar_model, 3)(y)
    wrapped = handlers.trace(handlers.seed(ar_model, 3)).get_trace(y)
    assert set(tr) == set(wrapped) == {"mu", "z"}
    for name in tr:
        _close(tr[name]["value"], wrapped[name]["value"])
        assert tr[name]["is_observed"] == wrapped[name]["is_observed"]


def test_eager_trace_and_seed_blocks_match_numpyro():
    def model(sample):
        a = sample("a", dist.Normal(0.0, 1.0))
        return sample("b", dist.Normal(a, 2.0))

    with handlers.trace() as ours, handlers.seed(rng_seed=5):
        model(effppl.sample)
    with nh.trace() as theirs, nh.seed(rng_seed=5):
        model(numpyro.sample)
    assert list(ours) == list(theirs)
    for name in ours:
        _close(ours[name]["value"], theirs[name]["value"])


def test_blocks_inside_a_model_substitute_block_do_seed():
    def model():
        with handlers.seed(rng_seed=1):
            a = effppl.sample("a", dist.Normal(0.0, 1.0))   # drawn from the block's key
        with handlers.substitute(data={"b": 2.0}):
            b = effppl.sample("b", dist.Normal(a, 1.0))
        with handlers.block(hide=["c"]):
            c = effppl.sample("c", dist.Normal(0.0, 1.0), obs=1.5)
        with handlers.do(data={"d": 10.0}):
            d = effppl.sample("d", dist.Normal(0.0, 1.0))
        effppl.deterministic("out", b + c + d)

    tr = handlers.trace(handlers.substitute(model, data={"d": 0.25})).get_trace()
    assert set(tr) == {"a", "b", "d", "out"}          # `c` hidden
    with nh.seed(rng_seed=1):
        a = numpyro.sample("a", dist.Normal(0.0, 1.0))
    _close(tr["a"]["value"], a)
    _close(tr["b"]["value"], 2.0)
    _close(tr["d"]["value"], 0.25)                      # the site stays a fresh sample site
    _close(tr["out"]["value"], 2.0 + 1.5 + 10.0)        # the model goes on with the intervention
    lp, _ = effppl.log_density(model, (), {}, {"d": 0.25})
    _close(lp, stats.norm.logpdf(a) + stats.norm.logpdf(2.0, a, 1.0) + stats.norm.logpdf(0.25))


def test_replay_block_and_nested_blocks():
    def model():
        a = effppl.sample("a", dist.Normal(0.0, 1.0))
        return effppl.sample("b", dist.Normal(a, 1.0))
    guide_tr = handlers.trace(handlers.seed(model, 0)).get_trace()

    def replayed():
        with handlers.replay(trace=guide_tr), handlers.condition(data={"b": 0.0}):
            return model()
    tr = handlers.trace(replayed).get_trace()
    _close(tr["a"]["value"], guide_tr["a"]["value"])
    assert tr["b"]["is_observed"]


def test_block_in_loop_body_and_seed_keys_differ_per_iteration():
    def model():
        def step(c, _):
            with handlers.seed(rng_seed=0):
                x = effppl.sample("x", dist.Normal(0.0, 1.0))
            return c, x
        return jax.lax.scan(step, 0.0, None, length=3)[1]
    xs = handlers.trace(model).get_trace()["x"]["value"]
    assert xs.shape == (3,)
    # the block is entered afresh in each iteration: the same key each time (as a Python
    # statement re-run), like NumPyro's `with seed(rng_seed=0)` inside a loop body
    _close(xs, jnp.full(3, xs[0]))

    def outer():
        with handlers.seed(rng_seed=0):
            return jax.lax.scan(lambda c, _: (c, effppl.sample("x", dist.Normal())), 0.0, None,
                                length=3)[1]
    xs = handlers.trace(outer).get_trace()["x"]["value"]
    assert len(np.unique(np.asarray(xs))) == 3   # the block's key is split per occurrence


def test_trace_block_inside_a_model_is_a_clear_error():
    def model():
        with handlers.trace():
            effppl.sample("a", dist.Normal())
    with pytest.raises(TypeError, match="trace\\(model\\).get_trace"):
        handlers.seed(model, 0)()


def _blocked_sites(**config):
    def model():
        effppl.sample("x", dist.Normal())
        effppl.sample("y", dist.Normal(), obs=1.0, infer={"tag": "t"})
        effppl.deterministic("d", jnp.ones(2))
    return set(handlers.trace(handlers.seed(handlers.block(model, **config), 0)).get_trace())


def test_block_hide_fn_sees_numpyros_message_fields():
    assert _blocked_sites(hide_fn=lambda m: m["type"] == "sample") == {"d"}
    assert _blocked_sites(hide_fn=lambda m: m["is_observed"]) == {"x", "d"}
    assert _blocked_sites(hide_fn=lambda m: m["infer"].get("tag") == "t") == {"x", "d"}
    assert _blocked_sites(hide_fn=lambda m: m.get("type") == "deterministic") == {"x", "y"}


def test_block_expose_types_and_hide_types():
    assert _blocked_sites(expose_types=["sample"]) == {"x", "y"}
    assert _blocked_sites(expose_types=["deterministic"]) == {"d"}
    assert _blocked_sites(hide_types=["deterministic"]) == {"x", "y"}
    assert _blocked_sites(hide=["x"], expose=["x"]) == {"y", "d"}   # the first one given wins


def _subsampled(sample, plate, subsample):
    def model(data):
        mu = sample("mu", dist.Normal())
        with plate("N", 10, subsample_size=4) as idx:
            sample("y", dist.Normal(mu, 1.0), obs=subsample(data, event_dim=0))
        return idx
    return model


def test_subsampled_plate_draws_numpyros_indices_and_scales_the_density():
    data = jnp.arange(10.0) / 3
    ours = handlers.trace(handlers.seed(_subsampled(effppl.sample, effppl.plate,
                                                    effppl.subsample), 1)).get_trace(data)
    theirs = nh.trace(nh.seed(_subsampled(numpyro.sample, numpyro.plate, numpyro.subsample),
                              1)).get_trace(data)
    assert list(ours) == list(theirs) == ["mu", "N", "y"]
    assert ours["N"]["type"] == "plate" and ours["N"]["args"] == (10, 4)
    np.testing.assert_array_equal(ours["N"]["value"], theirs["N"]["value"])
    _close(ours["y"]["value"], theirs["y"]["value"])
    idx = jnp.array([9, 0, 2, 5])       # indices given: the density scales by 10 / 4
    lp, _ = effppl.log_density(_subsampled(effppl.sample, effppl.plate, effppl.subsample),
                               (data,), {}, {"mu": 0.3, "N": idx})
    _close(lp, stats.norm.logpdf(0.3) + 2.5 * jnp.sum(stats.norm.logpdf(data[idx], 0.3, 1.0)))
    np_lp, _ = numpyro.infer.util.log_density(
        _subsampled(numpyro.sample, numpyro.plate, numpyro.subsample), (data,), {},
        {"mu": 0.3, "N": idx})
    _close(lp, np_lp)


def test_param_in_a_subsampled_plate_is_indexed_like_numpyros():
    def model(param, plate):
        with plate("a", 10, subsample_size=3) as idx:
            p0 = param("p0", 0.0, event_dim=0)              # no plate dim: left whole
            p = param("p", jnp.arange(10.0), event_dim=0)
            q = param("q", jnp.arange(20.0).reshape(10, 2), event_dim=1)
        return idx, p0, p, q
    ours = handlers.seed(lambda: model(effppl.param, effppl.plate), 2)()
    theirs = nh.seed(lambda: model(numpyro.param, numpyro.plate), 2)()
    idx = ours[0]
    np.testing.assert_array_equal(idx, theirs[0])
    assert ours[1].shape == () and ours[2].shape == (3,) and ours[3].shape == (3, 2)
    np.testing.assert_array_equal(ours[2], jnp.arange(10.0)[idx])
    np.testing.assert_array_equal(ours[3], theirs[3])
    tr = handlers.trace(handlers.seed(lambda: model(effppl.param, effppl.plate), 2)).get_trace()
    assert tr["p"]["value"].shape == (10,)  # the trace keeps the whole param, as NumPyro's

    def bad():
        with effppl.plate("a", 10, subsample_size=3):
            effppl.param("bad", jnp.zeros(4), event_dim=0)
    with pytest.raises(effppl.SiteError, match="param\\('bad'.*size 4 at dim -1.*`a` has size 10"):
        handlers.seed(bad, 0)()


def test_svi_on_a_subsampled_plate_with_a_subsampled_param():
    # a deterministic guide (Delta): the loss of each one-point subsample, scaled by 2, averages
    # to the full loss, and so do the gradients (NumPyro's test_subsample_gradient, exactly)
    from effppl.infer import SVI, Trace_ELBO
    from effppl.optim import Adam

    data = jnp.array([-0.5, 2.0])

    def model(idx, size):
        with handlers.substitute(data={"N": idx}):
            with effppl.plate("N", 2, size) as i:
                z = effppl.sample("z", dist.Normal(0.0, 1.0))
                effppl.sample("x", dist.Normal(z, 1.0), obs=data[i])

    def guide(idx, size):
        with handlers.substitute(data={"N": idx}):
            with effppl.plate("N", 2, size):
                loc = effppl.param("loc", jnp.array([0.3, -0.2]), event_dim=0)
                effppl.sample("z", dist.Delta(loc))

    svi = SVI(model, guide, Adam(0.1), Trace_ELBO())
    state = svi.init(jax.random.PRNGKey(0), None, 2)
    params = svi.optim.get_params(state.optim_state)

    def loss(p, idx, size):
        return svi.loss.loss(state.rng_key, svi.constrain_fn(p), model, guide, idx, size)

    full, g_full = jax.value_and_grad(loss)(params, None, 2)
    parts = [jax.value_and_grad(loss)(params, jnp.array([i]), 1) for i in (0, 1)]
    loc = np.array([0.3, -0.2])
    _close(full, -np.sum(stats.norm.logpdf(loc) + stats.norm.logpdf(data, loc, 1.0)))
    _close((parts[0][0] + parts[1][0]) / 2, full)
    _close((parts[0][1]["loc"] + parts[1][1]["loc"]) / 2, g_full["loc"])
    _close(g_full["loc"], 2 * loc - np.asarray(data))


def test_traces_hold_plate_entries_and_plate_stack():
    def model(sample, plate_stack):
        with plate_stack("p", (2, 3)):
            return sample("x", dist.Normal())
    ours = handlers.trace(handlers.seed(lambda: model(effppl.sample, effppl.plate_stack),
                                        0)).get_trace()
    theirs = nh.trace(nh.seed(lambda: model(numpyro.sample, numpyro.plate_stack),
                              0)).get_trace()
    assert list(ours) == list(theirs)
    for name in theirs:
        assert ours[name]["type"] == theirs[name]["type"]
        np.testing.assert_array_equal(ours[name]["value"].shape, theirs[name]["value"].shape)
    assert ours["x"]["value"].shape == (2, 3)


def test_scope_prefixes_sites_and_plates_like_numpyro():
    def fn(sample, plate):
        with plate("N", 3):
            return sample("x", dist.Normal())

    def program(h, sample, plate):
        with h.trace() as tr, h.seed(rng_seed=1):
            with h.scope(prefix="a"):
                fn(sample, plate)
            with h.scope(prefix="b"), h.scope(prefix="a", hide_types=["plate"]):
                fn(sample, plate)
        return tr
    ours = program(handlers, effppl.sample, effppl.plate)
    theirs = program(nh, numpyro.sample, numpyro.plate)
    assert set(ours) == set(theirs) == {"a/x", "b/a/x", "a/N", "b/N"}
    _close(ours["b/a/x"]["value"], theirs["b/a/x"]["value"])
    scoped = handlers.trace(handlers.seed(handlers.scope(
        lambda: fn(effppl.sample, effppl.plate), prefix="s"), 0)).get_trace()
    assert scoped["s/x"]["cond_indep_stack"][0].name == "s/N" and "s/N" in scoped


def test_a_subsampled_plate_entered_twice_keeps_its_indices():
    def model():
        outer = effppl.plate("outer", 20, subsample_size=10)
        with outer:
            x = effppl.sample("x", dist.Normal())
        with outer:
            y = effppl.sample("y", dist.Normal())
        return outer.indices, x, y
    tr = handlers.trace(handlers.seed(model, 0)).get_trace()
    assert tr["x"]["value"].shape == tr["y"]["value"].shape == (10,)
    assert tr["outer"]["value"].shape == (10,)


def test_calling_a_handler_built_for_a_block_says_to_wrap_a_model():
    with pytest.raises(TypeError, match="wrap a model"):
        handlers.seed(rng_seed=0)()


@pytest.mark.parametrize("config, expected", [
    ({"hide": ["y"]}, {"x", "n", "z"}),
    ({"hide": ["n"]}, {"x", "y", "z"}),
    ({"expose": ["x", "z"]}, {"x", "z"}),
    ({"expose_types": ["sample"]}, {"x", "y", "z"}),
])
def test_block_hides_plate_entries_like_numpyro(config, expected):
    def fn(sample, plate):
        x = sample("x", dist.Normal())
        y = sample("y", dist.Normal(x))
        with plate("n", 4):
            sample("z", dist.Normal(y))

    ours = handlers.trace(handlers.block(handlers.seed(
        lambda: fn(effppl.sample, effppl.plate), 0), **config)).get_trace()
    theirs = nh.trace(nh.block(nh.seed(lambda: fn(numpyro.sample, numpyro.plate), 0),
                               **config)).get_trace()
    assert set(ours) == set(theirs) == expected


def test_lift_and_param_in_eager_blocks_like_numpyro():
    def program(h, param):
        with h.trace() as tr, h.seed(rng_seed=0), h.lift(prior={"mu": dist.Normal()}):
            param("mu", 0.0)
            param("s", 1.0)
        return tr
    ours, theirs = program(handlers, effppl.param), program(nh, numpyro.param)
    assert {k: v["type"] for k, v in ours.items()} == {k: v["type"] for k, v in theirs.items()} \
        == {"mu": "sample", "s": "param"}
    _close(ours["mu"]["value"], theirs["mu"]["value"])
