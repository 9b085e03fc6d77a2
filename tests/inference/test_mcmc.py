import warnings

import arviz as az
import blackjax
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import effppl
from effppl import distributions as dist
from effppl import sample
from effppl.infer import HMC, MCMC, NUTS, DivergenceWarning, KernelSettingsError, MCMCError, _model
from effppl.infer._compile._cache import split_cache_key
from effppl.infer._compile._fns import model_fns
from effppl.infer.mcmc import _sampler

from . import _models as m

WARMUP, SAMPLES, CHAINS = 200, 400, 2


def _run(kernel, data, *, key=0, num_warmup=WARMUP, num_samples=SAMPLES, num_chains=CHAINS, **kw):
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                progress_bar=False, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DivergenceWarning)
        mcmc.run(jax.random.key(key), *data)
    return mcmc


@pytest.fixture(scope="module")
def y():
    return jnp.asarray(m.normal_normal_data())


@pytest.fixture(scope="module")
def nuts_run(y):
    return _run(NUTS(m.normal_normal), (y,))


def _assert_normal_posterior(draws, mean, sd, ess):
    # Means within 5 Monte Carlo standard errors, sds within 15%.
    assert abs(np.mean(draws) - mean) < 5 * sd / np.sqrt(ess)
    assert np.std(draws) == pytest.approx(sd, rel=0.15)


def test_nuts_recovers_conjugate_normal_posterior(nuts_run, y):
    mean, sd = m.normal_normal_posterior(np.asarray(y))
    draws = np.asarray(nuts_run.get_samples()["mu"])
    ess = float(az.ess(np.asarray(nuts_run.get_samples(group_by_chain=True)["mu"])))
    assert ess > 100
    _assert_normal_posterior(draws, mean, sd, ess)


def test_hmc_recovers_conjugate_normal_posterior(y):
    mcmc = _run(HMC(m.normal_normal, num_steps=5, trajectory_length=None), (y,))
    mean, sd = m.normal_normal_posterior(np.asarray(y))
    ess = float(az.ess(np.asarray(mcmc.get_samples(group_by_chain=True)["mu"])))
    _assert_normal_posterior(np.asarray(mcmc.get_samples()["mu"]), mean, sd, ess)
    assert np.all(np.asarray(mcmc.get_extra_fields()["n_steps"]) == 5)
    assert "tree_depth" not in mcmc.get_extra_fields()


def test_dense_mass_recovers_correlated_gaussian_posterior():
    X, y = m.regression_data()
    mcmc = _run(NUTS(m.regression, dense_mass=True), (jnp.asarray(X), jnp.asarray(y)))
    mean, cov = m.regression_posterior(X, y)
    draws = np.asarray(mcmc.get_samples()["beta"])
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * np.sqrt(np.diag(cov) / 200))
    np.testing.assert_allclose(np.cov(draws.T), cov, rtol=0.25, atol=0.1 * np.abs(cov).max())
    imm = np.asarray(mcmc.last_state.inverse_mass_matrix)
    assert imm.shape == (CHAINS, 2, 2)
    # The adapted dense inverse mass matrix captures the strong posterior correlation.
    corr = imm[:, 0, 1] / np.sqrt(imm[:, 0, 0] * imm[:, 1, 1])
    assert np.all(corr < -0.9) or np.all(corr > 0.9)


@pytest.mark.slow
def test_nuts_on_cond_sites_with_unread_unconstrained_coordinates():
    # Rows of a cond site never reached, and the coordinates a branch with fewer leaves unread,
    # have a standard normal density (they were flat: NUTS drifted, ~700 leapfrog steps a draw).
    def model(k):
        def step(c, kt):
            return c, jax.lax.cond(
                kt > 0, lambda: sample("p", dist.Dirichlet(jnp.full(3, 2.0))),
                lambda: sample("p", dist.Normal(jnp.zeros(3), 1.0).to_event(1)))
        jax.lax.scan(step, 0.0, k)
        jax.lax.cond(k[0] > 0, lambda: sample("w", dist.Beta(2.0, 5.0)), lambda: 0.0)
    mcmc = _run(NUTS(model), (jnp.array([0, 1, 0, 1]),), num_samples=1000)
    p, w = np.asarray(mcmc.get_samples()["p"]), np.asarray(mcmc.get_samples()["w"])
    assert np.all(w == 0.0)  # never reached
    np.testing.assert_allclose(p[:, [0, 2]].mean(0), 0.0, atol=0.15)
    np.testing.assert_allclose(p[:, [0, 2]].std(0), 1.0, rtol=0.15)
    np.testing.assert_allclose(p[:, [1, 3]].mean(0), 1 / 3, atol=0.03)   # Dirichlet(2, 2, 2)
    np.testing.assert_allclose(p[:, [1, 3]].var(0), 8 / 252, rtol=0.25)
    assert np.asarray(mcmc.get_extra_fields()["n_steps"]).mean() < 31


