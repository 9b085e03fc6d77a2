import jax
import jax.numpy as jnp
import numpy as np
import pytest

from effppl import distributions as dist
from effppl.infer import (
    MCMC,
    NUTS,
    InitializationError,
    init_to_feasible,
    init_to_mean,
    init_to_median,
    init_to_sample,
    init_to_uniform,
    init_to_value,
)

from . import _models as m

CHAINS = 3


def _initial_point(model, strategy, *data, key=0):
    """The unconstrained initial point per chain (a run with no warmup, stopped before sampling)."""
    mcmc = MCMC(NUTS(model, init_strategy=strategy), num_warmup=0, num_samples=1,
                num_chains=CHAINS, progress_bar=False)
    mcmc.warmup(jax.random.key(key), *data)
    return {k: np.asarray(v) for k, v in mcmc.post_warmup_state.position.items()}


def test_init_to_value_sets_given_sites_and_draws_the_rest():
    y = jnp.arange(5.0)
    point = _initial_point(m.scale_model, init_to_value(values={"sigma": 2.0, "mu": 0.5}), y)
    np.testing.assert_allclose(point["sigma"], np.log(2.0))  # unconstrained: log
    np.testing.assert_allclose(point["mu"], 0.5)
    point = _initial_point(m.scale_model, init_to_value(values={"sigma": 2.0}), y)
    np.testing.assert_allclose(point["sigma"], np.log(2.0))
    assert np.all(np.abs(point["mu"]) < 2.0) and len(np.unique(point["mu"])) == CHAINS


def test_init_to_uniform_respects_radius():
    point = _initial_point(m.scale_model, init_to_uniform(radius=0.25), jnp.arange(5.0))
    for value in point.values():
        assert np.all(np.abs(value) < 0.25)
    assert len(np.unique(point["mu"])) == CHAINS


def test_init_to_median_follows_dependencies():
    point = _initial_point(m.hierarchical, init_to_median(num_samples=31), jnp.asarray(3.0))
    assert np.all(np.abs(point["mu"] - 3.0) < 0.8)
    # theta's prior median is taken given mu's median, not given a random draw of mu.
    np.testing.assert_allclose(point["theta"], point["mu"], atol=0.01)


def test_init_failure_names_model_and_non_finite_potential():
    with pytest.raises(InitializationError, match=r"model `always_nan`.*potential energy was nan"):
        _initial_point(m.always_nan, init_to_uniform(), jnp.asarray(0.0))


def test_init_failure_names_sites_with_non_finite_gradient():
    with pytest.raises(InitializationError, match=r"gradient was non-finite at sites \['x'\]"):
        _initial_point(m.nan_gradient, init_to_uniform(), jnp.asarray(0.0))


def test_init_failure_names_value_outside_support():
    with pytest.raises(InitializationError, match=r"after 100 tries.*non-finite at sites \['sigma'\]"):
        _initial_point(m.scale_model, init_to_value(values={"sigma": -1.0}), jnp.arange(5.0))


def test_init_failure_points_at_nan_in_the_data():
    y = jnp.array([1.0, jnp.nan, 2.0, 0.5, 1.5])
    with pytest.raises(InitializationError, match=r"data hold NaN \(in its array arguments\)"):
        _initial_point(m.scale_model, init_to_uniform(), y)
    with pytest.raises(InitializationError, match=r"data hold inf \("):
        _initial_point(m.scale_model, init_to_uniform(), y.at[1].set(jnp.inf))


def test_invalid_strategy_settings_raise():
    with pytest.raises(ValueError, match="radius"):
        init_to_uniform(radius=0)
    with pytest.raises(ValueError, match="num_samples"):
        init_to_median(num_samples=0)


@pytest.mark.parametrize("strategy", [init_to_uniform(), init_to_median()])
def test_site_without_sampler_gets_an_initial_point(strategy):
    point = _initial_point(m.improper_ordered, strategy, jnp.asarray(3.0))
    assert point["mu"].shape == (CHAINS, 2) and np.all(np.isfinite(point["mu"]))


# ---------------------------------------------------------------------------------------------
# NumPyro's further strategies, and strategies as functions of a site message

def test_init_to_feasible_starts_at_unconstrained_zero():
    point = _initial_point(m.scale_model, init_to_feasible(), jnp.arange(5.0))
    for value in point.values():
        np.testing.assert_allclose(value, 0.0)


def test_init_to_mean_starts_at_the_prior_mean_given_earlier_sites():
    point = _initial_point(m.hierarchical, init_to_mean(), jnp.asarray(3.0))
    np.testing.assert_allclose(point["mu"], 3.0, atol=1e-12)  # mu ~ Normal(3, 1)
    np.testing.assert_allclose(point["theta"], point["mu"], atol=1e-12)  # theta ~ Normal(mu, .)


