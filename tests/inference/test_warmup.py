"""Warmup: degenerate adaptation made impossible or loud, Fisher-divergence adaptation, and the
warmup's statistics (`warmup(collect_warmup=True)`)."""

import json
import pathlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from effppl.infer import (
    MCMC,
    NUTS,
    ChainMixingWarning,
    KernelSettingsError,
    StuckChainWarning,
    _init,
)
from effppl.infer._compile._fns import prepare
from effppl.infer.mcmc import _fisher, _fisher_diag, _start

from ._ppl import dist, factor, sample

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "posteriordb" / "arma-arma11"


def arma11(y):
    """posteriordb's arma11: errors computed in a plain `lax.scan`, explosive for |theta| > 1."""
    mu = sample("mu", dist.Normal(0.0, 10.0))
    phi = sample("phi", dist.Normal(0.0, 2.0))
    theta = sample("theta", dist.Normal(0.0, 2.0))
    sigma = sample("sigma", dist.HalfCauchy(2.5))

    def step(err_prev, t):
        err = y[t] - (mu + phi * y[t - 1] + theta * err_prev)
        return err, err

    err1 = y[0] - (mu + phi * mu)
    _, errs = jax.lax.scan(step, err1, jnp.arange(1, y.shape[0]))
    factor("err", dist.Normal(0.0, sigma).log_prob(jnp.concatenate([err1[None], errs])).sum())


def arma_reference():
    """posteriordb's means and sds (from the means of x and x^2) of arma-arma11."""
    mean = json.loads((DATA / "reference_mean_value.json").read_text())
    sq = json.loads((DATA / "reference_mean_squared_value.json").read_text())
    m = dict(zip(mean["names"], mean["mean_value"]))
    s = dict(zip(sq["names"], (float(v) for v in sq["mean_squared_value."])))
    return {k: (m[k], np.sqrt(s[k] - m[k] ** 2)) for k in m}


@pytest.fixture(scope="module")
def y():
    return jnp.asarray(json.loads((DATA / "data.json").read_text())["y"])


def test_arma_seed_1_warmup_does_not_collapse(y):
    """The issue's failure: with PRNGKey(1) every chain started where |theta| > 1 (potential
    1e23..1e42), dual averaging settled on step sizes 1e-20..1e-46 and the chains never moved.
    Oracle: posteriordb's reference posterior (Stan, 10 x 1000 draws)."""
    mcmc = MCMC(NUTS(arma11), num_warmup=1000, num_samples=1000, num_chains=4,
                progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StuckChainWarning)
        mcmc.run(jax.random.PRNGKey(1), y)
    assert np.all(np.asarray(mcmc.last_state.step_size) > 0.1)
    samples = mcmc.get_samples()
    for name, (mean, sd) in arma_reference().items():
        x = np.asarray(samples[name])
        assert abs(x.mean() - mean) < 0.15 * sd, (name, x.mean(), mean, sd)
        assert x.std() == pytest.approx(sd, rel=0.2), (name, x.std(), sd)


def test_initial_points_beyond_float_resolution_are_redrawn(y):
    """At |theta| > 1.1 the potential's rounding error exceeds the divergence threshold: such
    points are finite but redrawn. Oracle: the hand-computed size of that rounding error."""
    fns, dynamic = prepare("test", arma11, (y,), {})
    params = {"mu": jnp.zeros(2), "phi": jnp.zeros(2), "sigma": jnp.zeros(2),
              "theta": jnp.asarray([0.2, 1.5])}
    pe, grad, _, _ = fns.potential_and_grad(params, dynamic)
    err = _init.rounding_error(params, pe, grad)
    expected = np.finfo(np.float64).eps * (np.abs(pe) + sum(
        np.abs(np.asarray(grad[k])) * np.maximum(np.abs(np.asarray(params[k])), 1.0)
        for k in params))
    np.testing.assert_allclose(err, expected, rtol=1e-12)
    assert err[0] < 1e-6 and err[1] > 1e3
    found, pe, grad = _init.find_initial_params(
        fns, _init.init_to_uniform(), jax.random.key(1), 16, dynamic, max_rounding_error=1000.0)
    assert np.all(_init.rounding_error(found, pe, grad) <= 1000.0)


