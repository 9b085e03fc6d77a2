"""SVI and the ELBOs against oracles: analytic ELBOs, conjugate posteriors, NumPyro's SVI."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.optim
import optax
import pytest
from numpyro.distributions import constraints

import effppl
from effppl import distributions as dist
from effppl.infer import SVI, RenyiELBO, SVIError, SVIState, Trace_ELBO, TraceMeanField_ELBO

from .test_recompile import count_compilations

TAU, SIGMA = 2.0, 1.0


def _normal_model(ppl):
    def model(y):
        mu = ppl.sample("mu", dist.Normal(0.0, TAU))
        with ppl.plate("n", y.shape[0]):
            ppl.sample("y", dist.Normal(mu, SIGMA), obs=y)
    return model


def _normal_guide(ppl):
    def guide(y):
        loc = ppl.param("loc", 0.0)
        scale = ppl.param("scale", 1.0, constraint=constraints.positive)
        ppl.sample("mu", dist.Normal(loc, scale))
    return guide


model, guide = _normal_model(effppl), _normal_guide(effppl)


def _data(n=20, seed=0):
    return jnp.asarray(np.random.RandomState(seed).normal(1.0, SIGMA, n))


def _posterior(y):
    precision = 1 / TAU**2 + len(y) / SIGMA**2
    return float(np.sum(y) / SIGMA**2 / precision), precision**-0.5


def _analytic_elbo(y, m, s):
    """E_q[log p(y | mu) + log p(mu)] + H(q) for q = N(m, s)."""
    n = len(y)
    lik = -0.5 * n * np.log(2 * np.pi * SIGMA**2) - (jnp.sum((y - m) ** 2) + n * s**2) / (2 * SIGMA**2)
    prior = -0.5 * np.log(2 * np.pi * TAU**2) - (m**2 + s**2) / (2 * TAU**2)
    return lik + prior + 0.5 * jnp.log(2 * np.pi * np.e * s**2)


@pytest.mark.parametrize("loss", [Trace_ELBO(num_particles=20_000),
                                  Trace_ELBO(num_particles=2_000, vectorize_particles=False),
                                  TraceMeanField_ELBO(num_particles=20_000)])
def test_loss_is_the_analytic_elbo(loss):
    y = _data()
    params = {"loc": jnp.array(0.7), "scale": jnp.array(0.4)}
    value = loss.loss(jax.random.PRNGKey(0), params, model, guide, y)
    # Monte Carlo sd of one particle's ELBO here is about n * s * |y - m| / sigma^2 ~ 10.
    tol = 5 * 12.0 / np.sqrt(loss.num_particles)
    np.testing.assert_allclose(-value, _analytic_elbo(np.asarray(y), 0.7, 0.4), atol=tol)


def test_mean_field_elbo_uses_the_analytic_kl():
    """With the likelihood term removed (no data), TraceMeanField's ELBO is -KL(q || p) exactly,
    for any number of particles; Trace_ELBO's is only a noisy estimate of it."""
    def prior_only(y):
        effppl.sample("mu", dist.Normal(0.0, TAU))

    y = jnp.zeros((3,))
    params = {"loc": jnp.array(0.7), "scale": jnp.array(0.4)}
    kl = float(dist.kl_divergence(dist.Normal(0.7, 0.4), dist.Normal(0.0, TAU)))
    value = TraceMeanField_ELBO().loss(jax.random.PRNGKey(3), params, prior_only, guide, y)
    np.testing.assert_allclose(value, kl, rtol=1e-12)
    noisy = Trace_ELBO().loss(jax.random.PRNGKey(3), params, prior_only, guide, y)
    assert abs(noisy - kl) > 1e-6


def _batched_prior(form):
    """A prior-only model of four N(0, 1) latents, in a plate, a plain `lax.scan`, a `jax.vmap`
    or as one `to_event(1)` site."""
    def model():
        if form == "plate":
            with effppl.plate("n", 4):
                effppl.sample("x", dist.Normal(0.0, 1.0))
        elif form == "scan":
            jax.lax.scan(lambda c, _: (c, effppl.sample("x", dist.Normal(0.0, 1.0))), 0.0,
                         None, length=4)
        elif form == "vmap":
            jax.vmap(lambda _: effppl.sample("x", dist.Normal(0.0, 1.0)))(jnp.arange(4))
        else:
            effppl.sample("x", dist.Normal(0.0, 1.0).expand([4]).to_event(1))
    return model