def test_init_to_sample_draws_each_chain_from_the_prior():
    point = _initial_point(m.hierarchical, init_to_sample(), jnp.asarray(3.0))
    assert len(np.unique(point["mu"])) == CHAINS


def test_a_function_of_a_site_message_is_a_strategy_as_in_numpyro():
    calls = []

    def strategy(site=None):
        calls.append(site["name"])
        if site["name"] == "mu":
            return 1.5
        return init_to_median(site, num_samples=31)

    point = _initial_point(m.hierarchical, strategy, jnp.asarray(3.0))
    np.testing.assert_allclose(point["mu"], 1.5)
    np.testing.assert_allclose(point["theta"], 1.5, atol=0.01)  # the median of N(1.5, 0.01)
    assert "mu" in calls and "theta" in calls
    import numpyro.infer  # NumPyro's own strategies run unchanged
    point = _initial_point(m.scale_model, numpyro.infer.init_to_feasible(), jnp.arange(5.0))
    np.testing.assert_allclose(point["sigma"], 0.0)


def test_strategies_are_callable_on_a_site_message():
    site = {"type": "sample", "name": "s", "fn": dist.LogNormal(0.0, 1.0), "value": None,
            "is_observed": False, "infer": {},
            "kwargs": {"rng_key": jax.random.PRNGKey(0), "sample_shape": ()}}
    np.testing.assert_allclose(init_to_feasible(site), 1.0)
    np.testing.assert_allclose(init_to_mean(site), np.exp(0.5), rtol=1e-6)
    np.testing.assert_allclose(init_to_value(site, values={"s": 2.0}), 2.0)
    assert 0 < float(init_to_uniform(radius=1.0)(site)) < np.e
    assert float(init_to_sample(site)) > 0


@pytest.mark.parametrize("strategy", [init_to_feasible, init_to_mean, init_to_median,
                                      init_to_sample, init_to_uniform, init_to_value,
                                      init_to_uniform(radius=3.0), init_to_median(num_samples=2)])
def test_strategies_are_callable_on_a_trace_entry(strategy):
    # a trace entry keeps no key: the strategies draw with one of their own, per site name
    import effppl
    from effppl import handlers

    def model():
        effppl.sample("x", dist.ZeroSumNormal(1.0, (3,)))
        effppl.sample("s", dist.LogNormal(0.0, 1.0))

    tr = handlers.trace(handlers.seed(model, 3)).get_trace()
    for name in ("x", "s"):
        site = dict(tr[name], value=None)
        value = strategy(site)
        assert jnp.shape(value) == jnp.shape(tr[name]["value"])
        assert bool(site["fn"].support(value).all())
    # two sites drawing from the same distribution get different draws
    a, b = (dict(tr["s"], name=n, value=None) for n in ("s", "t"))
    if strategy in (init_to_sample, init_to_uniform):
        assert float(strategy(a)) != float(strategy(b))


@pytest.mark.slow
@pytest.mark.parametrize("eager_from", [0, 10**9], ids=["primitive-by-primitive", "compiled"])
def test_initial_point_check_evaluates_the_log_density_and_gradient(eager_from, monkeypatch):
    """Both ways of checking an initial point (a large potential evaluated primitive by
    primitive, a small one compiled) give the log density and gradient of the model."""
    from jax.scipy.stats import norm

    from effppl.infer._compile import _fns

    monkeypatch.setattr(_fns, "EAGER_FROM_EQNS", eager_from)
    y = jnp.asarray(m.normal_normal_data(n=7))

    def log_joint(mu):
        return (norm.logpdf(mu, m.PRIOR_LOC, m.PRIOR_SCALE)
                + jnp.sum(norm.logpdf(y, mu, m.NOISE)))

    mcmc = MCMC(NUTS(m.normal_normal, init_strategy=init_to_value(values={"mu": 1.3})),
                num_warmup=0, num_samples=1, num_chains=2, progress_bar=False)
    mcmc.warmup(jax.random.key(0), y)
    state = mcmc.post_warmup_state
    np.testing.assert_allclose(state.logdensity, [log_joint(1.3)] * 2, rtol=1e-5)
    np.testing.assert_allclose(state.logdensity_grad["mu"], [jax.grad(log_joint)(1.3)] * 2,
                               rtol=1e-5)
    with pytest.raises(InitializationError, match=r"gradient was non-finite at sites \['x'\]"):
        _initial_point(m.nan_gradient, init_to_uniform(), jnp.asarray(0.0))