def test_degenerate_warmup_is_restarted(y, monkeypatch):
    """Without the redraw of unusable initial points, the chains that collapse are restarted
    from new points, and every chain ends the warmup sound."""
    original = _start.find_initial_params
    monkeypatch.setattr(_start, "find_initial_params",
                        lambda *a, max_rounding_error=None, **k: original(*a, **k))
    mcmc = MCMC(NUTS(arma11), num_warmup=400, num_samples=10, num_chains=4, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StuckChainWarning)
        mcmc.warmup(jax.random.PRNGKey(1), y)
    state = mcmc.post_warmup_state
    assert np.all(np.asarray(state.step_size) > 1e-2)  # collapsed: 1e-20 .. 1e-46
    assert np.all(np.abs(np.asarray(state.position["theta"])) < 1.0)


def test_chain_stuck_at_a_given_point_is_named(y):
    """`init_params` at an explosive point (no restart: the user chose it): a warning names the
    chain and what went wrong."""
    init = {"mu": jnp.asarray([0.0, 0.0]), "phi": jnp.asarray([0.9, 0.9]),
            "sigma": jnp.asarray([-1.8, -1.8]), "theta": jnp.asarray([0.0, 1.6])}
    mcmc = MCMC(NUTS(arma11), num_warmup=300, num_samples=10, num_chains=2, progress_bar=False)
    with pytest.warns(StuckChainWarning, match=r"chain 1: .*(collapsed|did not change)"):
        mcmc.warmup(jax.random.PRNGKey(0), y, init_params=init)


def two_modes():
    """x ~ N(0, 20) times a mixture: 0.999 N(-10, 1) + 0.001 N(10, 1). Chains cannot cross the
    gap; one in the minor mode (+10) lies log(999) = 6.9 below the major mode's density."""
    x = sample("x", dist.Normal(0.0, 20.0))
    factor("modes", jnp.logaddexp(jnp.log(0.999) + dist.Normal(-10.0, 1.0).log_prob(x),
                                  jnp.log(0.001) + dist.Normal(10.0, 1.0).log_prob(x)))


@pytest.mark.parametrize("starts, named", [((-10.0, -10.0, 10.0, 10.0), [2, 3]),
                                           ((-10.0, -9.0, -11.0, -10.0), [])])
def test_chains_in_a_minor_mode_are_named(starts, named):
    """Chains started in the minor mode (analytically log(999) below the major one) are named in
    a ChainMixingWarning; chains all in the major mode give none."""
    mcmc = MCMC(NUTS(two_modes), num_warmup=150, num_samples=200, num_chains=4,
                progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(0), init_params={"x": jnp.asarray(starts)})
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    np.testing.assert_array_equal(np.mean(x, axis=1) > 0, np.asarray(starts) > 0)  # no crossing
    messages = [str(w.message) for w in caught if w.category is ChainMixingWarning]
    assert len(messages) == (1 if named else 0), messages
    for c in range(4):
        assert (f"chain {c}: mean log density" in "".join(messages)) == (c in named), messages


def standard_normal():
    sample("x", dist.Normal(0.0, 1.0))


@pytest.mark.parametrize("drifting", [True, False])
def test_a_drifting_chain_is_named(drifting):
    """One chain started at x = 50 of N(0, 1) with a fixed step size of 0.01, a unit mass
    matrix and at most three leapfrog steps per draw still drifts towards 0 over its draws (about
    0.02 a draw; its halves disagree): a ChainMixingWarning names x and the log density. The
    same chain from 0, tuned: none."""
    kwargs = dict(step_size=1e-2, adapt_step_size=False, adapt_mass_matrix=False,
                  max_tree_depth=2) if drifting else {}
    mcmc = MCMC(NUTS(standard_normal, **kwargs), num_warmup=100, num_samples=200,
                num_chains=1, progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(0), init_params={"x": jnp.asarray(50.0 if drifting else 0.0)})
    x = np.asarray(mcmc.get_samples()["x"])
    assert (x[0] - x[-1] > 1.0) == drifting, (x[0], x[-1])
    messages = [str(w.message) for w in caught if w.category is ChainMixingWarning]
    assert len(messages) == int(drifting), messages
    if drifting:
        assert "its two halves disagree" in messages[0] and "x " in messages[0], messages
        assert "log density " in messages[0], messages


@pytest.mark.slow
def test_collect_warmup_gives_the_warmups_statistics(y):
    """NumPyro's `warmup(collect_warmup=True)`: the warmup's draws and statistics, then `run`
    continues from `post_warmup_state` (the collected warmup's last point)."""
    mcmc = MCMC(NUTS(arma11, mass_matrix="fisher_diag"), num_warmup=120, num_samples=50,
                num_chains=2)
    mcmc.warmup(jax.random.PRNGKey(0), y, collect_warmup=True, extra_fields=("num_steps",))
    fields = mcmc.get_extra_fields(group_by_chain=True)
    samples = mcmc.get_samples(group_by_chain=True)
    assert samples["theta"].shape == (2, 120) and fields["num_steps"].shape == (2, 120)
    np.testing.assert_array_equal(fields["num_steps"], fields["n_steps"])
    assert np.all(np.asarray(fields["num_steps"]) >= 1)
    assert len(np.unique(np.asarray(fields["step_size"])[0])) > 10  # the step size in force
    state = mcmc.post_warmup_state
    np.testing.assert_allclose(samples["theta"][:, -1], state.position["theta"])
    mcmc.run(jax.random.PRNGKey(1), y)
    assert mcmc.get_samples(group_by_chain=True)["theta"].shape == (2, 50)