@pytest.mark.slow
@pytest.mark.parametrize("form", ["plate", "scan", "vmap", "event"])
def test_mean_field_elbo_of_an_autonormal_on_batched_sites_is_the_exact_kl(form):
    """AutoNormal's sites are `Delta`s carrying its Normal: with no data the loss is the sum of
    the four KL(N(m_i, s_i) || N(0, 1)), exactly, at any key (it once broadcast the whole value's
    log density over the batch: -4.1 for 0.80 in a plate, silently)."""
    from effppl.infer.autoguide import AutoNormal

    model = _batched_prior(form)
    auto = AutoNormal(model)
    SVI(model, auto, optax.adam(0.01), Trace_ELBO()).init(jax.random.PRNGKey(0))
    m, s = jnp.array([0.1, 0.2, 0.3, 0.4]), jnp.array([0.5, 0.6, 0.7, 0.8])
    params = {"x_auto_loc": m, "x_auto_scale": s}
    exact = float(np.sum(-np.log(s) + (s**2 + m**2) / 2 - 0.5))
    for key in range(2):
        value = TraceMeanField_ELBO().loss(jax.random.PRNGKey(key), params, model, auto)
        np.testing.assert_allclose(value, exact, rtol=1e-6)


@pytest.mark.slow
def test_mean_field_elbo_of_autoguides_equals_numpyros():
    """NumPyro's TraceMeanField_ELBO on the same model, guide and params, for AutoNormal (its
    analytic KL per site, a positive site by Monte Carlo) and AutoDiagonalNormal (Monte Carlo
    throughout): equal at the same key."""
    import numpyro.infer.autoguide

    import effppl.infer.autoguide

    y = _data(n=6)

    def make(ppl):
        def model(y):
            mu = ppl.sample("mu", dist.Normal(0.0, 1.0))
            s = ppl.sample("s", dist.LogNormal(0.0, 1.0))
            with ppl.plate("k", 3):
                z = ppl.sample("z", dist.Normal(mu, 1.0))
            with ppl.plate("n", 6):
                ppl.sample("y", dist.Normal(jnp.repeat(z, 2), s), obs=y)
        return model

    for name in ("AutoNormal", "AutoDiagonalNormal"):
        values = []
        for ppl, infer in ((effppl, effppl.infer), (numpyro, numpyro.infer)):
            model = make(ppl)
            auto = getattr(infer.autoguide, name)(model)
            svi = infer.SVI(model, auto, numpyro.optim.Adam(0.01), infer.Trace_ELBO())
            params = svi.get_params(svi.init(jax.random.PRNGKey(0), y))
            params = jax.tree.map(lambda v: v + 0.1, params)
            loss = infer.TraceMeanField_ELBO(num_particles=100)
            values.append(float(loss.loss(jax.random.PRNGKey(1), params, model, auto, y)))
        np.testing.assert_allclose(values[0], values[1], rtol=1e-5)


def test_renyi_elbo_with_exact_guide_is_the_log_evidence():
    """With q the exact posterior, log p - log q = log p(y) for every draw: Rényi's bound (any
    alpha) and the ELBO are the log evidence."""
    y = _data(n=5)
    m, s = _posterior(np.asarray(y))
    params = {"loc": jnp.array(m), "scale": jnp.array(s)}
    cov = SIGMA**2 * np.eye(5) + TAU**2
    log_evidence = float(dist.MultivariateNormal(jnp.zeros(5), jnp.asarray(cov)).log_prob(y))
    for loss in (RenyiELBO(alpha=0.5, num_particles=3), RenyiELBO(alpha=0.0), Trace_ELBO()):
        value = loss.loss(jax.random.PRNGKey(1), params, model, guide, y)
        np.testing.assert_allclose(-value, log_evidence, rtol=1e-9)
    with pytest.raises(effppl.infer.ELBOError, match="alpha=1"):
        RenyiELBO(alpha=1.0)


