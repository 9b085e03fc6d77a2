"""`effppl.mutable` against NumPyro's `numpyro.mutable`: the state SVI keeps from step to step
(changed in place by the model), with the same params, losses and state as NumPyro's SVI."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import optax
import pytest

import effppl
from effppl import distributions as dist
from effppl.handlers import seed, substitute, trace
from effppl.infer import SVI, Trace_ELBO

from .test_svi import _normal_guide  # the same Gaussian guide of mu


def _model(ppl):
    def model(y):
        mutable = effppl.mutable if ppl is effppl else numpyro.primitives.mutable
        stats = mutable("stats", {"mean": jnp.zeros(()), "count": jnp.zeros(())})
        mu = ppl.sample("mu", dist.Normal(0.0, 10.0))
        with ppl.plate("n", y.shape[0]):
            ppl.sample("y", dist.Normal(mu, 1.0), obs=y)
        stats["mean"] = 0.9 * stats["mean"] + 0.1 * mu  # a running mean, changed in place
        stats["count"] = stats["count"] + 1.0
    return model


def _svi_runs(guide, y):
    """30 steps of SVI on `_model` with `guide(ppl)`, by effppl and by NumPyro, one key."""
    runs = []
    for ppl, svi_class in ((effppl, SVI), (numpyro, numpyro.infer.SVI)):
        loss = (Trace_ELBO if ppl is effppl else numpyro.infer.Trace_ELBO)()
        svi = svi_class(_model(ppl), guide(ppl), optax.adam(0.05), loss)
        runs.append(svi.run(jax.random.PRNGKey(0), 30, y, progress_bar=False))
    return runs


def test_svi_keeps_the_mutable_state_as_numpyro_does():
    y = jnp.asarray(np.random.RandomState(0).normal(2.0, 1.0, 20))
    ours, theirs = _svi_runs(_normal_guide, y)
    np.testing.assert_allclose(ours.losses, theirs.losses, rtol=1e-5)
    for name in ("loc", "scale"):
        np.testing.assert_allclose(ours.params[name], theirs.params[name], rtol=1e-5)
    assert set(ours.state.mutable_state) == {"stats"}
    for name in ("mean", "count"):
        np.testing.assert_allclose(ours.state.mutable_state["stats"][name],
                                   theirs.state.mutable_state["stats"][name], rtol=1e-5)
    # the init state ran the model once, and each of the 30 steps once more
    np.testing.assert_allclose(ours.state.mutable_state["stats"]["count"], 31.0)


def test_trace_records_the_value_the_model_leaves_and_substitute_sets_the_start():
    model = _model(effppl)
    y = jnp.ones(3)
    tr = trace(seed(model, 0)).get_trace(y)
    assert tr["stats"]["type"] == "mutable"
    np.testing.assert_allclose(tr["stats"]["value"]["mean"], 0.1 * tr["mu"]["value"], rtol=1e-6)
    start = {"stats": {"mean": jnp.array(5.0), "count": jnp.array(2.0)}, "mu": 1.0}
    tr = trace(substitute(model, data=start)).get_trace(y)
    np.testing.assert_allclose(tr["stats"]["value"]["mean"], 0.9 * 5.0 + 0.1 * 1.0, rtol=1e-6)
    np.testing.assert_allclose(tr["stats"]["value"]["count"], 3.0)
    # outside any handler, as in NumPyro: the initial value itself
    init = {"a": jnp.ones(2)}
    assert effppl.mutable("a", init) is init


def test_misuse_is_an_error_naming_the_site():
    def in_a_loop(y):
        def step(c, y_t):
            effppl.mutable("s", {"a": jnp.zeros(())})
            return c, None
        jax.lax.scan(step, 0.0, y)

    def reshaped():
        s = effppl.mutable("s", {"a": jnp.zeros(())})
        s["a"] = jnp.zeros(3)

    with pytest.raises(effppl.SiteError, match="mutable\\('s'\\) was called inside a loop"):
        trace(in_a_loop).get_trace(jnp.ones(2))
    with pytest.raises(effppl.SiteError, match="changed the mutable site `s`"):
        trace(reshaped).get_trace()
    with pytest.raises(effppl.SiteError, match="mutable site `s`.*keys and shapes"):
        trace(substitute(reshaped, data={"s": {"b": jnp.zeros(())}})).get_trace()


# -- `mutable(name)` with no init_value: NumPyro's placeholder --------------------------------

def _placeholder_model(ppl):
    """The model of `_model`, creating its state as NumPyro's `flax_module` does: `mutable(name)`
    is None until the state exists; then the caller creates it with `mutable(name, state)`."""
    def model(y):
        mutable = effppl.mutable if ppl is effppl else numpyro.primitives.mutable
        stats = mutable("stats")
        if stats is None:
            stats = mutable("stats", {"mean": jnp.zeros(()), "count": jnp.zeros(())})
        mu = ppl.sample("mu", dist.Normal(0.0, 10.0))
        with ppl.plate("n", y.shape[0]):
            ppl.sample("y", dist.Normal(mu, 1.0), obs=y)
        stats["mean"] = 0.9 * stats["mean"] + 0.1 * mu
        stats["count"] = stats["count"] + 1.0
    return model


def _close_state(ours, theirs):
    assert set(ours) == set(theirs) == {"mean", "count"}
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-12)


def test_a_placeholder_is_none_until_the_state_is_created_as_numpyro():
    y = jnp.ones(3)
    assert effppl.mutable("stats") is None and numpyro.primitives.mutable("stats") is None
    given = {"mu": jnp.array(1.5)}
    ours = trace(substitute(_placeholder_model(effppl), data=given)).get_trace(y)
    theirs = numpyro.handlers.trace(numpyro.handlers.substitute(
        _placeholder_model(numpyro), data=given)).get_trace(y)
    assert ours["stats"]["type"] == theirs["stats"]["type"] == "mutable"
    _close_state(ours["stats"]["value"], theirs["stats"]["value"])
    np.testing.assert_allclose(ours["stats"]["value"]["mean"], 0.15, rtol=1e-12)
    # given a state (SVI's, from the previous step), the placeholder is that state
    given = {"mu": jnp.array(1.5), "stats": {"mean": jnp.array(5.0), "count": jnp.array(2.0)}}
    ours = trace(substitute(_placeholder_model(effppl), data=given)).get_trace(y)
    theirs = numpyro.handlers.trace(numpyro.handlers.substitute(
        _placeholder_model(numpyro), data=given)).get_trace(y)
    _close_state(ours["stats"]["value"], theirs["stats"]["value"])
    np.testing.assert_allclose(ours["stats"]["value"]["count"], 3.0)
    np.testing.assert_allclose(given["stats"]["count"], 2.0)  # the given state is not changed


def test_svi_keeps_a_state_created_behind_a_placeholder_as_numpyro_does():
    y = jnp.asarray(np.random.RandomState(1).normal(2.0, 1.0, 20))
    runs = []
    for ppl, svi_class in ((effppl, SVI), (numpyro, numpyro.infer.SVI)):
        loss = (Trace_ELBO if ppl is effppl else numpyro.infer.Trace_ELBO)()
        svi = svi_class(_placeholder_model(ppl), _normal_guide(ppl), optax.adam(0.05), loss)
        runs.append(svi.run(jax.random.PRNGKey(0), 30, y, progress_bar=False))
    ours, theirs = runs
    np.testing.assert_allclose(ours.losses, theirs.losses, rtol=1e-5)
    for name in ("loc", "scale"):
        np.testing.assert_allclose(ours.params[name], theirs.params[name], rtol=1e-5)
    assert set(ours.state.mutable_state) == set(theirs.state.mutable_state) == {"stats"}
    for name in ("mean", "count"):
        np.testing.assert_allclose(ours.state.mutable_state["stats"][name],
                                   theirs.state.mutable_state["stats"][name], rtol=1e-5)
    np.testing.assert_allclose(ours.state.mutable_state["stats"]["count"], 31.0)


def test_a_placeholder_never_created_records_no_site():
    # NumPyro records a mutable site whose value is None; effppl has no value to record
    def model(mutable):
        return lambda: mutable("stats")
    ours = trace(model(effppl.mutable)).get_trace()
    theirs = numpyro.handlers.trace(model(numpyro.primitives.mutable)).get_trace()
    assert "stats" not in ours
    assert theirs["stats"]["value"] is None
    assert seed(model(effppl.mutable), 0)() is None


def test_a_placeholder_in_a_loop_is_an_error_naming_the_site():
    def in_a_loop(y):
        def step(c, y_t):
            effppl.mutable("s")
            return c, None
        jax.lax.scan(step, 0.0, y)
    with pytest.raises(effppl.SiteError, match="mutable\\('s'\\) was called inside a loop"):
        trace(in_a_loop).get_trace(jnp.ones(2))


def _flax_like_model(ppl):
    """NumPyro's `flax_module` pattern: the state created behind the placeholder is registered
    with `mutable(name, state)`, whose result is not used; the caller changes its own dict."""
    def model(y):
        mutable = effppl.mutable if ppl is effppl else numpyro.primitives.mutable
        stats = mutable("stats")
        if stats is None:
            stats = {"mean": jnp.zeros(()), "count": jnp.zeros(())}
            mutable("stats", stats)  # NumPyro returns `stats` itself
        mu = ppl.sample("mu", dist.Normal(0.0, 10.0))
        with ppl.plate("n", y.shape[0]):
            ppl.sample("y", dist.Normal(mu, 1.0), obs=y)
        stats.update(mean=0.9 * stats["mean"] + 0.1 * mu, count=stats["count"] + 1.0)
    return model


def test_a_state_changed_by_its_creator_is_recorded_as_numpyro():
    y = jnp.ones(3)
    given = {"mu": jnp.array(1.5)}
    ours = trace(substitute(_flax_like_model(effppl), data=given)).get_trace(y)
    theirs = numpyro.handlers.trace(numpyro.handlers.substitute(
        _flax_like_model(numpyro), data=given)).get_trace(y)
    _close_state(ours["stats"]["value"], theirs["stats"]["value"])
    np.testing.assert_allclose(ours["stats"]["value"]["count"], 1.0)
    runs = []
    for ppl, svi_class in ((effppl, SVI), (numpyro, numpyro.infer.SVI)):
        loss = (Trace_ELBO if ppl is effppl else numpyro.infer.Trace_ELBO)()
        svi = svi_class(_flax_like_model(ppl), _normal_guide(ppl), optax.adam(0.05), loss)
        runs.append(svi.run(jax.random.PRNGKey(0), 10, y, progress_bar=False))
    ours, theirs = runs
    np.testing.assert_allclose(ours.losses, theirs.losses, rtol=1e-5)
    _close_state(ours.state.mutable_state["stats"], theirs.state.mutable_state["stats"])
    np.testing.assert_allclose(ours.state.mutable_state["stats"]["count"], 11.0)


@pytest.mark.parametrize("placeholder", [True, False])
def test_eager_blocks_give_and_record_a_mutable_site_as_numpyro(placeholder):
    nm = numpyro.primitives.mutable
    given = {"s": {"m": jnp.ones(2)}}
    runs = []
    for mutable, subs, tr in ((effppl.mutable, substitute, trace),
                              (nm, numpyro.handlers.substitute, numpyro.handlers.trace)):
        with subs(data=given), tr() as recorded:
            value = mutable("s") if placeholder else mutable("s", {"m": jnp.zeros(2)})
        runs.append((value, recorded))
    (ours, our_tr), (theirs, their_tr) = runs
    np.testing.assert_allclose(ours["m"], theirs["m"])
    np.testing.assert_allclose(ours["m"], 1.0)
    assert our_tr["s"]["type"] == their_tr["s"]["type"] == "mutable"
    np.testing.assert_allclose(our_tr["s"]["value"]["m"], their_tr["s"]["value"]["m"])
    # nothing given: the placeholder is None, and a value given by the caller is returned itself
    init = {"m": jnp.zeros(2)}
    with trace() as our_tr:
        assert effppl.mutable("s") is None
        assert effppl.mutable("s", init) is init
    with numpyro.handlers.trace() as their_tr:
        assert nm("s") is None
        assert nm("s", init) is init
    np.testing.assert_allclose(our_tr["s"]["value"]["m"], their_tr["s"]["value"]["m"])


def _none_leaf_guide(ppl):
    """NumPyro's `mutable(name, {"value": None})`: a pytree whose leaf the guide fills in place
    (NumPyro's test_svi.py::test_mutable_state), beside a sample site."""
    def guide(y):
        mutable = effppl.primitives.mutable if ppl is effppl else numpyro.primitives.mutable
        loc = ppl.param("loc", 0.0)
        p = mutable("loc1p", {"value": None})
        p["value"] = loc + 2
        ppl.sample("mu", dist.Normal(loc, 0.1))
    return guide


def test_a_none_leaf_placeholder_is_filled_and_kept_by_svi_as_numpyro():
    y = jnp.asarray(np.random.RandomState(0).normal(2.0, 1.0, 20))
    ours, theirs = _svi_runs(_none_leaf_guide, y)
    np.testing.assert_allclose(ours.params["loc"], theirs.params["loc"], rtol=1e-5)
    assert set(ours.state.mutable_state) == {"stats", "loc1p"}
    # the value at the params before the last step (NumPyro's), loc + 2
    np.testing.assert_allclose(ours.state.mutable_state["loc1p"]["value"],
                               theirs.state.mutable_state["loc1p"]["value"], rtol=1e-5)
    tr = trace(seed(_none_leaf_guide(effppl), 0)).get_trace(y)
    np.testing.assert_allclose(tr["loc1p"]["value"]["value"], 2.0)
    given = substitute(_none_leaf_guide(effppl), data={"loc1p": {"value": jnp.array(7.0)}})
    np.testing.assert_allclose(trace(seed(given, 0)).get_trace(y)["loc1p"]["value"]["value"], 2.0)
