"""Breaker probes of 2026-12-06: `cond` branches of different families, fisher_diag, TraceEnum_ELBO
with a drawn guide site."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import SVI, Trace_ELBO, init_to_median
from effppl.infer.autoguide import AutoDelta, AutoNormal


def _mixed_family_model():
    def a():
        z = effppl.sample("z", dist.Normal(0.0, 1.0))
        effppl.sample("y", dist.Normal(z, 1.0), obs=1.0)

    def b():
        z = effppl.sample("z", dist.Exponential(2.0))
        effppl.sample("y", dist.Poisson(z), obs=3.0)

    jax.lax.cond(False, a, b)


def test_init_to_median_mixed_family_cond_site():
    """`init_to_median` on a site whose `cond` branches use different families (its trace `fn` is
    None) crashed with `AttributeError: 'NoneType' object has no attribute 'sample'`; it keeps the
    prior draw for that site instead."""
    guide = AutoNormal(_mixed_family_model, init_loc_fn=init_to_median)
    svi = SVI(_mixed_family_model, guide, optax.adam(0.05), Trace_ELBO())
    result = svi.run(jax.random.PRNGKey(0), 1500, progress_bar=False)
    z = guide.median(result.params)["z"]
    # posterior Gamma(4, 3): median ~1.22, a log-normal fit's median nearby
    assert np.isfinite(result.losses[-1]) and 0.9 < float(z) < 1.6


def test_autodelta_mixed_family_cond_site_clear_error():
    """AutoDelta's documented AutoGuideError for a mixed-family site, not an AttributeError from
    its default `init_to_median`."""
    guide = AutoDelta(_mixed_family_model)
    svi = SVI(_mixed_family_model, guide, optax.adam(0.05), Trace_ELBO())
    with pytest.raises(effppl.infer.autoguide.AutoGuideError, match="`z`"):
        svi.init(jax.random.PRNGKey(0))
