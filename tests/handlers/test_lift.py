"""`lift`: param sites become sample sites drawn from a prior, against NumPyro's `lift`."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints

import effppl
from effppl import handlers
from effppl.handlers import LiftPriorError


def _model(ppl):
    z = ppl.sample("z", dist.Normal(0.0, 1.0))
    a = ppl.param("a", jnp.ones(3), constraint=constraints.positive)
    b = ppl.param("b", jnp.zeros(3))
    return ppl.sample("y", dist.Normal(jnp.sum(a) * z + jnp.sum(b), 1.0), obs=2.0)


def _traces(prior):
    """The trace of `_model` lifted with `prior` under `seed(0)`: effppl's and NumPyro's."""
    ours = handlers.trace(handlers.seed(handlers.lift(lambda: _model(effppl), prior), 0))
    theirs = numpyro.handlers.trace(numpyro.handlers.seed(
        numpyro.handlers.lift(lambda: _model(numpyro), prior), 0))
    return ours.get_trace(), theirs.get_trace()


def _assert_same_sites(ours, theirs):
    assert list(ours) == list(theirs)
    for name in theirs:
        assert ours[name]["type"] == theirs[name]["type"], name
        np.testing.assert_allclose(ours[name]["value"], theirs[name]["value"], rtol=1e-12)


@pytest.mark.parametrize("prior", [
    {"a": dist.Gamma(2.0, 1.0).expand([3]).to_event(1)},
    {"a": dist.Gamma(2.0, 1.0).expand([3]).to_event(1), "b": dist.Normal(0.0, 2.0).expand([3])},
    {"b": dist.Normal(0.0, 2.0).expand([3]).to_event(1), "not_a_site": dist.Normal()},
    dist.Exponential(3.0).expand([3]).to_event(1),
], ids=["dict_one", "dict_all", "dict_extra_name", "distribution"])
def test_lift_draws_what_numpyro_draws(prior):
    """Same seed, same sites, types and values as NumPyro's: lifted params are latent samples
    (the prior's shape), the others stay params with their initial value."""
    ours, theirs = _traces(prior)
    _assert_same_sites(ours, theirs)
    for name in ("a", "b"):
        fn = prior.get(name) if isinstance(prior, dict) else prior
        if fn is None:
            assert ours[name]["type"] == "param"
        else:
            assert ours[name]["type"] == "sample" and not ours[name]["is_observed"]
            np.testing.assert_allclose(ours[name]["log_prob"], fn.log_prob(ours[name]["value"]))


def test_lifted_param_enters_the_log_density():
    prior = {"b": dist.Normal(0.0, 2.0).expand([3]).to_event(1)}
    model = handlers.lift(lambda: _model(effppl), prior)
    z, b = 0.3, jnp.array([-0.7, 0.1, 0.2])
    lp, _ = effppl.log_density(model, (), {}, {"z": z, "b": b})
    expected = (dist.Normal(0.0, 1.0).log_prob(z) + dist.Normal(0.0, 2.0).log_prob(b).sum()
                + dist.Normal(3.0 * z - 0.4, 1.0).log_prob(2.0))
    np.testing.assert_allclose(lp, expected, rtol=1e-12)


_NOT_DISTRIBUTIONS = [
    (2.0, "float"),
    (jnp.array(2.0), "ArrayImpl"),
    (lambda *args, **kwargs: 2.0, "function"),
    (dist.Normal, "the class Normal"),
    (None, "NoneType"),
]


@pytest.mark.parametrize("entry, kind", _NOT_DISTRIBUTIONS, ids=[k for _, k in _NOT_DISTRIBUTIONS])
def test_a_dict_entry_that_is_no_distribution_is_an_error_naming_the_param(entry, kind):
    """NumPyro keeps such a param silently (checked here); effppl says which entry is wrong."""
    theirs = numpyro.handlers.trace(numpyro.handlers.seed(
        numpyro.handlers.lift(lambda: _model(numpyro), {"a": entry}), 0)).get_trace()
    assert theirs["a"]["type"] == "param"
    with pytest.raises(LiftPriorError, match=rf"param site `a`, but got {kind}"):
        handlers.lift(lambda: _model(effppl), prior={"a": entry, "b": dist.Normal()})
    with pytest.raises(TypeError, match="param site `a`"):  # also as a `with` block
        handlers.lift(prior={"a": entry})


@pytest.mark.parametrize("prior, kind", [*_NOT_DISTRIBUTIONS, ([dist.Normal()], "list")],
                         ids=[k for _, k in _NOT_DISTRIBUTIONS] + ["list"])
def test_a_prior_that_is_no_distribution_nor_dict_is_an_error(prior, kind):
    theirs = numpyro.handlers.trace(numpyro.handlers.seed(
        numpyro.handlers.lift(lambda: _model(numpyro), prior), 0)).get_trace()
    assert theirs["a"]["type"] == theirs["b"]["type"] == "param"
    with pytest.raises(LiftPriorError, match=rf"or a dict param name -> Distribution, but got "
                                             rf"{kind}"):
        handlers.lift(lambda: _model(effppl), prior=prior)


def test_a_prior_of_another_shape_than_the_param_is_an_error():
    """NumPyro returns the prior's draw, shape () here, for a param of shape (3,); effppl's
    lifted param keeps the param's shape and says how to give a prior of that shape."""
    a = numpyro.handlers.seed(numpyro.handlers.lift(
        lambda: numpyro.param("a", jnp.ones(3)), dist.Normal()), 0)()
    assert a.shape == ()
    with pytest.raises(effppl.SiteError, match=r"param site `a` draws values of shape \(\), but "
                                               r"the param has shape \(3,\).*expand\(\(3,\)\)"):
        handlers.seed(handlers.lift(lambda: effppl.param("a", jnp.ones(3)), dist.Normal()), 0)()


def test_a_lifted_param_read_twice_is_an_error():
    """NumPyro shares one draw between the reads; effppl refuses rather than draw twice."""
    def model(ppl):
        return ppl.param("a", 0.5), ppl.param("a", 0.5)

    prior = {"a": dist.Normal()}
    first, second = numpyro.handlers.seed(numpyro.handlers.lift(lambda: model(numpyro), prior), 0)()
    assert first == second
    with pytest.raises(effppl.SiteError, match="param site `a` is read twice"):
        handlers.seed(handlers.lift(lambda: model(effppl), prior), 0)()
    both = handlers.seed(handlers.lift(lambda: model(effppl), {"b": dist.Normal()}), 0)()
    np.testing.assert_allclose(both, (0.5, 0.5))  # not lifted: a param may be read often


def test_a_lifted_param_read_in_a_loop_is_an_error():
    def model(xs):
        def step(c, x):
            return c + effppl.param("s", 2.0) * x, None
        return jax.lax.scan(step, 0.0, xs)[0]

    xs = jnp.arange(3.0)
    with pytest.raises(effppl.SiteError, match="param site `s` .* is read inside a loop"):
        handlers.seed(handlers.lift(model, prior={"s": dist.Normal()}), 0)(xs)

    def scoped(xs):  # the same check for a `with lift(...)` block inside a model
        with handlers.lift(prior=dist.Normal()):
            return model(xs)

    with pytest.raises(effppl.SiteError, match="param site `s` .* is read inside a loop"):
        handlers.seed(scoped, 0)(xs)
    np.testing.assert_allclose(handlers.seed(model, 0)(xs), 6.0)