def test_get_samples_shapes_group_by_chain(nuts_run, y):
    flat, grouped = nuts_run.get_samples(), nuts_run.get_samples(group_by_chain=True)
    assert set(flat) == {"mu", "mu2"}
    assert grouped["mu"].shape == (CHAINS, SAMPLES)
    assert flat["mu"].shape == (CHAINS * SAMPLES,)
    np.testing.assert_array_equal(flat["mu"], grouped["mu"].reshape(-1))
    np.testing.assert_allclose(flat["mu2"], 2 * flat["mu"], rtol=1e-6)
    extra = nuts_run.get_extra_fields(group_by_chain=True)
    assert set(extra) == {"diverging", "acceptance_rate", "energy", "n_steps", "tree_depth",
                          "lp", "step_size"}
    assert all(v.shape == (CHAINS, SAMPLES) for v in extra.values())
    assert extra["diverging"].dtype == bool
    # One adapted step size per chain, constant after warmup.
    assert np.all(np.asarray(extra["step_size"]) == np.asarray(extra["step_size"])[:, :1])


def test_thinning_keeps_every_kth_draw(nuts_run, y):
    thin = _run(NUTS(m.normal_normal), (y,), thinning=4)
    assert thin.get_samples(group_by_chain=True)["mu"].shape == (CHAINS, SAMPLES // 4)
    # Draw d of a thinned run is transition 4d+3 of the same chain (same key, same warmup).
    np.testing.assert_allclose(thin.get_samples(group_by_chain=True)["mu"],
                               nuts_run.get_samples(group_by_chain=True)["mu"][:, 3::4], rtol=1e-6)


def test_progress_bar_chunks_give_same_draws(nuts_run, y, capsys):
    mcmc = MCMC(NUTS(m.normal_normal), num_warmup=WARMUP, num_samples=SAMPLES, num_chains=CHAINS,
                progress_bar=True)
    mcmc.run(jax.random.key(0), y)
    assert "sample" in capsys.readouterr().err
    np.testing.assert_array_equal(mcmc.get_samples()["mu"], nuts_run.get_samples()["mu"])


def test_progress_bar_rate_and_eta_leave_out_the_first_chunks_compilation():
    import io

    import tqdm

    from effppl.infer._progress import advance

    now = [0.0]
    bar = tqdm.tqdm(total=100, file=io.StringIO(), mininterval=0)
    bar._time = lambda: now[0]  # a fake clock
    now[0] = 30.0  # the first chunk of 10 steps: 29 s compiling, 1 s sampling
    advance(bar, 10, "0 divergences")
    assert bar.n == 10 and bar.format_dict["elapsed"] == 0
    assert "?" in str(bar)  # no rate yet, instead of 10 steps / 30 s
    now[0] = 31.0
    advance(bar, 10, "0 divergences")
    assert bar.n == 20 and bar.format_dict["rate"] == pytest.approx(10.0)  # steps/s
    assert "00:08" in str(bar)  # 80 steps left at 10/s (with compilation counted: ~2 min)
    bar.close()


def test_raw_and_typed_keys_give_same_draws(nuts_run, y):
    raw = MCMC(NUTS(m.normal_normal), num_warmup=WARMUP, num_samples=SAMPLES, num_chains=CHAINS,
               progress_bar=False)
    raw.run(jax.random.PRNGKey(0), y)
    np.testing.assert_array_equal(raw.get_samples()["mu"], nuts_run.get_samples()["mu"])
    with pytest.raises(MCMCError, match="expected a PRNG key"):
        raw.run(7, y)


def test_post_warmup_state_skips_warmup(y):
    mcmc = MCMC(NUTS(m.normal_normal), num_warmup=30, num_samples=30, num_chains=CHAINS,
                progress_bar=False)
    mcmc.warmup(jax.random.key(0), y)
    state = mcmc.post_warmup_state
    assert state.position["mu"].shape == (CHAINS,)
    assert mcmc.last_state is state  # (NumPyro's: the warmup's last state, until new draws)
    mcmc.run(jax.random.key(1), y)
    assert mcmc.get_samples()["mu"].shape == (CHAINS * 30,)
    assert mcmc.last_state is not state
    np.testing.assert_allclose(mcmc.last_state.position["mu"],
                               mcmc.get_samples(group_by_chain=True)["mu"][:, -1])
    mcmc.warmup(jax.random.key(3), y)  # a warmup after draws: its state, not the draws' last
    assert mcmc.last_state is mcmc.post_warmup_state
    np.testing.assert_allclose(mcmc.get_extra_fields(group_by_chain=True)["step_size"][:, 0],
                               state.step_size, rtol=1e-6)
    # With new data, the log density at the saved position is recomputed, not taken from the
    # state: the chains move, and the recorded lp is the new model's.
    mcmc.post_warmup_state = state
    mcmc.run(jax.random.key(2), y + 5.0)
    draws, lp = mcmc.get_samples()["mu"], mcmc.get_extra_fields()["lp"]
    assert len(np.unique(np.asarray(draws))) > 10
    log_density = _model._handlers().log_density  # effppl's, or NumPyro's on that test backend
    ref = jax.vmap(lambda mu: log_density(m.normal_normal, (y + 5.0,), {}, {"mu": mu})[0])(draws)
    np.testing.assert_allclose(lp, ref, rtol=1e-5)
    other = MCMC(NUTS(m.normal_normal), num_warmup=30, num_samples=30, num_chains=CHAINS + 1,
                 progress_bar=False)
    other.post_warmup_state = state
    with pytest.raises(MCMCError, match=f"holds {CHAINS} chains.*num_chains={CHAINS + 1}"):
        other.run(jax.random.key(1), y)


@pytest.mark.slow
def test_run_after_warmup_draws_in_one_call(y, monkeypatch):
    """Without a progress bar or checkpoint, `run()` after `warmup()` makes its draws in one
    compiled call, as a whole run does (its `num_warmup` of 0 once cut them one draw per call:
    300 dispatches, ten times the draws' own time on eight schools)."""
    from effppl.infer.mcmc import _driver

    calls = []
    spans = _driver.Chunks.spans

    def counted(self, start, end, cap=None):
        for span in spans(self, start, end, cap):
            calls.append(span)
            yield span

    monkeypatch.setattr(_driver.Chunks, "spans", counted)
    mcmc = MCMC(NUTS(m.normal_normal), num_warmup=30, num_samples=40, num_chains=CHAINS,
                progress_bar=False)
    mcmc.warmup(jax.random.key(0), y)
    assert calls == [(0, 30)]
    calls.clear()
    mcmc.run(jax.random.key(1), y)
    assert calls == [(0, 40)]
    assert mcmc.get_samples()["mu"].shape == (CHAINS * 40,)


@pytest.mark.slow
@pytest.mark.parametrize("progress_bar", [False, True])
def test_warmup_then_run_shares_the_whole_runs_chunk_program(y, monkeypatch, progress_bar):
    """The draws' buffer length (which keys the compiled chunk) is the same for `warmup()`, the
    `run()` after it and a whole `run()`: with a progress bar the run after `warmup()` once
    compiled a second chunk program for its shorter buffer."""
    from effppl.infer.mcmc import _driver

    lengths = []
    plan = _driver.MCMC._chunk_plan

    def recorded(self, *args, **kwargs):
        chunks, length = plan(self, *args, **kwargs)
        lengths.append(length)
        return chunks, length

    monkeypatch.setattr(_driver.MCMC, "_chunk_plan", recorded)
    mcmc = MCMC(NUTS(m.normal_normal), num_warmup=30, num_samples=40, num_chains=CHAINS,
                progress_bar=progress_bar)
    mcmc.warmup(jax.random.key(0), y)
    mcmc.run(jax.random.key(1), y)
    mcmc.post_warmup_state = None
    mcmc.run(jax.random.key(1), y)
    assert len(lengths) == 3 and len(set(lengths)) == 1, lengths


def test_print_summary_reports_diagnostics_and_divergences(nuts_run, capsys):
    nuts_run.print_summary()
    out = capsys.readouterr().out
    assert "r_hat" in out and "n_eff" in out and " mu " in out
    assert "mu2" not in out
    assert "Number of divergences: 0" in out


def test_to_arviz_has_all_groups(nuts_run, y):
    idata = nuts_run.to_arviz()
    for group in ("posterior", "sample_stats", "log_likelihood", "observed_data"):
        assert hasattr(idata, group)
    assert idata.posterior["mu"].shape == (CHAINS, SAMPLES)
    for stat in ("diverging", "acceptance_rate", "tree_depth", "n_steps", "energy", "step_size", "lp"):
        assert idata.sample_stats[stat].shape == (CHAINS, SAMPLES)
    np.testing.assert_allclose(idata.observed_data["y"], y)
    ll = np.asarray(idata.log_likelihood["y"])
    assert ll.shape == (CHAINS, SAMPLES, y.shape[0])
    mu = np.asarray(idata.posterior["mu"])[..., None]
    expected = -0.5 * ((np.asarray(y) - mu) / m.NOISE) ** 2 - np.log(m.NOISE * np.sqrt(2 * np.pi))
    np.testing.assert_allclose(ll, expected, rtol=1e-6)
    assert np.isfinite(az.waic(idata).elpd_waic)


def test_nan_log_density_is_a_divergence_not_a_crash():
    data = (jnp.asarray(0.9),)
    mcmc = MCMC(NUTS(m.nan_region), num_warmup=100, num_samples=200, num_chains=CHAINS,
                progress_bar=False)
    with pytest.warns(DivergenceWarning, match="divergent"):
        mcmc.run(jax.random.key(0), *data)
    x = np.asarray(mcmc.get_samples()["x"])
    assert np.all(np.isfinite(x)) and np.all(x <= 1.0)
    assert np.asarray(mcmc.get_extra_fields()["diverging"]).sum() > 0


def test_window_adaptation_matches_blackjax(y):
    """The chunked warmup runs the same computation as `blackjax.window_adaptation(...).run`."""
    num_warmup, key = 150, jax.random.key(11)
    kernel = NUTS(m.normal_normal, dense_mass=True)
    structure, dynamic = split_cache_key("test", (y,), {})
    fns = model_fns(kernel.model, structure, dynamic)
    sampler = _sampler.sampler_for(fns, kernel)
    position = {"mu": jnp.asarray(0.3)}
    logdensity = fns.logdensity_fn(dynamic)
    (expected, params), _ = blackjax.window_adaptation(
        blackjax.nuts, logdensity, is_mass_matrix_diagonal=False,
    ).run(key, position, num_steps=num_warmup)

    def ours(position):
        pe, grad = jax.value_and_grad(lambda p: -logdensity(p))(position)
        chain = sampler._start(position, pe, grad)
        keys = jax.random.split(key, num_warmup)
        span = _sampler.Span(start=0, num=num_warmup, sampling=False, thinning=1,
                             offset=num_warmup)
        chain, *_ = sampler._chunk(chain, keys, span, _sampler.warmup_schedule(num_warmup),
                                   dynamic, length=1)
        return chain.state, (chain.step_size, chain.inverse_mass_matrix)

    state, (step_size, imm) = jax.jit(ours)(position)
    np.testing.assert_allclose(state.position["mu"], expected.position["mu"], rtol=1e-5)
    np.testing.assert_allclose(step_size, params["step_size"], rtol=1e-5)
    np.testing.assert_allclose(imm, params["inverse_mass_matrix"], rtol=1e-5)


def _conds(jaxpr, inside=False) -> list:
    """`(output types, inside another cond?, holds a cond?)` of every `cond` in `jaxpr` and the
    jaxprs nested in it."""
    out = []
    for eqn in jaxpr.eqns:
        subs = list(jax.extend.core.jaxprs_in_params(eqn.params))
        nested = [c for sub in subs for c in _conds(sub, inside or eqn.primitive.name == "cond")]
        if eqn.primitive.name == "cond":
            types = [(v.aval.shape, v.aval.dtype) for v in eqn.outvars]
            out.append((types, inside, any(c[1] for c in nested)))
        out += nested
    return out


@pytest.mark.parametrize("mass_matrix", ["diag", "low_rank"])
def test_draws_skip_adaptation_under_vmap(y, mass_matrix):
    """Over several chains (`vmap`), the chunk keeps the `cond` that skips the adaptation's work
    during draws (its predicate is the same for every chain), not a `select` that computes both
    branches."""
    kernel = NUTS(m.normal_normal, mass_matrix=mass_matrix)
    structure, dynamic = split_cache_key("test", (y,), {})
    fns = model_fns(kernel.model, structure, dynamic)
    sampler = _sampler.sampler_for(fns, kernel)
    logdensity = fns.logdensity_fn(dynamic)

    def chunk(position, keys, sampling):
        pe, grad = jax.value_and_grad(lambda p: -logdensity(p))(position)
        chain = sampler._start(position, pe, grad, num_warmup=20)
        span = _sampler.Span(start=0, num=5, sampling=sampling, thinning=1, offset=20)
        return sampler._chunk(chain, keys, span, sampler.schedule(20), dynamic, length=5)

    position, keys = {"mu": jnp.asarray(0.3)}, jax.random.split(jax.random.key(0), 25)
    sampling = jnp.asarray(True)
    one = jax.make_jaxpr(chunk)(position, keys, sampling).jaxpr
    many = jax.make_jaxpr(jax.vmap(chunk, in_axes=(0, 0, None)))(
        {"mu": jnp.asarray([0.3, -0.2])}, jnp.stack([keys, keys]), sampling).jaxpr
    astate = jax.eval_shape(lambda p: sampler._start(
        p, *jax.value_and_grad(lambda q: -logdensity(q))(p), num_warmup=20).adapt_state,
        {"mu": jnp.asarray(0.3)})
    types = [(x.shape, x.dtype) for x in jax.tree.leaves(astate)]
    for jaxpr, chains in ((one, ()), (many, (2,))):
        # Over chains, a leaf has a leading chain axis, or none where vmap kept it unbatched
        # (a counter that is the same for every chain).
        skips = [holds for outs, _, holds in _conds(jaxpr) if len(outs) == len(types) and all(
            shape in (t, chains + t) and dtype == u for (shape, dtype), (t, u) in zip(outs, types))]
        # The skipping cond returns the adaptation state and holds the update's own conds
        # (its windows' ends); computed by a select, those conds would stand alone.
        assert any(skips), chains


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_warmup=-1, num_samples=10), "num_warmup"),
        (dict(num_warmup=10, num_samples=0), "num_samples"),
        (dict(num_warmup=10, num_samples=10, chain_method="threads"), "sharded"),
        (dict(num_warmup=10, num_samples=10, chain_method=jax.pmap), "no other function"),
        (dict(num_warmup=10, num_samples=10, thinning=20), "thinning"),
    ],
)
def test_invalid_mcmc_settings_raise(kwargs, match):
    with pytest.raises(MCMCError, match=match):
        MCMC(NUTS(m.normal_normal), **kwargs)