def test_fisher_diagonal_estimate_matches_numpy():
    """The running estimate after n draws is sqrt(S_x / S_g), S nuts-rs's running sum
    `sum_k (v_k - mean_{k-1})^2` (`RunningVariance::add_sample`), clipped to [1e-20, 1e20], and a
    coordinate whose ratio is 0 keeps its value. Oracle: NumPy on the same rows."""
    rng = np.random.default_rng(0)
    draws, grads = rng.normal(size=(12, 4)) * [1.0, 3.0, 0.1, 1.0], rng.normal(size=(12, 4))
    draws[:, 3] = 2.0  # a constant coordinate: ratio 0, kept
    running = _fisher_diag._running_empty(4, jnp.float64)
    for x, g in zip(draws, grads):
        running = _fisher_diag._running_add(running, jnp.asarray(x), jnp.asarray(g))

    def total(v):
        return sum(((v[k] - v[:k].mean(0)) ** 2 for k in range(1, len(v))), np.zeros(4))

    expected = np.sqrt(total(draws) / total(grads))
    expected[3] = 7.0
    got = _fisher_diag.fisher_diag_estimate(running, jnp.full(4, 7.0))
    np.testing.assert_allclose(got, expected, rtol=1e-10)
    assert int(running.count) == 12


def _run_engine(positions, num_warmup):
    """The `fisher_diag` engine fed `positions` (gradients -x), one per warmup draw: per draw,
    (did the inverse mass matrix change?, did the estimators switch?)."""
    init, update, _, seed = _fisher_diag.fisher_diag_engine(0.8)
    state = seed(init(jnp.full(2, 0.5), 1.0, num_warmup), -jnp.full(2, 0.5))
    step = jax.jit(lambda s, x: update(s, (0, 0), x, -x, 0.8))
    rows = []
    for x in positions:
        new = step(state, jnp.asarray(x))
        rows.append((int(new.updates - state.updates), int(new.switches - state.switches)))
        state = new
    return np.asarray(rows)


def test_fisher_diag_schedule_is_nuts_rs():
    """nuts-rs's schedule (`GlobalStrategy::adapt`), written out by hand for 100 and 1,000
    warmup draws: the estimators switch when the background holds 10 draws (the initial point
    counts) in the first 30%, then 80, 120, ... while a whole window still ends before the last
    15%; the matrix changes after every draw from the second (the foreground then holds 3)
    until the last 15%. The engine follows it draw by draw when the chain moves every draw,
    and a draw where it did not move is left out of the counts."""
    sched = _fisher_diag.fisher_diag_schedule(100)
    np.testing.assert_array_equal(np.flatnonzero(sched[:, 1]), [8, 18, 28])
    np.testing.assert_array_equal(np.flatnonzero(sched[:, 0]), np.arange(1, 85))
    sched = _fisher_diag.fisher_diag_schedule(1000)
    np.testing.assert_array_equal(np.flatnonzero(sched[:, 1]),
                                  list(range(8, 300, 10)) + [298 + 80, 378 + 120])
    np.testing.assert_array_equal(np.flatnonzero(sched[:, 0]), np.arange(1, 850))
    positions = np.random.default_rng(0).normal(size=(100, 2))
    np.testing.assert_array_equal(_run_engine(positions, 100),
                                  _fisher_diag.fisher_diag_schedule(100))
    positions[5] = positions[4]  # the chain did not move at draw 5
    rows = _run_engine(positions, 100)
    np.testing.assert_array_equal(np.flatnonzero(rows[:, 1]), [9, 19, 29])
    np.testing.assert_array_equal(np.flatnonzero(rows[:, 0]), np.arange(1, 85))


