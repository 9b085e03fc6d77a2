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


def _scaled_enum_pair(drawn):
    """A site enumerated in the model (no scale) and an observed site depending on it under
    `handlers.scale(0.5)`; with `drawn`, a global categorical drawn by the guide feeds both."""
    y = jnp.array([-2.1, -1.5, 0.3, 2.0, 2.5, 1.7, -0.4])

    def model():
        c = effppl.sample("c", dist.Categorical(jnp.array([0.3, 0.3, 0.4]))) if drawn else 0
        b = effppl.sample("b", dist.Bernoulli(jnp.array([0.2, 0.5, 0.9])[c]),
                          infer={"enumerate": "parallel"})
        s = effppl.sample("s", dist.Normal(0.0, 1.0))
        with effppl.plate("n", 7), effppl.handlers.scale(scale=0.5):
            effppl.sample("y", dist.Normal(2.0 * b - 1.0 + s, 1.0), obs=y)

    def guide():
        if drawn:
            effppl.sample("c", dist.Categorical(jnp.array([0.2, 0.5, 0.3])))
        effppl.sample("s", dist.Normal(effppl.param("m", 0.0), 1.0))
    return model, guide


@pytest.mark.parametrize("drawn", [False, True])
def test_trace_enum_elbo_group_with_different_scales_is_an_error(drawn):
    """An enumerated site (no scale) and an observed site depending on it under
    `handlers.scale(0.5)`: effppl scaled the whole contraction by 0.5, the enumerated site's own
    log prob too, silently; NumPyro raises. A SiteError naming both sites' scales now."""
    from effppl.infer import TraceEnum_ELBO
    from effppl.primitives import SiteError
    model, guide = _scaled_enum_pair(drawn)
    with pytest.raises(SiteError, match=r"`b`: 1, `y`: 0.5|`y`: 0.5.*`b`: 1"):
        jax.block_until_ready(TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {"m": 0.0},
                                                    model, guide))


_SHORTER = pytest.mark.xfail(strict=True, reason=(
    "with 4 warmup draws or fewer, dual averaging itself (restarted or not) ends at the cap pi: "
    "its first iterate log(10 * step) has weight 1 in the running average and 1-3 iterates "
    "follow; Stan's and blackjax's `diag` end near 2 there"))


@pytest.mark.slow
@pytest.mark.parametrize("num_warmup, num_chains", [
    (5, 1), (6, 4), pytest.param(4, 1, marks=_SHORTER), pytest.param(2, 4, marks=_SHORTER)])
def test_fisher_diag_short_warmup_step_size_not_at_the_cap(num_warmup, num_chains):
    """fisher_diag with a short warmup ended with the step size at the dual-averaging cap pi:
    the restart at the first mass-matrix estimate (draw 1-2) left 1-3 iterates, the first,
    `log(10 * step)`, weighted 1 in the running average (23 of 200 draws divergent on N(3, 2),
    posterior sd 1.16). No restart with fewer than 20 warmup draws left."""
    from effppl.infer import MCMC, NUTS

    def oned():
        effppl.sample("x", dist.Normal(3.0, 2.0))

    mcmc = MCMC(NUTS(oned, mass_matrix="fisher_diag"), num_warmup=num_warmup, num_samples=200,
                num_chains=num_chains, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0))
    extra = mcmc.get_extra_fields()
    assert float(np.max(extra["step_size"])) < 0.99 * np.pi
    assert int(np.sum(extra["diverging"])) < 10 * num_chains
    assert 1.6 < float(np.std(mcmc.get_samples()["x"])) < 2.5  # N(3, 2)


@pytest.mark.parametrize("elbo", ["TraceEnum_ELBO", "Trace_ELBO"])
def test_guide_drawing_a_model_observed_site_is_reported(elbo):
    """A guide drawing a site the model observes was accepted silently (the model keeps its
    observation, the loss still subtracts the guide's log q of its draw); NumPyro's
    TraceEnum_ELBO fails with a bare AssertionError. A warning names the site now."""
    import effppl.infer
    TraceEnum_ELBO = getattr(effppl.infer, elbo)
    y = jnp.array([-2.1, -1.5, 0.3, 2.0])

    def model():
        b = effppl.sample("b", dist.Bernoulli(0.3), infer={"enumerate": "parallel"})
        c = effppl.sample("c", dist.Categorical(jnp.ones(3) / 3), obs=1)
        with effppl.plate("n", 4):
            effppl.sample("y", dist.Normal(2.0 * b - 1.0 + c, 1.0), obs=y)

    def guide():
        effppl.sample("c", dist.Categorical(jnp.array([0.2, 0.3, 0.5])))

    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {}, model, guide)
            reported = [str(w.message) for w in caught]
        except Exception as err:  # noqa: BLE001 (an error naming the site passes too)
            reported = [str(err)]
    assert any("`c`" in message for message in reported), reported
