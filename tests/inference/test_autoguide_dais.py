"""The annealed-HMC autoguides (`AutoDAIS`, `AutoSemiDAIS`) against NumPyro's on the same model:
param names and shapes after `SVI.init`, the ELBO and the posterior draws at the same params and
key, fits on conjugate models against their analytic posteriors, bad settings, what is not
defined."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer.autoguide as numpyro_autoguide
import optax
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import SVI, Trace_ELBO, autoguide
from effppl.infer.autoguide import AutoGuideError


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def make_model(sample, deterministic):
    def model(y):
        s = sample("s", dist.LogNormal(0.0, 0.5))
        x = sample("x", dist.Normal(jnp.zeros(2), 1.0))
        deterministic("total", x.sum() * s)
        sample("y", dist.Normal(x.sum() * s, 0.3), obs=y)
    return model


def _both(settings, y=0.7):
    model = make_model(effppl.sample, effppl.deterministic)
    np_model = make_model(numpyro.sample, numpyro.deterministic)
    guide = autoguide.AutoDAIS(model, **settings)
    np_guide = numpyro_autoguide.AutoDAIS(np_model, **settings)
    svi = SVI(model, guide, optax.adam(0.01), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), y))
    np_svi = numpyro.infer.SVI(np_model, np_guide, numpyro.optim.Adam(0.01),
                               numpyro.infer.Trace_ELBO())
    np_params = np_svi.get_params(np_svi.init(jax.random.PRNGKey(0), y))
    return (model, guide, params), (np_model, np_guide, np_params)


def _moved(params, base_dist):
    """Params away from their initial values, so that every one of them matters: large steps
    that vary along the schedule, strong damping, an uneven schedule and mass matrix, a base
    elsewhere."""
    out = dict(params, auto_eta0=jnp.asarray(0.06), auto_eta_coeff=jnp.asarray(0.03),
               auto_gamma=jnp.asarray(0.6),
               auto_beta_increments=jnp.array([0.5, 2.0, 1.0, 0.3])[:params[
                   "auto_beta_increments"].shape[0]],
               auto_mass_matrix=jnp.array([0.7, 1.3, 2.0]),
               auto_z_0_loc=jnp.array([0.2, -0.4, 0.9]))
    if base_dist == "diagonal":
        out["auto_z_0_scale"] = jnp.array([0.5, 0.3, 0.8])
    else:
        out["auto_z_0_scale_tril"] = jnp.array([[0.5, 0.0, 0.0], [0.2, 0.3, 0.0],
                                                [-0.1, 0.4, 0.8]])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("settings", [{}, {"base_dist": "cholesky"}, {"K": 1},
                                      {"K": 3, "eta_init": 0.05, "gamma_init": 0.5,
                                       "init_scale": 0.3, "prefix": "dais"}])
def test_params_after_init_are_numpyros(settings):
    (_, _, params), (_, _, np_params) = _both(settings)
    assert {k: v.shape for k, v in params.items()} == {k: v.shape for k, v in np_params.items()}
    for name, value in np_params.items():  # the same initial values (the same init key)
        np.testing.assert_allclose(params[name], value, rtol=1e-12, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("base_dist", ["diagonal", "cholesky"])
def test_loss_at_the_same_params_and_key_is_numpyros(base_dist):
    (model, guide, params), (np_model, np_guide, np_params) = _both({"base_dist": base_dist})
    moved = _moved(np_params, base_dist)
    losses = []
    for seed in (1, 2, 3):
        loss = Trace_ELBO().loss(jax.random.PRNGKey(seed), moved, model, guide, 0.7)
        np_loss = numpyro.infer.Trace_ELBO().loss(jax.random.PRNGKey(seed), moved, np_model,
                                                  np_guide, 0.7)
        np.testing.assert_allclose(loss, np_loss, rtol=1e-10)
        losses.append(float(loss))
    assert len(set(losses)) == 3  # the key matters: the draws are compared, not a constant
    # and the gradient, which SVI follows
    grad = jax.grad(lambda p: Trace_ELBO().loss(jax.random.PRNGKey(4), p, model, guide, 0.7))
    np_grad = jax.grad(lambda p: numpyro.infer.Trace_ELBO().loss(
        jax.random.PRNGKey(4), p, np_model, np_guide, 0.7))
    g, np_g = grad(moved), np_grad(moved)
    for name in np_g:
        np.testing.assert_allclose(g[name], np_g[name], rtol=1e-8, atol=1e-12, err_msg=name)


def test_sample_posterior_is_numpyros():
    (_, guide, params), (_, np_guide, np_params) = _both({})
    moved = _moved(np_params, "diagonal")
    draws = guide.sample_posterior(jax.random.PRNGKey(5), moved, sample_shape=(4,))
    np_draws = np_guide.sample_posterior(jax.random.PRNGKey(5), moved, sample_shape=(4,))
    assert set(draws) == set(np_draws) == {"s", "x", "total"}
    for name, value in np_draws.items():
        assert draws[name].shape == value.shape
        np.testing.assert_allclose(draws[name], value, rtol=1e-10, err_msg=name)


# a conjugate model: mu ~ N(0, 2^2) (2 dims), y_i ~ N(mu, 1); its posterior is normal
Y = jnp.array([[1.2, -0.3], [0.8, 0.1], [1.9, -0.8], [1.1, 0.2], [0.6, -0.5]])
POST_PRECISION = 1 / 4 + Y.shape[0]
POST_MEAN = Y.sum(0) / POST_PRECISION


def conjugate(y):
    mu = effppl.sample("mu", dist.Normal(jnp.zeros(2), 2.0).to_event(1))
    with effppl.plate("data", y.shape[0]):
        effppl.sample("y", dist.Normal(mu, 1.0).to_event(1), obs=y)


@pytest.mark.slow
@pytest.mark.parametrize("base_dist", ["diagonal", "cholesky"])
def test_fit_on_a_conjugate_model_finds_the_analytic_posterior(base_dist):
    guide = autoguide.AutoDAIS(conjugate, K=2, base_dist=base_dist)
    svi = SVI(conjugate, guide, optax.adam(optax.exponential_decay(0.03, 2000, 0.02)),
              Trace_ELBO(num_particles=4))
    result = svi.run(jax.random.PRNGKey(0), 2000, Y, progress_bar=False)
    mu = guide.sample_posterior(jax.random.PRNGKey(1), result.params, sample_shape=(2000,))["mu"]
    assert mu.shape == (2000, 2)
    np.testing.assert_allclose(mu.mean(0), POST_MEAN, atol=0.05)
    np.testing.assert_allclose(mu.std(0), POST_PRECISION ** -0.5, rtol=0.2)
    # the loss at the end is close to minus the model's log evidence (the bound nearly tight):
    # each column of y is normal, mean 0, covariance I + 4 (all ones)
    log_evidence = sum(
        jax.scipy.stats.multivariate_normal.logpdf(Y[:, j], jnp.zeros(5),
                                                   jnp.eye(5) + 4.0 * jnp.ones((5, 5)))
        for j in range(2))
    np.testing.assert_allclose(result.losses[-200:].mean(), -log_evidence, atol=0.1)


@pytest.mark.slow
def test_an_svi_run_is_numpyros_step_for_step():
    def make(sample, plate):
        def model(y):
            mu = sample("mu", dist.Normal(jnp.zeros(2), 2.0).to_event(1))
            with plate("data", y.shape[0]):
                sample("y", dist.Normal(mu, 1.0).to_event(1), obs=y)
        return model
    model, np_model = make(effppl.sample, effppl.plate), make(numpyro.sample, numpyro.plate)
    guide = autoguide.AutoDAIS(model, K=2, base_dist="cholesky")
    np_guide = numpyro_autoguide.AutoDAIS(np_model, K=2, base_dist="cholesky")
    result = SVI(model, guide, optax.adam(0.02), Trace_ELBO(num_particles=2)).run(
        jax.random.PRNGKey(0), 200, Y, progress_bar=False)
    np_result = numpyro.infer.SVI(np_model, np_guide, numpyro.optim.Adam(0.02),
                                  numpyro.infer.Trace_ELBO(num_particles=2)).run(
        jax.random.PRNGKey(0), 200, Y, progress_bar=False)
    np.testing.assert_allclose(result.losses, np_result.losses, rtol=1e-8)
    for name, value in np_result.params.items():
        np.testing.assert_allclose(result.params[name], value, rtol=1e-7, atol=1e-10,
                                   err_msg=name)


@pytest.mark.parametrize("settings, argument, numpyro_raises", [
    ({"K": 0}, "K", True), ({"K": 2.0}, "K", False), ({"K": True}, "K", False),
    ({"base_dist": "full"}, "base_dist", True), ({"base_dist": None}, "base_dist", True),
    ({"eta_init": 0.0}, "eta_init", True), ({"eta_init": 0.2}, "eta_init", True),
    ({"eta_max": -1.0}, "eta_max", True), ({"eta_max": "big"}, "eta_max", False),
    ({"gamma_init": 1.0}, "gamma_init", True), ({"gamma_init": 0.0}, "gamma_init", True),
    ({"init_scale": 0.0}, "init_scale", True),
])
def test_bad_settings_raise_errors_naming_the_argument(settings, argument, numpyro_raises):
    with pytest.raises(AutoGuideError, match=rf"AutoDAIS\({argument}="):
        autoguide.AutoDAIS(conjugate, **settings)
    if numpyro_raises:  # NumPyro's raise a ValueError (an AutoGuideError is one)
        with pytest.raises(ValueError):
            numpyro_autoguide.AutoDAIS(conjugate, **settings)


def test_what_numpyro_does_not_define_raises_as_numpyros():
    (_, guide, params), (_, np_guide, np_params) = _both({})
    for _api, call in [("median", lambda g, p: g.median(p)),
                      ("quantiles", lambda g, p: g.quantiles(p, [0.5])),
                      ("get_base_dist", lambda g, p: g.get_base_dist()),
                      ("get_transform", lambda g, p: g.get_transform(p)),
                      ("get_posterior", lambda g, p: g.get_posterior(p))]:
        with pytest.raises(NotImplementedError):
            call(np_guide, np_params)
        with pytest.raises(NotImplementedError, match="sample_posterior"):
            call(guide, params)


def test_subsampling_raises_as_numpyros():
    def model(y, sample, plate):
        mu = sample("mu", dist.Normal(0.0, 1.0))
        with plate("data", 5, subsample_size=2) as idx:
            sample("y", dist.Normal(mu, 1.0), obs=y[idx])

    y = jnp.arange(5.0)
    with pytest.raises(NotImplementedError, match="subsampl"):
        numpyro.infer.SVI(lambda: model(y, numpyro.sample, numpyro.plate),
                          numpyro_autoguide.AutoDAIS(
                              lambda: model(y, numpyro.sample, numpyro.plate)),
                          numpyro.optim.Adam(0.01), numpyro.infer.Trace_ELBO()).init(
            jax.random.PRNGKey(0))

    def ours():
        model(y, effppl.sample, effppl.plate)
    svi = SVI(ours, autoguide.AutoDAIS(ours), optax.adam(0.01), Trace_ELBO())
    with pytest.raises(NotImplementedError, match="AutoSemiDAIS"):
        svi.init(jax.random.PRNGKey(0))


# -- AutoSemiDAIS: global `theta`, local `tau` in a subsampled plate ---------------------------

YS = np.array([0.3, 1.2, -0.4, 0.9, 2.1, 0.0, 1.5, -1.0])


class GlobalGuide:
    """A hand-written guide of `theta` with a `.model` (one key per run, in both libraries)."""

    def __init__(self, model, sample, param):
        self.model, self.sample, self.param = model, sample, param

    def __call__(self):
        loc = self.param("theta_loc", 0.3)
        scale = self.param("theta_scale", 0.5, constraint=dist.constraints.positive)
        return {"theta": self.sample("theta", dist.Normal(loc, scale))}


def _semi(sample, param, plate):
    def global_model():
        return sample("theta", dist.Normal(0.0, 1.0))

    def local_model(theta):
        with plate("data", 8, subsample_size=3) as idx:
            tau = sample("tau", dist.Gamma(5.0, 5.0))
            sample("obs", dist.Normal(theta, tau), obs=jnp.asarray(YS)[idx])

    return (lambda: local_model(global_model())), local_model, GlobalGuide(global_model, sample,
                                                                           param)


def _semi_both(**settings):
    model, local_model, global_guide = _semi(effppl.sample, effppl.param, effppl.plate)
    np_model, np_local, np_global = _semi(numpyro.sample, numpyro.param, numpyro.plate)
    guide = autoguide.AutoSemiDAIS(model, local_model, global_guide, **settings)
    np_guide = numpyro_autoguide.AutoSemiDAIS(np_model, np_local, np_global, **settings)
    svi = SVI(model, guide, optax.adam(0.01), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0)))
    np_svi = numpyro.infer.SVI(np_model, np_guide, numpyro.optim.Adam(0.01),
                               numpyro.infer.Trace_ELBO())
    np_params = np_svi.get_params(np_svi.init(jax.random.PRNGKey(0)))
    return (model, guide, params), (np_model, np_guide, np_params)


@pytest.mark.slow
@pytest.mark.parametrize("use_global_dais_params", [False, True])
def test_semi_dais_params_after_init_are_numpyros(use_global_dais_params):
    (_, _, params), (_, _, np_params) = _semi_both(K=3,
                                                   use_global_dais_params=use_global_dais_params)
    assert {k: v.shape for k, v in params.items()} == {k: v.shape for k, v in np_params.items()}
    n, k = (8,), (8, 3)
    if use_global_dais_params:
        n, k = (), (3,)
    assert params["auto_eta0"].shape == n and params["auto_beta_increments"].shape == k
    assert params["auto_z_0_loc"].shape == (8, 1)
    for name, value in np_params.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-12, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("use_global_dais_params", [False, True])
def test_semi_dais_loss_at_the_same_params_and_key_is_numpyros(use_global_dais_params):
    (model, guide, _), (np_model, np_guide, np_params) = _semi_both(
        K=3, use_global_dais_params=use_global_dais_params)
    moved = dict(np_params, auto_eta0=np_params["auto_eta0"] * 4,
                 auto_eta_coeff=np_params["auto_eta_coeff"] + 0.01,
                 auto_gamma=np_params["auto_gamma"] * 0.8,
                 auto_z_0_loc=np_params["auto_z_0_loc"] + 0.2,
                 auto_z_0_scale=np_params["auto_z_0_scale"] * 3)
    losses = []
    for seed in (1, 2):
        loss = Trace_ELBO().loss(jax.random.PRNGKey(seed), moved, model, guide)
        np_loss = numpyro.infer.Trace_ELBO().loss(jax.random.PRNGKey(seed), moved, np_model,
                                                  np_guide)
        np.testing.assert_allclose(loss, np_loss, rtol=1e-10)
        losses.append(float(loss))
    assert losses[0] != losses[1]


@pytest.mark.parametrize("settings, argument", [
    ({"K": 0}, "K"), ({"eta_init": 0.5}, "eta_init"), ({"gamma_init": 1.5}, "gamma_init"),
    ({"init_scale": -1.0}, "init_scale"), ({"subsample_plate": 3}, "subsample_plate"),
    ({"use_global_dais_params": "yes"}, "use_global_dais_params"),
    ({"local_guide": 3}, "local_guide"),
])
def test_semi_dais_bad_settings_raise_errors_naming_the_argument(settings, argument):
    model, local_model, global_guide = _semi(effppl.sample, effppl.param, effppl.plate)
    with pytest.raises(AutoGuideError, match=rf"AutoSemiDAIS\({argument}="):
        autoguide.AutoSemiDAIS(model, local_model, global_guide, **settings)
    with pytest.raises(AutoGuideError, match=r"AutoSemiDAIS\(local_model="):
        autoguide.AutoSemiDAIS(model, "local", global_guide)
    # None is accepted when the guide is built (as NumPyro's), and refused at its first call
    guide = autoguide.AutoSemiDAIS(model, None, global_guide)
    with pytest.raises(AutoGuideError, match="expected a callable `local_model`"):
        SVI(model, guide, optax.adam(0.01), Trace_ELBO()).init(jax.random.key(0))
    with pytest.raises(AutoGuideError, match="AutoSemiDAIS cannot be a part"):
        autoguide.AutoGuideList(model).append(guide)


def _local_conjugate(sample, plate):
    def local_conjugate(y):
        with plate("data", y.shape[0]):
            mu = sample("mu", dist.Normal(0.0, 1.0))
            sample("y", dist.Normal(mu, 1.0), obs=y)
    return local_conjugate


local_conjugate = _local_conjugate(effppl.sample, effppl.plate)
_np_local_conjugate = _local_conjugate(numpyro.sample, numpyro.plate)


@pytest.mark.slow
def test_semi_dais_fit_on_a_conjugate_local_model_finds_the_analytic_posterior():
    # no global sites, one plate (named, as NumPyro needs): mu_i | y_i ~ N(y_i / 2, 1 / 2)
    y = jnp.asarray(YS)
    guide = autoguide.AutoSemiDAIS(local_conjugate, local_conjugate, K=2,
                                   subsample_plate="data")
    svi = SVI(local_conjugate, guide, optax.adam(optax.exponential_decay(0.05, 1500, 0.05)),
              Trace_ELBO(num_particles=4))
    result = svi.run(jax.random.PRNGKey(0), 1500, y, progress_bar=False)
    mu = guide.sample_posterior(jax.random.PRNGKey(1), result.params, y,
                                sample_shape=(2000,))["mu"]
    assert mu.shape == (2000, 8)
    np.testing.assert_allclose(mu.mean(0), y / 2, atol=0.06)
    np.testing.assert_allclose(mu.std(0), 0.5 ** 0.5, rtol=0.15)


# -- AutoSemiDAIS with a local guide: the base of the annealing ------------------------------


def _semi_local(sample, param, plate):
    def global_model():
        return sample("theta", dist.Normal(0.0, 1.0))

    def local_model(theta):
        with plate("data", 8, subsample_size=3) as idx:
            tau = sample("tau", dist.Gamma(5.0, 5.0))
            x = sample("x", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
            sample("obs", dist.Normal(theta + x.sum(-1), tau), obs=jnp.asarray(YS)[idx])

    def local_guide(theta):
        with plate("data", 8, subsample_size=3):
            loc = param("tau_loc", jnp.zeros(8), event_dim=0)
            s = param("tau_s", jnp.full(8, 0.3), constraint=dist.constraints.positive,
                      event_dim=0)
            sample("tau", dist.LogNormal(loc + 0.1 * theta, s))
            x_loc = param("x_loc", jnp.zeros((8, 2)), event_dim=1)
            sample("x", dist.Normal(x_loc, 0.5).to_event(1))

    return ((lambda: local_model(global_model())), local_model,
            GlobalGuide(global_model, sample, param), local_guide)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hand_written", "auto_normal"])
def test_semi_dais_local_guide_loss_and_gradient_are_numpyros(kind):
    model, local_model, global_guide, local_guide = _semi_local(effppl.sample, effppl.param,
                                                                effppl.plate)
    np_model, np_local, np_global, np_local_guide = _semi_local(numpyro.sample, numpyro.param,
                                                                numpyro.plate)
    if kind == "auto_normal":
        local_guide, np_local_guide = (autoguide.AutoNormal(local_model),
                                       numpyro_autoguide.AutoNormal(np_local))
    guide = autoguide.AutoSemiDAIS(model, local_model, global_guide, local_guide, K=3)
    np_guide = numpyro_autoguide.AutoSemiDAIS(np_model, np_local, np_global, np_local_guide, K=3)
    svi = SVI(model, guide, optax.adam(0.01), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0)))
    np_svi = numpyro.infer.SVI(np_model, np_guide, numpyro.optim.Adam(0.01),
                               numpyro.infer.Trace_ELBO())
    np_params = np_svi.get_params(np_svi.init(jax.random.PRNGKey(0)))
    assert {k: v.shape for k, v in params.items()} == {k: v.shape for k, v in np_params.items()}
    rng = np.random.default_rng(0)
    moved = {k: v * (0.6 + 0.8 * rng.uniform(size=np.shape(v))) for k, v in np_params.items()}
    moved = {k: v + (0.2 * rng.normal(size=np.shape(v)) if k.endswith(("loc", "coeff")) else 0)
             for k, v in moved.items()}
    moved["auto_eta0"] = moved["auto_eta0"] * 4
    for seed in (1, 2):
        loss, grad = jax.value_and_grad(lambda p: Trace_ELBO().loss(
            jax.random.PRNGKey(seed), p, model, guide))(moved)
        np_loss, np_grad = jax.value_and_grad(lambda p: numpyro.infer.Trace_ELBO().loss(
            jax.random.PRNGKey(seed), p, np_model, np_guide))(moved)
        np.testing.assert_allclose(loss, np_loss, rtol=1e-10)
        for name in np_grad:
            np.testing.assert_allclose(grad[name], np_grad[name], rtol=1e-8, atol=1e-10,
                                       err_msg=name)


def test_semi_dais_local_guide_without_a_local_site_raises_naming_it():
    model, local_model, global_guide, _ = _semi_local(effppl.sample, effppl.param, effppl.plate)

    def local_guide(theta):
        with effppl.plate("data", 8, subsample_size=3):
            effppl.sample("tau", dist.LogNormal(0.0, 0.3))

    guide = autoguide.AutoSemiDAIS(model, local_model, global_guide, local_guide, K=2)
    svi = SVI(model, guide, optax.adam(0.01), Trace_ELBO())
    with pytest.raises(AutoGuideError, match="local latent site `x`"):
        svi.init(jax.random.PRNGKey(0))


@pytest.mark.parametrize("make", [autoguide.AutoDelta, autoguide.AutoDiagonalNormal])
def test_semi_dais_an_autoguide_without_a_density_as_local_guide_raises_naming_it(make):
    model, local_model, global_guide, _ = _semi_local(effppl.sample, effppl.param, effppl.plate)
    with pytest.raises(AutoGuideError, match=rf"local_guide={make.__name__}.*AutoNormal"):
        autoguide.AutoSemiDAIS(model, local_model, global_guide, make(local_model), K=2)


def _conjugate_local_guide(param, sample, plate):
    def local_guide(y):
        with plate("data", y.shape[0]):
            loc = param("mu_loc", jnp.zeros(y.shape[0]))
            scale = param("mu_scale", jnp.full(y.shape[0], 0.5),
                          constraint=dist.constraints.positive)
            sample("mu", dist.Normal(loc, scale))
    return local_guide


@pytest.mark.slow
def test_semi_dais_local_guide_without_subsampling_is_numpyros_and_fits_the_posterior():
    """No subsampling (the plate named by `subsample_plate`), no global sites, a hand-written
    local guide: the loss and gradient at moved params equal NumPyro's, and an SVI fit finds the
    analytic posterior mu_i | y_i ~ N(y_i / 2, 1 / 2)."""
    y = jnp.asarray(YS)
    guide = autoguide.AutoSemiDAIS(
        local_conjugate, local_conjugate,
        local_guide=_conjugate_local_guide(effppl.param, effppl.sample, effppl.plate), K=2,
        subsample_plate="data")
    np_guide = numpyro_autoguide.AutoSemiDAIS(
        _np_local_conjugate, _np_local_conjugate,
        local_guide=_conjugate_local_guide(numpyro.param, numpyro.sample, numpyro.plate), K=2,
        subsample_plate="data")
    svi = SVI(local_conjugate, guide, optax.adam(optax.exponential_decay(0.05, 1500, 0.05)),
              Trace_ELBO(num_particles=4))
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), y))
    np_svi = numpyro.infer.SVI(_np_local_conjugate, np_guide, numpyro.optim.Adam(0.01),
                               numpyro.infer.Trace_ELBO())
    np_params = np_svi.get_params(np_svi.init(jax.random.PRNGKey(0), y))
    assert {k: v.shape for k, v in params.items()} == {k: v.shape for k, v in np_params.items()}
    moved = dict(np_params, mu_loc=np_params["mu_loc"] + 0.3 * y,
                 mu_scale=np_params["mu_scale"] * 1.4, auto_eta0=np_params["auto_eta0"] * 3)
    loss, grad = jax.value_and_grad(lambda p: Trace_ELBO().loss(
        jax.random.PRNGKey(3), p, local_conjugate, guide, y))(moved)
    np_loss, np_grad = jax.value_and_grad(lambda p: numpyro.infer.Trace_ELBO().loss(
        jax.random.PRNGKey(3), p, _np_local_conjugate, np_guide, y))(moved)
    np.testing.assert_allclose(loss, np_loss, rtol=1e-10)
    for name in np_grad:
        np.testing.assert_allclose(grad[name], np_grad[name], rtol=1e-8, atol=1e-10,
                                   err_msg=name)

    result = svi.run(jax.random.PRNGKey(0), 1500, y, progress_bar=False)
    mu = guide.sample_posterior(jax.random.PRNGKey(1), result.params, y,
                                sample_shape=(2000,))["mu"]
    assert mu.shape == (2000, 8)
    np.testing.assert_allclose(mu.mean(0), y / 2, atol=0.06)
    np.testing.assert_allclose(mu.std(0), 0.5 ** 0.5, rtol=0.15)
