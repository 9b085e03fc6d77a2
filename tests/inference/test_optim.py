"""effppl.optim: NumPyro's optimisers on optax, checked step by step against NumPyro's own."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.optim
import optax
import pytest

import effppl
from effppl import optim
from effppl.infer import SVI, Trace_ELBO
from effppl.infer.autoguide import AutoDelta

from .test_svi import _data, _posterior, guide, model


def _schedule(i):
    return 0.1 / (1.0 + i)


CASES = [("Adam", (0.1,), {}), ("Adam", (_schedule,), {"b1": 0.8}),
         ("ClippedAdam", (0.1,), {"clip_norm": 0.5}), ("SGD", (0.1,), {}),
         ("SGD", (_schedule,), {}), ("Momentum", (0.1, 0.9), {}), ("Adagrad", (0.1,), {}),
         ("Adagrad", (0.1, 0.5), {}), ("RMSProp", (0.1,), {"gamma": 0.8}),
         ("RMSPropMomentum", (0.05,), {"momentum": 0.7}), ("SM3", (0.1,), {})]


@pytest.mark.parametrize("name, args, kwargs", CASES)
def test_steps_equal_numpyros(name, args, kwargs):
    ours, theirs = getattr(optim, name)(*args, **kwargs), getattr(numpyro.optim, name)(*args, **kwargs)
    params = {"a": jnp.array([1.0, -2.0, 0.5]), "b": jnp.array([[0.3, 0.0], [2.0, -1.0]])}
    s_ours, s_theirs = ours.init(params), theirs.init(params)
    rng = np.random.RandomState(0)
    for _ in range(6):  # gradients of every sign and size, some zero, some clipped
        g = {k: jnp.asarray(rng.normal(0, 2, v.shape) * (rng.rand(*v.shape) > 0.2))
             for k, v in params.items()}
        s_ours, s_theirs = ours.update(g, s_ours), theirs.update(g, s_theirs)
        for k in params:
            np.testing.assert_allclose(ours.get_params(s_ours)[k], theirs.get_params(s_theirs)[k],
                                       rtol=1e-6, atol=1e-9)
    assert int(s_ours[0]) == int(s_theirs[0]) == 6


def test_sm3_on_scalar_params_steps_as_numpyros():
    """optax's SM3 indexes a param's axes (an IndexError on a 0-d param); ours sees a scalar as a
    `(1,)` array and steps as NumPyro's SM3, which takes scalars."""
    ours, theirs = optim.SM3(0.1), numpyro.optim.SM3(0.1)
    params = {"w": jnp.array(0.7), "v": jnp.array([1.0, -2.0])}
    s_ours, s_theirs = ours.init(params), theirs.init(params)
    rng = np.random.RandomState(1)
    for _ in range(5):
        g = {k: jnp.asarray(rng.normal(0, 2, jnp.shape(v))) for k, v in params.items()}
        s_ours, s_theirs = ours.update(g, s_ours), theirs.update(g, s_theirs)
    for k in params:
        got, want = ours.get_params(s_ours)[k], theirs.get_params(s_theirs)[k]
        assert got.shape == params[k].shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def test_eval_and_stable_update_skips_a_nonfinite_step():
    opt = optim.Adam(0.1)
    state = opt.init(jnp.array(1.0))
    (out, aux), new = opt.eval_and_update(lambda x: (x**2, x), state)
    assert float(out) == 1.0 and float(aux) == 1.0
    np.testing.assert_allclose(opt.get_params(new), 0.9, rtol=1e-6)  # Adam's first step: -lr
    (out, _), same = opt.eval_and_stable_update(lambda x: (jnp.log(-x), None), new)
    assert np.isnan(out) and float(opt.get_params(same)) == float(opt.get_params(new))
    assert int(same[0]) == 1
    (_, _), fwd = opt.eval_and_update(lambda x: (x**2, None), state, forward_mode_differentiation=True)
    np.testing.assert_allclose(opt.get_params(fwd), 0.9, rtol=1e-6)


def test_equal_arguments_give_equal_optimisers():
    assert optim.Adam(0.1) == optim.Adam(0.1) and hash(optim.Adam(0.1)) == hash(optim.Adam(0.1))
    assert optim.Adam(0.1) != optim.Adam(0.2) and optim.Adam(0.1) != optim.SGD(0.1)
    step = jnp.array(0.1)  # unhashable: compared by identity
    assert optim.SGD(step) != optim.SGD(step)


@pytest.mark.parametrize("make", [lambda: effppl.optim.Adam(0.05),
                                  lambda: optim.optax_to_numpyro(optax.adam(0.05))])
