"""`effppl.ode.solve` inside models: a failed solve is a rejected proposal, not a crash.

The model: `k ~ Normal(1, 1)`; the solve of `y' = -exp(k) y` over `[0, 1]` needs more steps as
`k` grows and fails (`max_steps=20`) above a threshold `k*` (found by bisection with
`throw=False`). Nothing else depends on `k`, so the posterior is the prior truncated to
`k < k*`: the oracle (scipy's `truncnorm`).
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import effppl
from effppl import distributions as dist
from effppl import handlers, ode
from effppl.infer import MCMC, NUTS, SVI, DivergenceWarning, Predictive, Trace_ELBO
from effppl.infer.autoguide import AutoNormal


def decay(t, y, k):
    return -jnp.exp(k) * y


def solve(k, **kwargs):
    return ode.solve(decay, jnp.ones(1), 0.0, 1.0, args=k, max_steps=20, dt0=0.01, **kwargs)


def model():
    k = effppl.sample("k", dist.Normal(1.0, 1.0))
    effppl.deterministic("y1", solve(k).ys[0, 0])


def threshold():
    """`k*`: the solve succeeds below it, fails above."""
    ok = jax.jit(lambda k: solve(k, throw=False).result == 0)
    lo, hi = 0.0, 5.0
    assert bool(ok(lo)) and not bool(ok(hi))
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if bool(ok(mid)) else (lo, mid)
    return lo


def test_failed_solve_makes_the_log_density_minus_inf():
    k_star = threshold()
    below, _ = handlers.log_density(model, (), {}, {"k": k_star - 0.1})
    above, _ = handlers.log_density(model, (), {}, {"k": k_star + 0.1})
    assert float(below) == pytest.approx(float(dist.Normal(1.0, 1.0).log_prob(k_star - 0.1)))
    assert float(above) == -np.inf
    potential = handlers.potential_energy(model, (), {}, {"k": jnp.asarray(k_star + 0.1)})
    assert float(potential) == np.inf


def test_nuts_rejects_failed_solves_and_samples_the_rest():
    k_star = threshold()
    mcmc = MCMC(NUTS(model), num_warmup=300, num_samples=600, num_chains=1, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DivergenceWarning)
        mcmc.run(jax.random.key(0))
    k = np.asarray(mcmc.get_samples()["k"])
    assert k.max() < k_star and np.isfinite(np.asarray(mcmc.get_samples()["y1"])).all()
    assert np.asarray(mcmc.get_extra_fields()["diverging"]).sum() > 0
    truncated = scipy.stats.truncnorm(-np.inf, k_star - 1.0, loc=1.0, scale=1.0)
    se = truncated.std() / np.sqrt(150)  # a conservative effective sample size
    assert abs(k.mean() - truncated.mean()) < 4 * se


def test_predictive_and_svi_run_on():
    k_star = threshold()
    samples = Predictive(model, num_samples=400)(jax.random.key(1))
    k, y1 = np.asarray(samples["k"]), np.asarray(samples["y1"])
    assert (k > k_star).any() and np.isinf(y1[k > k_star]).all()
    np.testing.assert_allclose(y1[k < k_star - 0.01], np.exp(-np.exp(k[k < k_star - 0.01])),
                               rtol=1e-4, atol=1e-6)
    svi = SVI(model, AutoNormal(model), effppl.optim.Adam(0.05), Trace_ELBO())
    with pytest.warns(RuntimeWarning, match="non-finite loss"):  # the failed solves' steps
        result = svi.run(jax.random.key(2), 200, progress_bar=False, stable_update=True)
    assert np.isfinite(np.asarray(result.params["k_auto_loc"]))
    assert float(result.params["k_auto_loc"]) < k_star


def test_batched_initial_conditions_inside_a_model():
    """`jax.vmap` of the solve inside a model: one failing element fails the joint density."""
    def batched(y0s):
        k = effppl.sample("k", dist.Normal(1.0, 1.0))
        sols = jax.vmap(lambda y0: ode.solve(decay, y0, 0.0, 1.0, args=k, max_steps=20,
                                             dt0=0.01).ys)(y0s)
        effppl.deterministic("ys", sols)

    y0s = jnp.array([[1.0], [2.0]])
    k_star = threshold()
    lp, tr = handlers.log_density(batched, (y0s,), {}, {"k": 0.5})
    np.testing.assert_allclose(tr["ys"]["value"][:, 0, 0], [np.exp(-np.exp(0.5)),
                                                            2 * np.exp(-np.exp(0.5))], rtol=1e-5)
    above, _ = handlers.log_density(batched, (y0s,), {}, {"k": k_star + 0.1})
    assert float(above) == -np.inf


@pytest.mark.slow
def test_lotka_volterra_stiff_proposal_is_minus_inf_not_an_error():
    """posteriordb's Lotka-Volterra model (Stan's solver settings, at most 500 steps): a
    proposal far in the tail (rates of 50 per year: ~160 oscillations over the 20 years) needs
    more steps than allowed, and its log density is `-inf` instead of an error; at a typical
    point the log density is NumPyro + Diffrax's (Dopri5, the same tolerances)."""
    import pathlib

    from numpyro.infer.util import log_density as numpyro_log_density

    from models import lotka_volterra as lv

    folder = pathlib.Path(__file__).resolve().parents[1] / "data" / "posteriordb"
    data = lv.load(folder / "hudson_lynx_hare-lotka_volterra")
    typical = {"theta": jnp.array([0.55, 0.028, 0.80, 0.024]),
               "z_init": jnp.array([33.9, 5.9]), "sigma": jnp.array([0.25, 0.25])}
    stiff = dict(typical, theta=jnp.array([50.0, 0.05, 50.0, 0.05]))
    ours, _ = handlers.log_density(lv.effppl_model, data, {}, typical)
    theirs = jax.jit(lambda p: numpyro_log_density(lv.numpyro_model, data, {}, p)[0])(typical)
    assert float(ours) == pytest.approx(float(theirs), abs=0.01)
    assert float(handlers.log_density(lv.effppl_model, data, {}, stiff)[0]) == -np.inf
    with pytest.raises(effppl.effects.FailureError,
                       match="max_steps=500 reached at t = "):
        ode.solve(lv.dz_dt, stiff["z_init"], 0.0, data[0][-1], args=stiff["theta"],
                  solver="dopri5", rtol=lv.RTOL, atol=lv.ATOL, max_steps=lv.MAX_STEPS)