@pytest.mark.parametrize("loss", [Trace_ELBO(num_particles=4), TraceMeanField_ELBO()])
def test_svi_recovers_the_normal_normal_posterior(loss):
    y = _data()
    m, s = _posterior(np.asarray(y))
    optim = optax.adam(optax.exponential_decay(0.05, 2000, 0.05))
    result = SVI(model, guide, optim, loss).run(jax.random.PRNGKey(0), 3000, y,
                                                 progress_bar=False)
    assert result.losses.shape == (3000,) and np.all(np.isfinite(result.losses))
    np.testing.assert_allclose(result.params["loc"], m, atol=0.02)
    np.testing.assert_allclose(result.params["scale"], s, rtol=0.1)


@pytest.mark.slow
def test_svi_recovers_the_beta_binomial_posterior():
    def bb_model(k, n):
        p = effppl.sample("p", dist.Beta(2.0, 3.0))
        effppl.sample("k", dist.Binomial(n, p), obs=k)

    def bb_guide(k, n):
        a = effppl.param("a", 1.0, constraint=constraints.positive)
        b = effppl.param("b", 1.0, constraint=constraints.positive)
        effppl.sample("p", dist.Beta(a, b))

    optim = optax.adam(optax.exponential_decay(0.05, 3000, 0.05))
    svi = SVI(bb_model, bb_guide, optim, TraceMeanField_ELBO(num_particles=8))
    result = svi.run(jax.random.PRNGKey(0), 4000, jnp.asarray(7), jnp.asarray(10),
                     progress_bar=False)
    mean = result.params["a"] / (result.params["a"] + result.params["b"])
    np.testing.assert_allclose(mean, 9 / 15, atol=0.02)   # Beta(2 + 7, 3 + 3)
    np.testing.assert_allclose(result.params["a"] + result.params["b"], 15.0, rtol=0.2)


def _numpyro_value_and_grad(loss, params, numpyro_model, numpyro_guide, y, seed):
    def f(p):
        return loss.loss(jax.random.PRNGKey(seed), p, numpyro_model, numpyro_guide, y)
    return jax.value_and_grad(f)(params)


def test_loss_and_gradient_equal_numpyros_for_a_deterministic_guide():
    y = _data()

    def delta_guide(ppl):
        def g(y):
            loc = ppl.param("loc", 0.0)
            ppl.sample("mu", dist.Delta(loc))
        return g

    params = {"loc": jnp.array(0.3)}
    ours = jax.value_and_grad(lambda p: Trace_ELBO().loss(
        jax.random.PRNGKey(0), p, model, delta_guide(effppl), y))(params)
    theirs = _numpyro_value_and_grad(numpyro.infer.Trace_ELBO(), params,
                                     _normal_model(numpyro), delta_guide(numpyro), y, 0)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12)
    np.testing.assert_allclose(ours[1]["loc"], theirs[1]["loc"], rtol=1e-12)


def test_loss_and_gradient_agree_with_numpyros_over_many_particles():
    y = _data()
    params = {"loc": jnp.array(0.5), "scale": jnp.array(0.6)}
    n = 20_000
    ours = jax.value_and_grad(lambda p: Trace_ELBO(num_particles=n).loss(
        jax.random.PRNGKey(0), p, model, guide, y))(params)
    theirs = _numpyro_value_and_grad(numpyro.infer.Trace_ELBO(num_particles=n), params,
                                     _normal_model(numpyro), _normal_guide(numpyro), y, 1)
    np.testing.assert_allclose(ours[0], theirs[0], atol=5 * 15 / np.sqrt(n))
    for name in params:
        np.testing.assert_allclose(ours[1][name], theirs[1][name], atol=5 * 25 / np.sqrt(n))
    # and the exact gradient of the analytic ELBO at these params
    exact = jax.grad(lambda m, s: -_analytic_elbo(np.asarray(y), m, s), argnums=(0, 1))(0.5, 0.6)
    np.testing.assert_allclose(ours[1]["loc"], exact[0], atol=5 * 25 / np.sqrt(n))


