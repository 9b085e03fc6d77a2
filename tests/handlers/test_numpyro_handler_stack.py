"""Where NumPyro's handlers reach each other through its handler stack, effppl gives the same
result: `uncondition` outside `seed` (the key comes from the inner `seed`, the observation is
kept as `infer["obs"]`), a `param` with no `init_value` whose value a `substitute` or `lift`
around gives, and a full plate taking the indices a `replay`ed trace recorded for it."""

import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from jax import random
from numpyro import handlers as nh

import effppl
from effppl import distributions as dist
from effppl import handlers


def _close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _three(sample):
    def model(obs_x=None, obs_y=None):
        x = sample("x", dist.Normal(0.0, 1.0), obs=obs_x)
        y = sample("y", dist.Normal(x, 1.0), obs=obs_y)
        return sample("z", dist.Normal(y, 1.0))
    return model


def test_uncondition_outside_seed_draws_numpyros_values():
    ours = handlers.trace(handlers.uncondition(handlers.seed(_three(effppl.sample), random.key(
        0)))).get_trace(obs_x=1.0, obs_y=2.0)
    theirs = nh.trace(nh.uncondition(nh.seed(_three(numpyro.sample), random.key(0)))).get_trace(
        obs_x=1.0, obs_y=2.0)
    for name in "xyz":
        _close(ours[name]["value"], theirs[name]["value"])  # the same keys, in the same order
        assert not ours[name]["is_observed"]
        assert ours[name]["infer"].get("was_observed", False) == \
            theirs[name]["infer"].get("was_observed", False)
    assert float(ours["x"]["infer"]["obs"]) == float(theirs["x"]["infer"]["obs"]) == 1.0
    assert float(ours["y"]["infer"]["obs"]) == 2.0 and "obs" not in ours["z"]["infer"]
    # seed outside uncondition keeps its stream: the observed sites take no key of it
    inside = handlers.trace(handlers.seed(handlers.uncondition(_three(effppl.sample)),
                                          random.key(0))).get_trace(obs_x=1.0, obs_y=2.0)
    np_inside = nh.trace(nh.seed(nh.uncondition(_three(numpyro.sample)), random.key(0))
                         ).get_trace(obs_x=1.0, obs_y=2.0)
    _close(inside["z"]["value"], np_inside["z"]["value"])


def test_param_without_init_value_takes_the_substituted_value():
    def model(param, substitute):
        def body():
            x = param("x", None)
            y = substitute(lambda: param("y", None) * param("x", None), {"y": x})()
            return x + y
        return body
    assert float(handlers.substitute(model(effppl.param, handlers.substitute),
                                     {"x": 3.0})()) == 12.0
    assert float(nh.substitute(model(numpyro.param, nh.substitute), {"x": 3.0})()) == 12.0
    with handlers.substitute(data={"w": jnp.ones((2, 3))}):
        assert effppl.param("w").shape == (2, 3)
    with pytest.raises(effppl.SiteError, match="expected an `init_value`"):
        handlers.seed(lambda: effppl.param("v"), 0)()


def test_param_without_init_value_under_lift_draws_from_the_prior():
    def model():
        return effppl.param("loc")
    with handlers.seed(rng_seed=1), handlers.lift(prior=dist.Normal(0, 1)):
        ours = model()
    with nh.seed(rng_seed=1), nh.lift(prior=dist.Normal(0, 1)):
        theirs = numpyro.param("loc")
    _close(ours, theirs)


def test_full_plate_takes_the_replayed_subsample_indices():
    data = jnp.arange(100.0)
    with handlers.trace() as guide_trace, handlers.seed(rng_seed=0):
        with effppl.plate("a", len(data), subsample_size=7):
            pass
    with nh.trace() as np_trace, nh.seed(rng_seed=0):
        with numpyro.plate("a", len(data), subsample_size=7):
            pass
    _close(guide_trace["a"]["value"], np_trace["a"]["value"])
    with handlers.seed(rng_seed=1), handlers.replay(trace=guide_trace):
        with effppl.plate("a", len(data)) as idx:
            x = effppl.subsample(data, event_dim=0)
    _close(idx, guide_trace["a"]["value"])
    _close(x, data[guide_trace["a"]["value"]])

    def model():  # and inside a model: its sites sit in the subsampled plate
        with effppl.plate("a", len(data)):
            return effppl.sample("z", dist.Normal(effppl.subsample(data, event_dim=0), 1.0))
    tr = handlers.trace(handlers.seed(handlers.replay(model, trace=guide_trace), 0)).get_trace()
    assert tr["z"]["value"].shape == (7,)
    _close(tr["a"]["value"], guide_trace["a"]["value"])