def test_fisher_diag_adapts_to_known_variances():
    """On a diagonal Gaussian with variances 1e-4..1e4, `fisher_diag`'s inverse mass matrix
    after the warmup is the variances (for a Gaussian, Var[x] / Var[grad] = sigma^4 exactly)
    and the step size is of order one."""
    scales = jnp.asarray([0.01, 0.1, 1.0, 10.0, 100.0])

    def model():
        sample("x", dist.Normal(jnp.zeros(5), scales))

    mcmc = MCMC(NUTS(model, mass_matrix="fisher_diag"), num_warmup=200, num_samples=100,
                num_chains=2, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0))
    imm = np.asarray(mcmc.last_state.inverse_mass_matrix)
    np.testing.assert_allclose(imm, np.broadcast_to(scales ** 2, imm.shape), rtol=1e-3)
    step_size = np.asarray(mcmc.last_state.step_size)
    assert np.all((step_size > 0.3) & (step_size < 2.0)), step_size


def _spectrum_after_preconditioning(imm, cov):
    """Eigenvalues of cov^-1/2 M^-1 cov^-1/2 for the low-rank `imm` (1 where M^-1 = cov)."""
    sigma, u, lam = (np.asarray(x, np.float64) for x in (imm.sigma, imm.U, imm.lam))
    dense = sigma[:, None] * (np.eye(len(sigma)) + u @ np.diag(lam - 1.0) @ u.T) * sigma[None, :]
    w, v = np.linalg.eigh(cov)
    root = v @ np.diag(w ** -0.5) @ v.T
    return np.linalg.eigvalsh(root @ dense @ root)


@pytest.mark.slow
@pytest.mark.parametrize("d", [20, 40])
def test_low_rank_estimate_corrects_the_whole_spectrum(d):
    """On draws of a correlated Gaussian (eigenvalues 1e-2..1e2 in a random basis) with their
    exact gradients, the low-rank estimate preconditions every direction: what remains of the
    covariance lies within nutpie's cutoff band [1/2, 2] (up to sampling noise), not only the
    10 directions blackjax's recipe keeps by default (rank 10 leaves the 20-d problem with a
    condition number near 70). Oracle: the known covariance."""
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    cov = q @ np.diag(np.logspace(-2, 2, d)) @ q.T
    n = 400
    draws = rng.multivariate_normal(np.zeros(d), cov, size=n)
    grads = -np.linalg.solve(cov, draws.T).T
    imm = _fisher._low_rank_estimate(jnp.asarray(draws), jnp.asarray(grads), n)
    assert imm.U.shape == (d, min(d, _fisher.MAX_RANK))
    spectrum = _spectrum_after_preconditioning(imm, cov)
    assert spectrum.min() > 0.3 and spectrum.max() < 3.0, spectrum
    assert spectrum.max() / spectrum.min() < 6.0


def test_fisher_warmup_seeds_the_mass_matrix_from_the_gradient():
    """nutpie's start: the inverse mass matrix is 1 / |grad| at the initial point."""
    init, _, final, seed = _fisher_diag.fisher_diag_engine(target_accept_prob=0.8)
    state = seed(init({"a": jnp.zeros(3)}, 1.0, 100), {"a": jnp.asarray([2.0, -4.0, 0.0])})
    np.testing.assert_allclose(final(state)[1], [0.5, 0.25, 1.0])
    init, _, final, seed = _fisher.fisher_engine(target_accept_prob=0.8)
    imm = final(seed(init({"a": jnp.zeros(3)}, 1.0, 100), {"a": jnp.asarray([2.0, -4.0, 0.0])}))[1]
    np.testing.assert_allclose(imm.sigma ** 2, [0.5, 0.25, 1.0], rtol=1e-6)  # no correction yet
    np.testing.assert_array_equal(imm.U, 0.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(mass_matrix="fisher"), "mass_matrix"),
    (dict(mass_matrix="low_rank", dense_mass=True), "dense_mass"),
])
def test_invalid_mass_matrix_raises(kwargs, match):
    with pytest.raises(KernelSettingsError, match=match):
        NUTS(arma11, **kwargs)


def test_dense_mass_is_mass_matrix_dense():
    assert NUTS(arma11, dense_mass=True).mass_matrix == "dense"
    assert NUTS(arma11, mass_matrix="dense").dense_mass


def test_a_model_without_coordinates_warms_up_without_warning():
    """A one-category Dirichlet has no unconstrained coordinate: no step can move one, and
    that is no degenerate warmup (NumPyro's `test_trivial_dirichlet`)."""
    def model():
        x = sample("x", dist.Dirichlet(jnp.ones(1)).expand((4,)))
        sample("y", dist.Normal(x, 1.0), obs=2.0)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mcmc = MCMC(NUTS(model), num_warmup=30, num_samples=10, progress_bar=False)
        mcmc.run(jax.random.key(0))
    np.testing.assert_array_equal(mcmc.get_samples()["x"], np.ones((10, 4, 1)))
