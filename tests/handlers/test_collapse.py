"""`handlers.collapse` (NumPyro's funsor-based collapsing) raises a clear `CollapseError`; the
marginal it names gives NumPyro's collapsed log density."""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers as numpyro_handlers
from numpyro.infer.util import log_density as numpyro_log_density

import effppl
from effppl import handlers
from effppl.handlers import CollapseError


def test_collapse_raises_naming_the_marginal():
    with pytest.raises(CollapseError, match="BetaBinomial") as err:
        with handlers.collapse():
            pass
    assert isinstance(err.value, NotImplementedError)
    with pytest.raises(CollapseError, match="enumerat"):
        handlers.collapse(lambda: None)


def test_the_named_marginal_equals_numpyros_collapsed_density():
    pytest.importorskip("funsor")
    total, data = 10, jnp.array([3.0])
    params = {"c1": jnp.array(0.5), "c0": jnp.array(1.5)}

    def marginal():
        c1 = effppl.param("c1", 0.5, constraint=dist.constraints.positive)
        c0 = effppl.param("c0", 1.5, constraint=dist.constraints.positive)
        effppl.sample("obs", dist.BetaBinomial(c1, c0, total), obs=data[0])

    def collapsed_one():
        c1 = numpyro.param("c1", 0.5, constraint=dist.constraints.positive)
        c0 = numpyro.param("c0", 1.5, constraint=dist.constraints.positive)
        with numpyro_handlers.collapse():
            probs = numpyro.sample("probs", dist.Beta(c1, c0))
            numpyro.sample("obs", dist.Binomial(total, probs), obs=data[0])

    theirs, _ = numpyro_log_density(collapsed_one, (), {}, params)
    ours, _ = effppl.log_density(marginal, (), {}, params)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    exact = dist.BetaBinomial(0.5, 1.5, total).log_prob(data[0])
    np.testing.assert_allclose(ours, exact, rtol=1e-6)
