"""A model that needs the value of an array argument while traced (`len(np.unique(group))`):
the argument becomes static, with a warning naming it, and new values compile anew."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy import stats

import effppl
from effppl import distributions as dist
from effppl.infer import MCMC, NUTS, Predictive, StaticArgumentWarning, log_likelihood


def grouped(group, y=None):
    n = len(np.unique(group))  # needs the value of `group`
    a = effppl.sample("a", dist.Normal(jnp.zeros(n), 1.0).to_event(1))
    effppl.sample("y", dist.Normal(a[group], 1.0), obs=y)


def test_value_argument_becomes_static_with_a_warning_naming_it():
    group, y = np.array([0, 1, 1]), jnp.array([0.5, -1.0, 2.0])
    with pytest.warns(StaticArgumentWarning, match="`group`") as caught:
        mcmc = MCMC(NUTS(grouped), num_warmup=20, num_samples=20, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), group, y)
    assert mcmc.get_samples()["a"].shape == (20, 2)
    assert all(w.filename == __file__ for w in caught)  # points at the user's call
    a = jnp.array([[0.1, 0.3], [-0.2, 1.0]])
    ll = log_likelihood(grouped, {"a": a}, group, y)["y"]
    np.testing.assert_allclose(ll, stats.norm.logpdf(y, a[:, group], 1.0), rtol=1e-6)
    # a new value with another number of groups: recompiled, right shapes
    three = Predictive(grouped, num_samples=4)(jax.random.PRNGKey(1), np.array([0, 1, 2]))
    assert three["a"].shape == (4, 3) and three["y"].shape == (4, 3)


def test_keyword_argument_is_named():
    def model(y, *, sizes):
        a = effppl.sample("a", dist.Normal(jnp.zeros(int(sizes[0])), 1.0).to_event(1))
        effppl.sample("y", dist.Normal(a.sum(), 1.0), obs=y)

    with pytest.warns(StaticArgumentWarning, match=r"`sizes`"):
        out = Predictive(model, num_samples=3)(jax.random.PRNGKey(0), None, sizes=np.array([4]))
    assert out["a"].shape == (3, 4)
