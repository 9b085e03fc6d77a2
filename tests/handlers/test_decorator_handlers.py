"""Handlers built with their arguments and no model, then called on a model or used as a
decorator (NumPyro's `@handlers.scale(scale=2.0)`, `handlers.seed(rng_seed=0)(model)`): each
gives what the handler wrapping the model directly gives, and NumPyro's value where both draw
the same."""

import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro import handlers as nh

import effppl
from effppl import distributions as dist
from effppl import handlers
from effppl.infer.reparam import LocScaleReparam


def _close(a, b, tol=1e-10):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


Y = np.array([0.3, -0.2])


def model(y=Y):
    z = effppl.sample("z", dist.Bernoulli(0.4), infer={"enumerate": "parallel"})
    x = effppl.sample("x", dist.Normal(z * 1.0, 1.0))
    with effppl.plate("data", 2):
        effppl.sample("y", dist.Normal(x, 1.0), obs=y)
    return x


# handler name -> (its arguments without a model, a wrapper giving the rest the trace needs)
CASES = {
    "seed": (dict(rng_seed=3), lambda m: m),
    "substitute": (dict(data={"x": 0.7, "z": 1}), lambda m: m),
    "condition": (dict(data={"x": 0.7, "z": 1}), lambda m: m),
    "do": (dict(data={"x": 0.7}), lambda m: handlers.seed(m, 1)),
    "block": (dict(hide=["x"]), lambda m: handlers.seed(m, 1)),
    "mask": (dict(mask=False), lambda m: handlers.seed(m, 1)),
    "scale": (dict(scale=3.0), lambda m: handlers.seed(m, 1)),
    "scope": (dict(prefix="a"), lambda m: handlers.seed(m, 1)),
    "uncondition": ({}, lambda m: handlers.seed(m, 1)),
    "reparam": (dict(config={"x": LocScaleReparam(0)}), lambda m: handlers.seed(m, 1)),
    "lift": (dict(prior={}), lambda m: handlers.seed(m, 1)),
    "infer_config": (dict(config_fn=lambda msg: {"foo": 1}), lambda m: handlers.seed(m, 1)),
    "replay": (None, lambda m: m),
}


def _trace(m):
    return {name: (site["type"], np.asarray(site["value"]), site.get("scale"))
            for name, site in handlers.trace(m).get_trace().items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_handler_built_without_a_model_wraps_the_model_it_is_called_with(name):
    kwargs, outer = CASES[name]
    if name == "replay":
        kwargs = dict(trace=handlers.trace(handlers.seed(model, 5)).get_trace())
    handler = getattr(handlers, name)
    decorated = handler(**kwargs)(model)
    wrapped = handler(model, **kwargs)
    ours, direct = _trace(outer(decorated)), _trace(outer(wrapped))
    assert ours.keys() == direct.keys() and len(ours) >= 3
    for site in ours:
        assert ours[site][0] == direct[site][0]
        _close(ours[site][1], direct[site][1])
        _close(1.0 if ours[site][2] is None else ours[site][2],
               1.0 if direct[site][2] is None else direct[site][2])


def test_decorator_handlers_stack_as_numpyros():
    def make(sample, h):
        @h.seed(rng_seed=0)
        @h.scale(scale=2.5)
        def m():
            return sample("x", dist.Normal(0.0, 1.0))
        return m
    ours = handlers.trace(make(effppl.sample, handlers)).get_trace()
    theirs = nh.trace(make(numpyro.sample, nh)).get_trace()
    _close(ours["x"]["value"], theirs["x"]["value"])  # same key, same draw
    assert float(ours["x"]["scale"]) == float(theirs["x"]["scale"]) == 2.5
    # trace() built without a model too
    again = handlers.trace()(make(effppl.sample, handlers)).get_trace()
    _close(again["x"]["value"], ours["x"]["value"])


def test_enum_and_infer_discrete_built_without_a_model():
    def mixture(y):
        z = effppl.sample("z", dist.Bernoulli(0.3), infer={"enumerate": "parallel"})
        effppl.sample("y", dist.Normal(jnp.where(z, 2.0, 0.0), 1.0), obs=y)
    lp, _ = effppl.log_density(handlers.enum(first_available_dim=-1)(mixture), (0.5,), {}, {})
    _close(lp, effppl.log_density(handlers.enum(mixture, -1), (0.5,), {}, {})[0])
    drawn = handlers.infer_discrete(temperature=0)(mixture)
    assert int(handlers.trace(drawn).get_trace(2.5)["z"]["value"]) == 1


def test_calling_a_handler_built_without_a_model_with_no_model_raises():
    with pytest.raises(TypeError, match="expected one callable model"):
        handlers.scale(scale=2.0)(jnp.ones(2))
    with pytest.raises(TypeError, match="expected one callable model"):
        handlers.enum()(1, 2)