def test_svi_with_effppl_optim_equals_numpyro_optim(make):
    y = _data()
    runs = [SVI(model, guide, opt, Trace_ELBO()).run(jax.random.PRNGKey(0), 50, y,
                                                     progress_bar=False)
            for opt in (make(), numpyro.optim.Adam(0.05))]
    for name in ("loc", "scale"):
        np.testing.assert_allclose(runs[0].params[name], runs[1].params[name], rtol=1e-6)
    params = runs[0].state.optim_state[1][0]  # NumPyro's state layout: (step, (params, ...))
    assert int(runs[0].state.optim_state[0]) == 50 and set(params) == {"loc", "scale"}


def test_svi_passes_the_loss_to_a_transformation_that_takes_it():
    y = _data()
    plateau = optax.chain(optax.adam(0.05), optax.contrib.reduce_on_plateau(patience=2))
    result = SVI(model, guide, optim.optax_to_numpyro(plateau), Trace_ELBO()).run(
        jax.random.PRNGKey(0), 100, y, progress_bar=False)
    scale = result.state.optim_state[1][1][1].scale  # reduce_on_plateau's learning-rate factor
    assert float(scale) < 1.0  # the noisy loss plateaus: the factor was lowered
    assert np.all(np.isfinite(result.losses))


@pytest.mark.slow
@pytest.mark.parametrize("opt", [optim.Minimize(), numpyro.optim.Minimize()])
def test_minimize_finds_the_map_in_one_step(opt):
    y = _data()
    delta = AutoDelta(model)
    svi = SVI(model, delta, opt, Trace_ELBO())
    state, loss = svi.update(svi.init(jax.random.PRNGKey(0), y), y)
    mean, _ = _posterior(y)  # Normal-Normal: the MAP is the posterior mean
    np.testing.assert_allclose(svi.get_params(state)["mu_auto_loc"], mean, rtol=1e-5)
    np.testing.assert_allclose(loss, svi.evaluate(state, y), rtol=1e-6)


def test_svi_takes_array_keyword_arguments_at_construction_as_numpyro():
    # NumPyro's `SVI(model, guide, optim, loss, y=y)`: the arrays are arguments of the compiled
    # update, so new arrays of the same shapes compile nothing and give the same fit
    y = _data()
    given = SVI(model, guide, optim.Adam(0.05), Trace_ELBO(), y=y).run(
        jax.random.PRNGKey(0), 50, progress_bar=False)
    passed = SVI(model, guide, optim.Adam(0.05), Trace_ELBO()).run(
        jax.random.PRNGKey(0), 50, y, progress_bar=False)
    for name in ("loc", "scale"):
        np.testing.assert_allclose(given.params[name], passed.params[name], rtol=1e-10)
    other = SVI(model, guide, optim.Adam(0.05), Trace_ELBO(), y=y + 5.0).run(
        jax.random.PRNGKey(0), 50, progress_bar=False)
    assert float(other.params["loc"]) > float(given.params["loc"]) + 0.5  # the new data is used


@pytest.mark.parametrize("make, argument", [
    (lambda: optim.Adam(None), "step_size"), (lambda: optim.Adam("a"), "step_size"),
    (lambda: optim.Adam(True), "step_size"), (lambda: optim.Adam(jnp.ones(3)), "step_size"),
    (lambda: optim.Momentum(0.1, "x"), "mass"), (lambda: optim.RMSProp(0.1, gamma=None), "gamma"),
    (lambda: optim.ClippedAdam(0.1, clip_norm="x"), "clip_norm"),
    (lambda: optim.ClippedAdam(0.05, clip_norm=jnp.ones(2)), "clip_norm")])
def test_bad_optimiser_argument_is_an_error_naming_it(make, argument):
    match = rf"\({argument}=\.\.\.\)` expected a real"
    with pytest.raises(effppl.infer.OptimizerError, match=match):
        make()


def test_optimiser_class_or_non_transformation_is_an_error_and_odd_step_sizes_warn():
    with pytest.raises(effppl.infer.OptimizerError, match="got the class Adam: create one"):
        SVI(model, guide, optim.Adam, Trace_ELBO())
    with pytest.raises(effppl.infer.OptimizerError, match="optax_to_numpyro.*got str"):
        optim.optax_to_numpyro("x")
    with pytest.warns(RuntimeWarning, match="step_size=nan.*non-finite"):
        optim.Adam(float("nan"))
    with pytest.warns(RuntimeWarning, match="step_size=-1.0.*climbs the loss"):
        optim.SGD(-1.0)
    # numbers of every kind, 0-d arrays and schedules are fine, as in NumPyro
    for step_size in (1, 0.1, np.float32(0.1), jnp.asarray(0.1), _schedule):
        sgd = optim.SGD(step_size)
        state = sgd.update({"x": jnp.ones(2)}, sgd.init({"x": jnp.zeros(2)}))
        expected = 1.0 if step_size == 1 else 0.1
        np.testing.assert_allclose(sgd.get_params(state)["x"], -np.full(2, expected), rtol=1e-6)