def test_update_stable_update_evaluate_get_params():
    y = _data()
    svi = SVI(model, guide, optax.sgd(0.01), Trace_ELBO())
    state = svi.init(jax.random.PRNGKey(0), y)
    assert isinstance(state, SVIState)
    np.testing.assert_allclose(svi.get_params(state)["scale"], 1.0)
    np.testing.assert_allclose(svi.evaluate(state, y), svi.evaluate(state, y))
    state2, loss = svi.update(state, y)
    assert np.isfinite(loss)
    assert float(svi.get_params(state2)["loc"]) != 0.0
    state3, _ = svi.stable_update(state2, y)
    assert float(svi.get_params(state3)["loc"]) != float(svi.get_params(state2)["loc"])
    init = svi.init(jax.random.PRNGKey(0), y, init_params={"loc": 2.0})
    np.testing.assert_allclose(svi.get_params(init)["loc"], 2.0)
    with pytest.raises(SVIError, match="nope"):
        svi.init(jax.random.PRNGKey(0), y, init_params={"nope": 1.0})


def test_numpyro_optimisers_are_accepted_and_match_optax():
    y = _data()
    runs = [SVI(model, guide, optim, Trace_ELBO()).run(jax.random.PRNGKey(0), 50, y,
                                                       progress_bar=False)
            for optim in (optax.adam(0.05), numpyro.optim.Adam(0.05))]
    for name in ("loc", "scale"):
        np.testing.assert_allclose(runs[0].params[name], runs[1].params[name], rtol=1e-6)
    with pytest.raises(effppl.infer.OptimizerError, match="optax"):
        SVI(model, guide, "adam", Trace_ELBO())


def test_run_in_chunks_equals_one_call():
    y = _data()
    svi = SVI(model, guide, optax.adam(0.05), Trace_ELBO())
    a = svi.run(jax.random.PRNGKey(0), 45, y, progress_bar=False)
    b = svi.run(jax.random.PRNGKey(0), 45, y, progress_bar=True)
    np.testing.assert_allclose(a.losses, b.losses, rtol=1e-10)
    np.testing.assert_allclose(a.params["loc"], b.params["loc"], rtol=1e-10)
    c = svi.run(jax.random.PRNGKey(0), 20, y, progress_bar=False, init_state=a.state)
    assert c.losses.shape == (20,)


def _log_model(y):
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
    effppl.factor("f", jnp.log(mu))  # NaN for mu < 0


def _delta_guide(y):
    effppl.sample("mu", dist.Delta(effppl.param("mu_loc", 2.0)))


def test_nonfinite_loss_names_the_step_and_param():
    svi = SVI(_log_model, _delta_guide, optax.sgd(5.0), Trace_ELBO())
    with pytest.raises(SVIError, match=r"step 1 .*model site `f`") as info:
        svi.run(jax.random.PRNGKey(0), 10, jnp.zeros(()), progress_bar=False)
    result = info.value.result  # step 0 (finite loss) moved mu from 2 to 2 - 5 * 1.5 = -5.5
    assert result.losses.shape == (1,)
    np.testing.assert_allclose(result.params["mu_loc"], -5.5)
    with pytest.warns(RuntimeWarning, match="skipped"):
        out = svi.run(jax.random.PRNGKey(0), 10, jnp.zeros(()), progress_bar=False,
                      stable_update=True)
    np.testing.assert_allclose(out.params["mu_loc"], -5.5)  # every later step is skipped


def test_an_initial_param_outside_its_constraint_is_an_error_at_init():
    """NumPyro raises at `init` (its distributions' checks, eager there); effppl names the param
    and its constraint instead of starting from a NaN unconstrained value."""
    def bad_guide(y):
        loc = effppl.param("loc", 0.0)
        scale = effppl.param("scale", -1.0, constraint=constraints.positive)
        effppl.sample("mu", dist.Normal(loc, scale))

    y = _data(n=3)
    svi = SVI(model, bad_guide, optax.adam(0.1), Trace_ELBO())
    with pytest.raises(SVIError, match=r"param `scale` \(constraint Positive"):
        svi.init(jax.random.PRNGKey(0), y)
    with pytest.raises(SVIError, match=r"param `scale`"):
        SVI(model, guide, optax.adam(0.1), Trace_ELBO()).init(
            jax.random.PRNGKey(0), y, init_params={"scale": jnp.array(-2.0)})
    with pytest.raises(ValueError, match="scale"):  # NumPyro refuses it too
        numpyro.infer.SVI(_normal_model(numpyro), bad_guide_numpyro, numpyro.optim.Adam(0.1),
                          numpyro.infer.Trace_ELBO()).init(jax.random.PRNGKey(0), y)


