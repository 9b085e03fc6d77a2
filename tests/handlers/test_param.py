"""`param` sites: what seed/substitute/trace/block do with them, against NumPyro."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints

import effppl
from effppl import handlers


def _model(param, sample, x):
    a = param("a", jnp.ones(3), constraint=constraints.positive)
    b = param("b", jnp.zeros(()))
    return sample("y", dist.Normal(jnp.sum(a * x) + b, 1.0), obs=2.0)


def _both(fn, *args):
    """`fn(primitives, handlers)` for effppl and for NumPyro."""
    return (fn(effppl, handlers), fn(numpyro, numpyro.handlers))


def test_trace_records_param_value_and_constraint_like_numpyro():
    x = jnp.arange(3.0)

    def run(ppl, h):
        return h.trace(h.seed(lambda: _model(ppl.param, ppl.sample, x), 0)).get_trace()

    ours, theirs = _both(run)
    for name in ("a", "b"):
        assert ours[name]["type"] == theirs[name]["type"] == "param"
        np.testing.assert_allclose(ours[name]["value"], theirs[name]["value"])
        theirs_c = theirs[name]["kwargs"].get("constraint", constraints.real)  # NumPyro omits the default
        assert type(ours[name]["kwargs"]["constraint"]) is type(theirs_c)


def test_substitute_sets_param_and_log_density_uses_it():
    x = jnp.arange(3.0)
    params = {"a": jnp.array([0.5, 1.0, 2.0]), "b": jnp.array(0.3)}

    def run(ppl, h):
        model = h.substitute(lambda: _model(ppl.param, ppl.sample, x), data=params)
        return h.trace(model).get_trace()

    ours, theirs = _both(run)
    np.testing.assert_allclose(ours["a"]["value"], params["a"])
    lp = effppl.log_density(lambda: _model(effppl.param, effppl.sample, x), (), {}, params)[0]
    expected = dist.Normal(jnp.sum(params["a"] * x) + 0.3, 1.0).log_prob(2.0)
    np.testing.assert_allclose(lp, expected, rtol=1e-6)
    np.testing.assert_allclose(ours["y"]["log_prob"], theirs["y"]["fn"].log_prob(2.0), rtol=1e-6)


def test_param_init_function_gets_a_key_from_seed():
    def model():
        return effppl.param("w", lambda key: jax.random.normal(key, (4,)))

    w0 = handlers.seed(model, 0)()
    w1 = handlers.seed(model, 1)()
    assert w0.shape == (4,) and not np.allclose(w0, w1)
    np.testing.assert_allclose(handlers.seed(model, 0)(), w0)
    with pytest.raises(effppl.SiteError, match="`w`"):
        handlers.trace(model).get_trace()


def test_param_in_scan_reads_one_value():
    def model(xs):
        def step(c, x):
            s = effppl.param("s", 2.0)
            return c + s * x, None
        return jax.lax.scan(step, 0.0, xs)[0]

    xs = jnp.arange(5.0)
    tr = handlers.trace(handlers.substitute(model, {"s": 3.0})).get_trace(xs)
    assert tr["s"]["type"] == "param" and tr["s"]["value"].shape == ()
    np.testing.assert_allclose(handlers.substitute(model, {"s": 3.0})(xs), 30.0)


def test_block_hides_params():
    model = handlers.block(lambda: _model(effppl.param, effppl.sample, jnp.ones(3)), hide=["a"])
    tr = handlers.trace(model).get_trace()
    assert "a" not in tr and tr["b"]["type"] == "param"


def test_param_errors_name_the_site():
    with pytest.raises(effppl.SiteError, match="`p`|'p'"):
        handlers.seed(lambda: effppl.param("p"), 0)()
    with pytest.raises(effppl.SiteError, match="param `a`"):
        handlers.substitute(lambda: effppl.param("a", jnp.ones(2)), {"a": jnp.ones(3)})()


@pytest.mark.parametrize("bad", ["abc", object()], ids=["str", "object"])
def test_a_param_value_that_is_no_array_is_an_error_naming_the_param(bad):
    """NumPyro's substitute passes the value on, and JAX's error later names neither."""
    def model():
        return effppl.param("w", jnp.zeros(2)) + 1.0

    kind = "str" if isinstance(bad, str) else "object of type object"
    with pytest.raises(effppl.SiteError, match=rf"param `w` must be .*, but is an? {kind}"):
        handlers.substitute(model, data={"w": bad})()
    with pytest.raises(effppl.SiteError, match=rf"returned an? {kind} .*for param `w`"):
        handlers.substitute(model, substitute_fn=lambda msg: bad)()
    with pytest.raises(TypeError):
        numpyro.handlers.substitute(lambda: numpyro.param("w", jnp.zeros(2)) + 1.0,
                                    data={"w": bad})()