def test_invalid_kernel_settings_raise():
    with pytest.raises(KernelSettingsError, match="target_accept_prob"):
        NUTS(m.normal_normal, target_accept_prob=1.5)
    with pytest.raises(KernelSettingsError, match="num_steps"):
        HMC(m.normal_normal, num_steps=0)
    with pytest.raises(TypeError, match="dense_mass"):  # (a list of site groups is NumPyro's)
        NUTS(m.normal_normal, dense_mass="yes")
    with pytest.raises(MCMCError, match="NUTS or HMC"):
        MCMC(m.normal_normal, num_warmup=1, num_samples=1)


def test_model_without_continuous_latent_sites_raises():
    def poisson_latent(y):
        k = sample("k", dist.Poisson(2.0))
        sample("y", dist.Normal(k, 1.0), obs=y)

    mcmc = MCMC(NUTS(poisson_latent), num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(MCMCError, match="site `k`.*discrete support without a finite one"):
        mcmc.run(jax.random.key(0), jnp.asarray(0.5))
    # a finite one is summed out, as NumPyro does (with its FutureWarning): no latent site left
    mcmc = MCMC(NUTS(m.discrete_latent), num_warmup=1, num_samples=3, progress_bar=False)
    with pytest.warns(FutureWarning, match="'k'"):
        mcmc.run(jax.random.key(0), jnp.asarray(0.5))
    assert mcmc.get_samples() == {}


def test_model_without_latent_sites_runs_as_numpyros():
    # NumPyro runs such a model and returns its deterministic sites (constant) and no latent
    import numpyro
    from numpyro.infer import MCMC as NpMCMC
    from numpyro.infer import NUTS as NpNUTS

    def model(sample, deterministic):
        def body(y):
            deterministic("d", y * 2)
            sample("y", dist.Normal(0.0, 1.0), obs=y)
        return body
    y = jnp.array([0.5, 1.0])
    ours = MCMC(NUTS(model(effppl.sample, effppl.deterministic)), num_warmup=3, num_samples=4,
                num_chains=2, chain_method="sequential", progress_bar=False)
    ours.run(jax.random.key(0), y)
    theirs = NpMCMC(NpNUTS(model(numpyro.sample, numpyro.deterministic)), num_warmup=3,
                    num_samples=4, num_chains=2, chain_method="sequential", progress_bar=False)
    theirs.run(jax.random.key(0), y)
    got, expected = ours.get_samples(group_by_chain=True), theirs.get_samples(group_by_chain=True)
    assert set(got) == set(expected) == {"d"}
    np.testing.assert_allclose(got["d"], expected["d"])
    assert ours.get_extra_fields(group_by_chain=True)["diverging"].shape == (2, 4)
    for method in ("parallel", "vectorized"):
        empty = MCMC(NUTS(lambda: None), num_warmup=2, num_samples=3, chain_method=method,
                     progress_bar=False)
        empty.run(jax.random.key(0))
        assert empty.get_samples() == {}
        empty.print_summary()


def test_numpyros_callable_chain_method_vmap_runs_vectorized():
    """NumPyro's `chain_method=jax.vmap` (its callable form) is effppl's 'vectorized': the
    same draws."""
    runs = []
    for method in (jax.vmap, "vectorized"):
        mcmc = MCMC(NUTS(m.normal_normal), num_warmup=20, num_samples=10, num_chains=2,
                    chain_method=method, progress_bar=False)
        assert mcmc.chain_method == "vectorized"
        mcmc.run(jax.random.key(0), jnp.asarray([0.5, 1.5]))
        runs.append(mcmc.get_samples(group_by_chain=True))
    for name in runs[0]:
        np.testing.assert_array_equal(runs[0][name], runs[1][name])


def test_results_before_run_raise():
    mcmc = MCMC(NUTS(m.normal_normal), num_warmup=1, num_samples=1)
    with pytest.raises(MCMCError, match="call `mcmc.run"):
        mcmc.get_samples()


def _empty_prediction(x_new):
    a = sample("a", dist.Normal(0.0, 1.0))
    m.deterministic("pred", a * x_new)


def test_a_zero_size_site_flattens_as_numpyros():
    mcmc = _run(NUTS(_empty_prediction), (jnp.zeros(0),), num_warmup=20, num_samples=10)
    samples = mcmc.get_samples()
    assert samples["pred"].shape == (CHAINS * 10, 0) and samples["a"].shape == (CHAINS * 10,)
    from effppl.infer import Predictive
    grouped = mcmc.get_samples(group_by_chain=True)
    predicted = Predictive(_empty_prediction, grouped, batch_ndims=2)(jax.random.key(1),
                                                                     jnp.zeros(0))
    assert predicted["pred"].shape == (CHAINS, 10, 0)
    assert mcmc.to_arviz().posterior["pred"].shape == (CHAINS, 10, 0)


@pytest.mark.slow
def test_init_params_are_unconstrained_starting_points_as_in_numpyro(y):
    from numpyro.infer import MCMC as NumPyroMCMC
    from numpyro.infer import NUTS as NumPyroNUTS

    from effppl.infer import InitializationError

    def scale_model(y):
        sigma = sample("sigma", dist.HalfNormal(1.0))
        sample("y", dist.Normal(0.0, sigma), obs=y)

    # With no warmup and a tiny fixed step, the first draw stays next to the starting point,
    # log(sigma) = 2 (sigma = e^2): init_params are unconstrained, as NumPyro's.
    kernel = dict(step_size=1e-4, adapt_step_size=False, adapt_mass_matrix=False)
    for init, chains in (({"sigma": 2.0}, 2), ({"sigma": jnp.array([2.0, 2.5])}, 2)):
        mcmc = _run(NUTS(scale_model, **kernel), (y,), num_warmup=0, num_samples=1,
                    num_chains=chains)
        mcmc.run(jax.random.key(0), y, init_params=init)
        np.testing.assert_allclose(mcmc.get_samples()["sigma"],
                                   np.exp(np.broadcast_to(init["sigma"], (chains,))), rtol=1e-2)
    import numpyro

    def numpyro_scale_model(y):
        sigma = numpyro.sample("sigma", numpyro.distributions.HalfNormal(1.0))
        numpyro.sample("y", numpyro.distributions.Normal(0.0, sigma), obs=y)

    reference = NumPyroMCMC(NumPyroNUTS(numpyro_scale_model, **kernel), num_warmup=0,
                            num_samples=1, progress_bar=False)
    reference.run(jax.random.PRNGKey(0), y, init_params={"sigma": 2.0})
    np.testing.assert_allclose(reference.get_samples()["sigma"], [np.exp(2.0)], rtol=1e-2)
    mcmc = _run(NUTS(scale_model), (y,), num_warmup=10, num_samples=10)
    for bad, match in (({"tau": 0.0}, r"\['sigma'\], but got \['tau'\]"),
                       ({"sigma": jnp.zeros(3)}, "sigma.*shape \\(\\)"),
                       ({"sigma": jnp.inf}, "not finite"), ([1.0], "expected a dict")):
        with pytest.raises(InitializationError, match=match):
            mcmc.run(jax.random.key(0), y, init_params=bad)
    mcmc.post_warmup_state = mcmc.last_state
    with pytest.raises(MCMCError, match="post_warmup_state"):
        mcmc.run(jax.random.key(0), y, init_params={"sigma": 0.0})
    mcmc.post_warmup_state = {"sigma": 0.0}
    with pytest.raises(MCMCError, match="must be an `MCMCState`"):
        mcmc.run(jax.random.key(0), y)


def test_numpyro_extra_field_names_are_given_when_asked(y):
    mcmc = MCMC(NUTS(m.normal_normal), num_warmup=20, num_samples=10, num_chains=1,
                progress_bar=False)
    mcmc.run(jax.random.key(0), y, extra_fields=("accept_prob", "num_steps", "potential_energy",
                                                 "diverging"))
    stats = mcmc.get_extra_fields()
    np.testing.assert_array_equal(stats["accept_prob"], stats["acceptance_rate"])
    np.testing.assert_array_equal(stats["num_steps"], stats["n_steps"])
    np.testing.assert_allclose(stats["potential_energy"], -stats["lp"])
    with pytest.raises(MCMCError, match=r"cannot record \['mean_accept_prob'\]"):
        mcmc.run(jax.random.key(0), y, extra_fields=("mean_accept_prob",))


def test_predictive_of_draws_grouped_by_chain_says_to_pass_batch_ndims(nuts_run, y):
    from effppl.infer import Predictive, PredictiveError
    with pytest.raises(PredictiveError, match="need `batch_ndims=2`"):
        Predictive(m.normal_normal, nuts_run.get_samples(group_by_chain=True))(jax.random.key(0),
                                                                                 y)


def _groups(y):
    """One latent mean and a plate of observations per row of `y` (a Python loop)."""
    from effppl import plate
    for i in range(y.shape[0]):
        mu = sample(f"mu_{i}", dist.Normal(0.0, 1.0))
        with plate(f"obs_{i}", y.shape[1]):
            sample(f"y_{i}", dist.Normal(mu, 1.0), obs=y[i])


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_fusible_copy_is_bitwise_the_identity(dtype):
    with jax.enable_x64(dtype == jnp.float64):
        finfo = jnp.finfo(dtype)
        x = jnp.asarray([0.0, -0.0, 1.0, -3.5, finfo.max, finfo.tiny, finfo.smallest_subnormal,
                         -finfo.smallest_subnormal, jnp.inf, -jnp.inf, jnp.nan,
                         1.0 + finfo.eps, np.pi], dtype)
        out = jax.jit(_sampler._fusible_copy)(x)
        assert out.dtype == x.dtype
        np.testing.assert_array_equal(np.asarray(out).view(np.uint8), np.asarray(x).view(np.uint8))
        grad = jax.grad(lambda v: jnp.sum(_sampler._fusible_copy(v) * 2.0))(x[:4])
        np.testing.assert_array_equal(grad, 2.0)


def test_potential_with_many_reductions_gives_the_same_draws(monkeypatch):
    """Above `MANY_REDUCTIONS`, the sampler gives XLA its log density through `_fusible_copy`
    (XLA's fusion pass then compiles large Python-loop models in linear time): the draws are
    bitwise those of the program without it."""
    y = jnp.asarray(np.random.default_rng(0).normal(size=(6, 4)))
    structure, dynamic = split_cache_key("test", (y,), {})
    fns = model_fns(_groups, structure, dynamic)
    params = {f"mu_{i}": jax.ShapeDtypeStruct((), y.dtype) for i in range(6)}
    assert fns.reductions(params, dynamic) == 6  # one plate sum per group

    copies = []
    fusible_copy = _sampler._fusible_copy
    monkeypatch.setattr(_sampler, "_fusible_copy", lambda x: copies.append(x) or fusible_copy(x))
    draws = {}
    for threshold, used in ((6, True), (7, False)):
        monkeypatch.setattr(_sampler, "MANY_REDUCTIONS", threshold)
        copies.clear()
        mcmc = _run(NUTS(_groups), (y,), num_warmup=50, num_samples=50, num_chains=1)
        draws[threshold] = mcmc.get_samples()
        assert bool(copies) == used
    for name in draws[6]:
        np.testing.assert_array_equal(draws[6][name], draws[7][name])


def test_hmc_trajectory_length_integrates_for_that_time_as_numpyro():
    """NumPyro's `HMC(trajectory_length=L)`: each transition takes ceil(L / step_size) leapfrog
    steps of size L / n. The draws recover an analytic normal posterior (scales 1, 2, 3); the
    recorded steps are ceil(L / adapted step size); with both given, `num_steps` steps of
    L / num_steps and NumPyro's warning; NUTS accepts the argument and ignores it (NumPyro's
    documented behaviour)."""
    def model():
        sample("x", dist.Normal(jnp.zeros(3), jnp.array([1.0, 2.0, 3.0])))
    mcmc = MCMC(HMC(model, trajectory_length=1.5), num_warmup=500, num_samples=4000,
                progress_bar=False)
    mcmc.run(jax.random.key(0))
    x, stats = mcmc.get_samples()["x"], mcmc.get_extra_fields()
    np.testing.assert_allclose(x.mean(0), 0.0, atol=0.25)
    np.testing.assert_allclose(x.std(0), [1.0, 2.0, 3.0], rtol=0.1)
    np.testing.assert_array_equal(stats["n_steps"],
                                  np.ceil(1.5 / np.asarray(stats["step_size"])).astype(int))
    with pytest.warns(UserWarning, match="step size can't be adapted"):
        both = HMC(model, num_steps=4, trajectory_length=1.5)
    mcmc = MCMC(both, num_warmup=50, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.key(1))
    np.testing.assert_array_equal(mcmc.get_extra_fields()["n_steps"], 4)
    np.testing.assert_allclose(mcmc.get_extra_fields()["step_size"], 1.5 / 4)
    assert HMC(model, num_steps=4, trajectory_length=None).kernel_kwargs() == \
        {"num_integration_steps": 4}
    with pytest.raises(KernelSettingsError, match="trajectory_length"):
        HMC(model, trajectory_length=-1.0)
    with pytest.raises(KernelSettingsError, match="At least one of num_steps or trajectory"):
        HMC(model, num_steps=None, trajectory_length=None)
    assert HMC(model).trajectory_length == pytest.approx(2 * np.pi)  # NumPyro's default
    NUTS(model, trajectory_length=1.5)  # no effect, as in NumPyro


@pytest.mark.slow
@pytest.mark.parametrize("dense", [True, False])
def test_last_state_numpyro_views_match_numpyros_state(dense):
    """`last_state.adapt_state`, `z`, `z_grad`, `potential_energy` as NumPyro's `HMCState`: with
    the same fixed inverse mass matrix, the same keys, shapes and matrices (mass matrix square
    roots) as NumPyro's; one chain has no chain axis, two chains have one."""
    import numpyro
    import numpyro.infer

    def make(sample_fn, d):
        def model():
            sample_fn("b", d.Normal(0.0, 2.0))
            sample_fn("a", d.MultivariateNormal(jnp.zeros(2), jnp.array([[1.0, 0.5], [0.5, 1.0]])))
        return model
    imm = (jnp.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.5]]) if dense
           else jnp.array([2.0, 1.0, 0.5]))
    kw = dict(dense_mass=dense, inverse_mass_matrix={("a", "b"): imm}, adapt_mass_matrix=False)
    theirs = numpyro.infer.MCMC(numpyro.infer.NUTS(make(numpyro.sample, numpyro.distributions),
                                                   **kw), num_warmup=20, num_samples=5,
                                progress_bar=False)
    theirs.run(jax.random.PRNGKey(0))
    ours = MCMC(NUTS(make(sample, dist), **kw), num_warmup=20, num_samples=5, progress_bar=False)
    ours.run(jax.random.key(0))
    a, b = ours.last_state.adapt_state, theirs.last_state.adapt_state
    for field in ("inverse_mass_matrix", "mass_matrix_sqrt", "mass_matrix_sqrt_inv"):
        assert list(getattr(a, field)) == list(getattr(b, field)) == [("a", "b")]
        np.testing.assert_allclose(getattr(a, field)[("a", "b")], getattr(b, field)[("a", "b")],
                                   rtol=1e-5, atol=1e-6)
    assert np.shape(a.step_size) == np.shape(b.step_size) == ()
    state = ours.last_state
    assert {k: np.shape(v) for k, v in state.z.items()} == \
        {k: np.shape(v) for k, v in theirs.last_state.z.items()} == {"a": (2,), "b": ()}
    pe = -effppl.log_density(make(sample, dist), (), {}, state.z)[0]
    np.testing.assert_allclose(state.potential_energy, pe, rtol=1e-5)  # no Jacobians: reals
    grad = jax.grad(lambda z: -effppl.log_density(make(sample, dist), (), {}, z)[0])(state.z)
    for k in grad:
        np.testing.assert_allclose(state.z_grad[k], grad[k], rtol=1e-4, atol=1e-6)
    two = MCMC(NUTS(make(sample, dist), **kw), num_warmup=20, num_samples=5, num_chains=2,
               chain_method="vectorized", progress_bar=False)
    two.run(jax.random.key(0))
    assert np.shape(two.last_state.adapt_state.step_size) == (2,)
    assert np.shape(two.last_state.z["a"]) == (2, 2)