def bad_guide_numpyro(y):
    loc = numpyro.param("loc", 0.0)
    scale = numpyro.param("scale", -1.0, constraint=constraints.positive)
    numpyro.sample("mu", dist.Normal(loc, scale))


def test_a_step_that_makes_the_params_nonfinite_is_reported_not_dropped():
    """A NaN learning rate: each loss is finite (taken at the old params), the new params are
    not. NumPyro returns NaN params; effppl raises naming the step (before: the steps were
    silently skipped and the initial params came back with normal-looking losses)."""
    svi = SVI(model, guide, optax.sgd(float("nan")), Trace_ELBO())
    with pytest.raises(SVIError, match=r"made the params non-finite at step 0"):
        svi.run(jax.random.PRNGKey(0), 20, _data(), progress_bar=False)
    with pytest.warns(RuntimeWarning, match="20 of 20 steps"):
        svi.run(jax.random.PRNGKey(0), 20, _data(), progress_bar=False, stable_update=True)


@pytest.mark.parametrize("elbo", [Trace_ELBO(), TraceMeanField_ELBO(), RenyiELBO(0.5)])
def test_model_and_guide_shapes_must_agree(elbo):
    """As NumPyro's `check_model_guide_match`: a scalar guide value for a site in a plate of 3
    is an error naming the site (before: it broadcast, and the ELBO was another number)."""
    def plate_model():
        with effppl.plate("N", 3):
            effppl.sample("z", dist.Normal(0.0, 1.0))

    def scalar_guide():
        effppl.sample("z", dist.Normal(effppl.param("loc", 0.0), 1.0))

    def plate_guide():
        with effppl.plate("N", 3):
            effppl.sample("z", dist.Normal(effppl.param("loc", jnp.zeros(3)), 1.0))

    with pytest.raises(effppl.infer.ELBOError, match=r"disagree at site `z`.*\(3,\).*\(\)"):
        elbo.loss(jax.random.PRNGKey(0), {"loc": 0.0}, plate_model, scalar_guide)
    loss = elbo.loss(jax.random.PRNGKey(0), {"loc": jnp.zeros(3)}, plate_model, plate_guide)
    assert np.isfinite(float(loss))


def test_new_data_of_the_same_shapes_compiles_nothing():
    y = _data()
    svi = SVI(model, guide, optax.adam(0.05), Trace_ELBO())
    first = svi.run(jax.random.PRNGKey(0), 100, y, progress_bar=False)
    state, _ = svi.update(first.state, y)
    up, down = y + 5.0, y - 5.0
    with count_compilations() as count:
        again = SVI(model, guide, svi.optim, svi.loss).run(jax.random.PRNGKey(1), 100, up,
                                                          progress_bar=False)
        state, loss = svi.update(again.state, down)
        float(loss)
    assert count[0] == 0
    assert float(again.params["loc"]) > float(first.params["loc"]) + 2.0  # the new data were used


def test_model_params_are_fitted_by_maximum_likelihood():
    """A model param and an empty guide: the ELBO is the log likelihood, maximised at the MLE."""
    def scale_model(y):
        sigma = effppl.param("sigma", 1.0, constraint=constraints.positive)
        with effppl.plate("n", y.shape[0]):
            effppl.sample("y", dist.Normal(0.0, sigma), obs=y)

    y = _data(n=200)
    svi = SVI(scale_model, lambda y: None, optax.adam(0.05), Trace_ELBO())
    result = svi.run(jax.random.PRNGKey(0), 1500, y, progress_bar=False)
    np.testing.assert_allclose(result.params["sigma"], np.sqrt(np.mean(np.asarray(y) ** 2)),
                               rtol=1e-3)


def test_nan_data_loss_is_numpyros_and_the_error_says_nan():
    """NumPyro 0.22 validates samples by default: a NaN observation is out of the support, its
    log density -inf, so the loss is +inf in both (not NaN); effppl's error says the data hold
    NaN."""
    y = _data(5).at[2].set(jnp.nan)
    params = {"loc": 0.5, "scale": 0.7}
    ours = Trace_ELBO().loss(jax.random.PRNGKey(0), params, model, guide, y)
    theirs = numpyro.infer.Trace_ELBO().loss(jax.random.PRNGKey(0), params, _normal_model(numpyro),
                                             _normal_guide(numpyro), y)
    assert float(ours) == float(theirs) == np.inf
    svi = SVI(model, guide, optax.adam(0.1), Trace_ELBO())
    with pytest.raises(SVIError, match=r"step 0 .*the data of model site `y` hold NaN"):
        svi.run(jax.random.PRNGKey(0), 5, y, progress_bar=False)


