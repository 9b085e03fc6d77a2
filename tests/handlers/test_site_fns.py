"""The message the user's site functions see (`substitute_fn`, `condition_fn`, `hide_fn`), against
NumPyro's on the same program, and the error when such a function needs a traced value."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints

import effppl
from effppl import SiteFunctionError, handlers


def _model(ppl):
    def model():
        a = ppl.param("a", jnp.array([1.0, 2.0]), constraint=constraints.positive)
        w = ppl.param("w", lambda key: jax.random.normal(key, (3,)))
        x = ppl.sample("x", dist.Normal(0.0, 1.0))
        y = ppl.sample("y", dist.Normal(x, 1.0), obs=0.5)
        return a, w, x, y
    return model


def _both(run):
    """`run(primitives, handlers)` for effppl and for NumPyro."""
    return run(effppl, handlers), run(numpyro, numpyro.handlers)


def test_param_message_has_no_value_and_init_value_in_args_as_numpyro():
    def run(ppl, h):
        seen = {}

        def look(msg):
            if msg["type"] == "param":
                seen[msg["name"]] = (msg["value"] is None, len(msg["args"]),
                                     msg["kwargs"].get("constraint", constraints.real))
            return None
        h.trace(h.substitute(h.seed(_model(ppl), 0), substitute_fn=look)).get_trace()
        return seen

    ours, theirs = _both(run)
    assert ours.keys() == theirs.keys() == {"a", "w"}
    for name in ours:
        assert ours[name][:2] == theirs[name][:2]
        assert type(ours[name][2]) is type(theirs[name][2])
    assert ours["a"][:2] == (True, 1)  # value None, args == (init_value,)
    assert ours["w"][:2] == (True, 0)  # an init function: no args until it runs


def test_substitute_fn_testing_value_is_none_substitutes_params_as_numpyro():
    def fill(msg):  # a NumPyro idiom: give a value only where no handler gave one
        if msg["type"] == "param" and msg["value"] is None and msg["args"]:
            return 3.0 * msg["args"][0]
        return None

    def run(ppl, h):
        inner = h.substitute(h.seed(_model(ppl), 1), data={"w": jnp.ones(3)})
        tr = h.trace(h.substitute(inner, substitute_fn=fill)).get_trace()
        return {name: np.asarray(tr[name]["value"]) for name in ("a", "w")}

    ours, theirs = _both(run)
    np.testing.assert_allclose(ours["a"], [3.0, 6.0])
    np.testing.assert_allclose(ours["a"], theirs["a"])
    np.testing.assert_allclose(ours["w"], theirs["w"])  # the inner value is kept: 1, 1, 1
    np.testing.assert_allclose(ours["w"], 1.0)


def test_substitute_fn_sees_the_key_of_an_inner_seed_as_numpyro():
    def draw(msg):  # uses the site's key: the same bits as NumPyro's give the same draw
        if msg["type"] == "sample" and not msg["is_observed"]:
            key = msg["kwargs"]["rng_key"]
            if key is None:
                return None
            assert jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)  # typed, as NumPyro's
            return 10.0 + jax.random.uniform(key)
        return None

    def run(ppl, h, seed_inside):
        model = _model(ppl)
        fn = h.substitute(h.seed(model, 7), substitute_fn=draw) if seed_inside else \
            h.seed(h.substitute(model, substitute_fn=draw), 7)
        return float(h.trace(fn).get_trace()["x"]["value"])

    inside = _both(lambda ppl, h: run(ppl, h, True))
    np.testing.assert_allclose(inside[0], inside[1], rtol=1e-6)
    assert 10.0 <= inside[0] <= 11.0
    outside = _both(lambda ppl, h: run(ppl, h, False))  # no key yet: the site is drawn later
    assert outside[0] < 10.0 and outside[1] < 10.0


def test_hide_fn_sees_param_message_as_numpyro():
    def hide(msg):
        return msg["type"] == "param" and msg["value"] is None and len(msg["args"]) == 1

    def run(ppl, h):
        return set(h.trace(h.block(h.seed(_model(ppl), 0), hide_fn=hide)).get_trace())

    ours, theirs = _both(run)
    assert ours == theirs == {"w", "x", "y"}


def test_condition_fn_needing_a_python_value_raises_naming_function_and_site():
    def at_least_one(msg):  # fine in NumPyro, where values are concrete
        if msg["name"] == "x":
            return None
        return max(float(msg["value"]), 1.0) if msg["value"] is not None else None

    model = _model(numpyro)
    tr = numpyro.handlers.trace(numpyro.handlers.seed(
        numpyro.handlers.condition(model, condition_fn=at_least_one), 0)).get_trace()
    assert float(tr["y"]["value"]) == 1.0
    with pytest.raises(SiteFunctionError, match=r"`at_least_one`.*sample site `y`.*traced") as err:
        handlers.trace(handlers.seed(handlers.condition(_model(effppl), condition_fn=at_least_one),
                                     0)).get_trace()
    assert isinstance(err.value, TypeError)
    assert isinstance(err.value.__cause__, jax.errors.ConcretizationTypeError)
    assert "condition_fn=" in str(err.value)


def test_hide_fn_branching_on_a_traced_value_raises_naming_function_and_site():
    def positive(msg):
        return msg["value"] is not None and bool(msg["value"] > 0)

    with pytest.raises(SiteFunctionError, match=r"block\(fn, hide_fn=...\).*`positive`.*`y`"):
        handlers.trace(handlers.block(handlers.seed(_model(effppl), 0), hide_fn=positive)
                       ).get_trace()


def test_other_errors_of_a_site_function_are_unchanged():
    def broken(msg):
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        handlers.trace(handlers.substitute(handlers.seed(_model(effppl), 0),
                                           substitute_fn=broken)).get_trace()