def test_num_steps_must_be_a_positive_int_not_a_bool():
    svi = SVI(model, guide, optax.adam(0.1), Trace_ELBO())
    for bad in (True, 0, 2.5, "10", None):
        with pytest.raises(SVIError, match="num_steps=.*expected a positive int"):
            svi.run(jax.random.PRNGKey(0), bad, _data(), progress_bar=False)


def test_model_takes_the_guides_subsample_as_numpyro_replays_it():
    """A subsampled plate in guide and model: the model uses the indices the guide drew (before,
    it drew its own, so guide and model scored different data points)."""
    y = jnp.arange(10.0)

    def pair(ppl):
        def model(y):
            with ppl.plate("n", 10, subsample_size=4) as idx:
                z = ppl.sample("z", dist.Normal(0.0, 1.0))
                ppl.sample("y", dist.Normal(z, 1.0), obs=y[idx])

        def guide(y):
            with ppl.plate("n", 10, subsample_size=4):
                loc = ppl.param("loc", jnp.zeros(10), event_dim=0)
                ppl.sample("z", dist.Normal(loc, 1.0))
        return model, guide

    params = {"loc": jnp.arange(10.0) * 0.5}
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        ours = jax.value_and_grad(lambda p: Trace_ELBO().loss(key, p, *pair(effppl), y))(params)
        theirs = jax.value_and_grad(
            lambda p: numpyro.infer.Trace_ELBO().loss(key, p, *pair(numpyro), y))(params)
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-10)
        np.testing.assert_allclose(ours[1]["loc"], theirs[1]["loc"], rtol=1e-10, atol=1e-12)


def test_jax_example_libraries_optimisers_step_as_numpyros():
    """A `jax.example_libraries.optimizers` triple, as NumPyro's SVI takes it: the same params
    as NumPyro's after the same steps; `svi.optim` has NumPyro's `get_params`."""
    from jax.example_libraries import optimizers

    y = _data()
    ours = SVI(model, guide, optimizers.adam(0.05), Trace_ELBO())
    theirs = numpyro.infer.SVI(_normal_model(numpyro), _normal_guide(numpyro),
                               optimizers.adam(0.05), numpyro.infer.Trace_ELBO())
    state = ours.init(jax.random.PRNGKey(0), y)
    assert ours.optim.get_params(state.optim_state).keys() == {"loc", "scale"}
    ours_run = ours.run(jax.random.PRNGKey(0), 30, y, progress_bar=False)
    theirs_run = theirs.run(jax.random.PRNGKey(0), 30, y, progress_bar=False)
    for name in ("loc", "scale"):
        np.testing.assert_allclose(ours_run.params[name], theirs_run.params[name], rtol=1e-5)


def test_a_param_without_init_value_takes_the_guides_or_init_params():
    """As NumPyro's SVI: a model param without `init_value` takes the guide's param of that
    name; params without one take `init_params`; the common param is fitted."""
    def common_model():
        common = effppl.param("common")
        effppl.factor("neg_loss", -((common - 5.0) ** 2))

    def common_guide():
        effppl.param("common", 1.0)

    svi = SVI(common_model, common_guide, optax.adam(0.05), Trace_ELBO())
    result = svi.run(jax.random.PRNGKey(0), 1000, progress_bar=False)
    np.testing.assert_allclose(result.params["common"], 5.0, atol=0.05)

    def model_b():
        effppl.param("a", 0.0)
        effppl.param("b")

    def guide_c():
        effppl.param("c")

    svi = SVI(model_b, guide_c, optax.adam(0.01), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), init_params={"b": 1.0, "c": 2.0}))
    assert params == {"a": 0.0, "b": 1.0, "c": 2.0}
    with pytest.raises(effppl.SiteError, match=r"param\('c'\) expected an `init_value`"):
        svi.init(jax.random.PRNGKey(0), init_params={"b": 1.0})
