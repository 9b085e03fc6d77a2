"""A continuous latent site below an enumerated one (its distribution's parameters depend on the
enumerated value; NumPyro's annotation example, models `id` and `lre`): as in NumPyro, its value
has the shape it has in the model traced with the discrete sites drawn, one value shared by
every enumerated value; its log density broadcasts over the enumeration dims and the
contraction sums the discrete sites out of `p(c) p(z | c) p(x | z, c)`. Oracles: NumPyro on the
same model (`initialize_model`'s potential, `TraceEnum_ELBO`) and the hand-marginalised density."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import numpyro.infer.autoguide
import numpyro.infer.reparam
import optax
import pytest
from jax.scipy.special import logsumexp
from numpyro.contrib.funsor import config_enumerate as numpyro_config_enumerate

import effppl
import effppl.infer.autoguide
import effppl.infer.reparam
from effppl import handlers
from effppl.infer import MCMC, NUTS, SVI, TraceEnum_ELBO, config_enumerate
from effppl.infer.util import initialize_model
from effppl.primitives import SiteError

Y = np.random.default_rng(0).normal(size=(20,))
WEIGHTS = np.array([0.3, 0.7])


def mixture(lib, y):
    """`theta` and `sigma` (positive) depend on the enumerated `c`; the factor after the plate
    reads `theta` whole (its shape is the one without enumeration)."""
    mu = lib.sample("mu", dist.Normal(jnp.zeros(2), 3.0).to_event(1))
    with lib.plate("data", y.shape[0]):
        c = lib.sample("c", dist.Categorical(jnp.asarray(WEIGHTS)))
        theta = lib.sample("theta", dist.Normal(mu[c], 1.0))
        sigma = lib.sample("sigma", dist.LogNormal(0.5 * c, 0.3))
        lib.sample("y", dist.Normal(theta, sigma), obs=y)
    lib.factor("ridge", -0.1 * jnp.sum(theta ** 2))


model = config_enumerate(lambda y: mixture(effppl, y))
numpyro_model = numpyro_config_enumerate(lambda y: mixture(numpyro, y))

POINT = {"mu": np.array([-0.5, 1.0]), "theta": np.linspace(-1.0, 1.0, 20),
         "sigma": np.linspace(-0.4, 0.3, 20)}  # unconstrained: sigma = exp(.); float64


def by_hand(point, y):
    """log p in unconstrained space with `c` summed out of each data point by hand."""
    mu, theta, sigma = point["mu"], point["theta"], jnp.exp(point["sigma"])
    per_c = (jnp.log(WEIGHTS)[:, None] + dist.Normal(mu[:, None], 1.0).log_prob(theta)
             + dist.LogNormal(0.5 * jnp.arange(2.0)[:, None], 0.3).log_prob(sigma))
    return (dist.Normal(jnp.zeros(2), 3.0).log_prob(mu).sum() + logsumexp(per_c, 0).sum()
            + dist.Normal(theta, sigma).log_prob(y).sum() - 0.1 * jnp.sum(theta ** 2)
            + jnp.sum(point["sigma"]))  # log |d sigma / d u|


@pytest.mark.slow
def test_potential_energy_equals_numpyro_and_the_hand_marginalised_density():
    y = jnp.asarray(Y)
    got = handlers.potential_energy(model, (y,), {}, POINT)
    numpyro_info = numpyro.infer.util.initialize_model(jax.random.PRNGKey(0), numpyro_model,
                                                       model_args=(y,))
    np.testing.assert_allclose(got, numpyro_info.potential_fn(POINT), rtol=1e-10)
    np.testing.assert_allclose(got, -by_hand(POINT, y), rtol=1e-10)
    grad = jax.grad(lambda p: handlers.potential_energy(model, (y,), {}, p))(POINT)
    want = jax.grad(lambda p: -by_hand(p, y))(POINT)
    for name in POINT:
        np.testing.assert_allclose(grad[name], want[name], rtol=1e-8, atol=1e-10)


def test_initialize_model_takes_the_shapes_without_enumeration():
    y = jnp.asarray(Y)
    info = initialize_model(jax.random.PRNGKey(0), model, model_args=(y,))
    numpyro_info = numpyro.infer.util.initialize_model(jax.random.PRNGKey(0), numpyro_model,
                                                       model_args=(y,))
    shapes = {k: v.shape for k, v in info.param_info.z.items()}
    assert shapes == {k: v.shape for k, v in numpyro_info.param_info.z.items()}
    assert shapes == {"mu": (2,), "theta": (20,), "sigma": (20,)}
    np.testing.assert_allclose(info.potential_fn(POINT), numpyro_info.potential_fn(POINT),
                               rtol=1e-10)


def test_constrain_fn_gives_values_of_that_shape():
    values = handlers.constrain_fn(model, (jnp.asarray(Y),), {}, POINT)
    assert values["theta"].shape == (20,)
    np.testing.assert_allclose(values["sigma"], jnp.exp(POINT["sigma"]))
    back = handlers.unconstrain_fn(model, (jnp.asarray(Y),), {}, values)
    np.testing.assert_allclose(back["sigma"], POINT["sigma"], rtol=1e-12)


def test_log_density_with_the_values_given_sums_the_discrete_site_out():
    y = jnp.asarray(Y)
    values = dict(POINT, sigma=jnp.exp(POINT["sigma"]))
    got, _ = handlers.log_density(model, (y,), {}, values)
    np.testing.assert_allclose(got, by_hand(POINT, y) - jnp.sum(POINT["sigma"]), rtol=1e-10)


def test_mcmc_draws_have_the_shapes_without_enumeration():
    mcmc = MCMC(NUTS(model), num_warmup=30, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), jnp.asarray(Y))
    draws = mcmc.get_samples()
    assert draws["theta"].shape == (20, 20) and draws["sigma"].shape == (20, 20)
    assert draws["mu"].shape == (20, 2)
    assert jnp.all(draws["sigma"] > 0) and jnp.all(jnp.isfinite(draws["theta"]))


@pytest.mark.parametrize("autoguide", ["AutoNormal", "AutoDelta"])
def test_trace_enum_elbo_with_an_autoguide_gives_numpyros_loss(autoguide):
    """The autoguide on the model with `c` hidden (as NumPyro users write it): its params have
    the shapes without enumeration, and the loss at the initial params is NumPyro's (AutoNormal:
    the same guide draws, as effppl splits keys as NumPyro does; AutoDelta: at `POINT`)."""
    y = jnp.asarray(Y)
    losses, shapes = [], []
    for lib, m in ((effppl, model), (numpyro, numpyro_model)):
        options = {} if autoguide == "AutoNormal" else {"init_loc_fn": lib.infer.init_to_value(
            values=dict(POINT, sigma=np.exp(POINT["sigma"])))}
        guide = getattr(lib.infer.autoguide, autoguide)(lib.handlers.block(m, hide=["c"]),
                                                        **options)
        svi = lib.infer.SVI(m, guide, optax.adam(0.01), lib.infer.TraceEnum_ELBO())
        state = svi.init(jax.random.PRNGKey(1), y)
        shapes.append({k: v.shape for k, v in svi.get_params(state).items()})
        losses.append(svi.evaluate(state, y))
    assert shapes[0] == shapes[1] and shapes[0]["theta_auto_loc"] == (20,)
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-10)


def test_trace_enum_elbo_with_a_point_mass_guide_is_minus_the_marginal_density():
    y = jnp.asarray(Y)

    def guide(y):
        effppl.sample("mu", dist.Delta(effppl.param("mu_loc", POINT["mu"]), event_dim=1))
        with effppl.plate("data", y.shape[0]):
            effppl.sample("theta", dist.Delta(POINT["theta"]))
            effppl.sample("sigma", dist.Delta(jnp.exp(POINT["sigma"])))

    svi = SVI(model, guide, optax.adam(0.01), TraceEnum_ELBO())
    loss = svi.evaluate(svi.init(jax.random.PRNGKey(0), y), y)
    np.testing.assert_allclose(loss, -(by_hand(POINT, y) - jnp.sum(POINT["sigma"])), rtol=1e-10)


def test_a_latent_in_cond_branches_below_an_enumerated_site():
    @config_enumerate
    def branched(y):
        with effppl.plate("data", y.shape[0]):
            c = effppl.sample("c", dist.Bernoulli(0.3))
            theta = jax.lax.cond(y[0] > 0, lambda: effppl.sample("theta", dist.Normal(c, 1.0)),
                                 lambda: effppl.sample("theta", dist.Normal(-c, 2.0)))
            effppl.sample("y", dist.Normal(theta, 1.0), obs=y)

    theta = POINT["theta"]
    for y in (Y, -np.abs(Y)):
        got = handlers.potential_energy(branched, (jnp.asarray(y),), {}, {"theta": theta})
        loc, scale = (np.arange(2.0), 1.0) if y[0] > 0 else (-np.arange(2.0), 2.0)
        per_c = (np.log([0.7, 0.3])[:, None]
                 + dist.Normal(loc[:, None], scale).log_prob(theta))
        want = logsumexp(per_c, 0).sum() + dist.Normal(theta, 1.0).log_prob(y).sum()
        np.testing.assert_allclose(got, -want, rtol=1e-10)


def test_drawing_such_a_latent_under_enum_raises_naming_it():
    with pytest.raises(SiteError, match=r"latent site `theta` has no value.*`c`"):
        handlers.trace(handlers.seed(handlers.enum(model), 0)).get_trace(jnp.asarray(Y))


# --- reparametrized (NumPyro's annotation example, model `id`, on small synthetic data)

ANNOTATIONS = np.random.default_rng(2).integers(0, 3, size=(8, 3))


def item_difficulty(lib, reparam_block, y):
    with lib.plate("class", 3):
        eta = lib.sample("eta", dist.Normal(0, 1).expand([2]).to_event(1))
        chi = lib.sample("chi", dist.HalfNormal(1).expand([2]).to_event(1))
    pi = lib.sample("pi", dist.Dirichlet(jnp.ones(3)))
    with lib.plate("item", y.shape[0], dim=-2):
        c = lib.sample("c", dist.Categorical(pi), infer={"enumerate": "parallel"})
        with reparam_block():
            theta = lib.sample("theta", dist.Normal(eta[c], chi[c]).to_event(1))
        theta = jnp.pad(theta, [(0, 0)] * (jnp.ndim(theta) - 1) + [(0, 1)])
        with lib.plate("position", y.shape[1]):
            lib.sample("y", dist.Categorical(logits=theta), obs=y)


def _reparametrized(lib, scoped):
    config = {"theta": lib.infer.reparam.LocScaleReparam(0)}
    if scoped:
        return lambda y: item_difficulty(lib, lambda: lib.handlers.reparam(config=config), y)
    plain = lambda y: item_difficulty(lib, contextlib.nullcontext, y)  # noqa: E731
    return lib.handlers.reparam(plain, config=config)


@pytest.mark.slow
@pytest.mark.parametrize("scoped", [True, False], ids=["with-block", "wrapping"])
def test_reparametrized_latent_below_an_enumerated_site_gives_numpyros_potential(scoped):
    y = jnp.asarray(ANNOTATIONS)
    numpyro_info = numpyro.infer.util.initialize_model(
        jax.random.PRNGKey(0), _reparametrized(numpyro, scoped), model_args=(y,))
    rng = np.random.default_rng(3)
    point = {k: rng.normal(size=v.shape) * 0.5 for k, v in numpyro_info.param_info.z.items()}
    assert point["theta_decentered"].shape == (8, 1, 2)
    potential = lambda p: handlers.potential_energy(  # noqa: E731
        _reparametrized(effppl, scoped), (y,), {}, p)
    np.testing.assert_allclose(potential(point), numpyro_info.potential_fn(point), rtol=1e-10)
    grad, want = jax.grad(potential)(point), jax.grad(numpyro_info.potential_fn)(point)
    for name in point:
        np.testing.assert_allclose(grad[name], want[name], rtol=1e-8, atol=1e-10)


@pytest.mark.slow
def test_initialize_model_of_a_reparametrized_latent_below_an_enumerated_site():
    # its deterministic `theta` carries the enumeration dim; the model trace recomputes it
    y = jnp.asarray(ANNOTATIONS)
    key = jax.random.PRNGKey(0)
    theirs = numpyro.infer.util.initialize_model(key, _reparametrized(numpyro, False),
                                                 model_args=(y,))
    ours = initialize_model(key, _reparametrized(effppl, False), model_args=(y,))
    assert {k: v.shape for k, v in ours.param_info.z.items()} == \
        {k: v.shape for k, v in theirs.param_info.z.items()}
    point = theirs.param_info.z
    np.testing.assert_allclose(ours.potential_fn(point), theirs.potential_fn(point), rtol=1e-10)
    assert ours.model_trace["theta"]["type"] == "deterministic"
    assert ours.model_trace["theta_decentered"]["value"].shape == (8, 1, 2)


def test_reparametrized_auxiliary_site_sits_in_the_sites_plates():
    y = jnp.asarray(ANNOTATIONS)
    frames = []
    for lib in (effppl, numpyro):
        tr = lib.handlers.trace(lib.handlers.seed(_reparametrized(lib, True), 0)).get_trace(y)
        frames.append([(f.name, f.dim, f.size) for f in tr["theta_decentered"]
                       ["cond_indep_stack"]])
    assert frames[0] == frames[1] == [("item", -2, 8)]


# --- inside a plain `lax.scan`

T = 6
STEPS = np.random.default_rng(4).normal(size=(T,))
LOCS, TRANS = np.array([-1.0, 1.5]), np.array([[0.8, 0.2], [0.3, 0.7]])


@config_enumerate
def scanned_below_top(y):
    """`x`, one per step of a plain scan, depends on `c` enumerated at the top level."""
    mu = effppl.sample("mu", dist.Normal(jnp.zeros(2), 3.0).to_event(1))
    c = effppl.sample("c", dist.Categorical(jnp.asarray(WEIGHTS)))

    def step(total, y_t):
        x = effppl.sample("x", dist.Normal(mu[c], 1.0))
        effppl.sample("obs", dist.Normal(x, 1.0), obs=y_t)
        return total + x, None

    total, _ = jax.lax.scan(step, 0.0, y)
    effppl.factor("ridge", -0.1 * total ** 2)  # `x` has its own shape: `total` is a scalar


@pytest.mark.slow
def test_latent_in_a_scan_below_a_top_level_enumerated_site():
    y, x, mu = jnp.asarray(STEPS), np.linspace(-1.0, 1.0, T), np.array([-0.5, 1.0])
    got = handlers.potential_energy(scanned_below_top, (y,), {}, {"mu": mu, "x": x})
    per_c = np.log(WEIGHTS) + dist.Normal(mu[:, None], 1.0).log_prob(x).sum(-1)
    want = (dist.Normal(jnp.zeros(2), 3.0).log_prob(mu).sum() + logsumexp(per_c)
            + dist.Normal(x, 1.0).log_prob(y).sum() - 0.1 * x.sum() ** 2)
    np.testing.assert_allclose(got, -want, rtol=1e-10)
    info = initialize_model(jax.random.PRNGKey(0), scanned_below_top, model_args=(y,))
    assert info.param_info.z["x"].shape == (T,)


def hmm(y):
    """`x_t` depends on `z_t`, enumerated inside the scan (the forward algorithm)."""
    def step(z_prev, y_t):
        z = effppl.sample("z", dist.Categorical(jnp.asarray(TRANS)[z_prev]),
                          infer={"enumerate": "parallel"})
        x = effppl.sample("x", dist.Normal(jnp.asarray(LOCS)[z], 1.0))
        effppl.sample("obs", dist.Normal(x, 0.5), obs=y_t)
        return z, None

    jax.lax.scan(step, 0, y)


def test_latent_in_an_enumerated_scan_below_its_enumerated_site():
    y, x = jnp.asarray(STEPS), np.linspace(-1.0, 1.0, T)
    got = handlers.potential_energy(hmm, (y,), {}, {"x": x})
    emission = dist.Normal(LOCS[:, None], 1.0).log_prob(x)  # (state, step)
    alpha = np.log(TRANS[0]) + emission[:, 0]
    for t in range(1, T):
        alpha = logsumexp(alpha[:, None] + np.log(TRANS), 0) + emission[:, t]
    want = logsumexp(alpha) + dist.Normal(x, 0.5).log_prob(y).sum()
    np.testing.assert_allclose(got, -want, rtol=1e-10)


def test_a_latent_under_a_vmap_below_an_enumerated_site_raises_naming_it():
    """Its batch dim (the vmap's) sits where the enumeration dim goes: declare it by a plate."""
    @config_enumerate
    def vmapped(y):
        mu = effppl.sample("mu", dist.Normal(jnp.zeros(2), 3.0).to_event(1))
        c = effppl.sample("c", dist.Categorical(jnp.asarray(WEIGHTS)))

        def one(y_i):
            x = effppl.sample("x", dist.Normal(mu[c], 1.0))
            effppl.sample("obs", dist.Normal(x, 1.0), obs=y_i)

        jax.vmap(one)(y)

    with pytest.raises(SiteError, match=r"latent site `x` has shape \(5,\).*`c`.*plate"):
        handlers.potential_energy(vmapped, (jnp.asarray(Y[:5]),), {},
                                  {"mu": POINT["mu"], "x": np.zeros(5)})


@pytest.mark.slow  # two MCMC compilations (~30 s)
def test_mcmc_deterministic_below_an_enumerated_site_keeps_its_enumeration_dim_as_numpyros():
    """A reparametrized latent below an enumerated site is a deterministic function of the
    enumerated value: as in NumPyro's MCMC, each draw holds its value at every enumerated value,
    `eta[c] + chi[c] * theta_decentered` with `c` along its dim (NumPyro's
    `initialize_model(...).postprocess_fn` alone gives one value, at a drawn `c`)."""
    y = jnp.asarray(ANNOTATIONS)
    draws, theirs = [], None
    for lib in (effppl, numpyro):
        mcmc = lib.infer.MCMC(lib.infer.NUTS(_reparametrized(lib, False)), num_warmup=10,
                              num_samples=5, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), y)
        draws.append(mcmc.get_samples())
    draws, theirs = draws
    assert {k: v.shape for k, v in draws.items()} == {k: v.shape for k, v in theirs.items()}
    assert draws["theta"].shape == (5, 3, 8, 1, 2)
    by_hand = (draws["eta"][:, :, None, None, :]
               + draws["chi"][:, :, None, None, :] * draws["theta_decentered"][:, None])
    np.testing.assert_allclose(draws["theta"], by_hand, rtol=1e-12)


@pytest.mark.slow
def test_deterministic_depending_on_a_site_enumerated_in_a_scan_is_nan_not_one_state():
    """Inside an enumerated `lax.scan` the body runs once with the enumerated site at its first
    value; a deterministic site computed from it used to be recorded at that value (`w`
    for `3 z + w`), passing for a draw. Summed out, it has no value: NaN, with a warning; with
    `infer_discrete` it is computed from the drawn path."""
    def model(y):
        w = effppl.sample("w", dist.Normal(0.0, 1.0))

        def step(z_prev, y_t):
            z = effppl.sample("z", dist.Bernoulli(0.3 + 0.4 * z_prev),
                              infer={"enumerate": "parallel"})
            effppl.deterministic("d", 3.0 * z + w)
            effppl.sample("y", dist.Normal(3.0 * z + w, 1.0), obs=y_t)
            return z, None

        jax.lax.scan(step, 0, y)

    y = jnp.array([0.5, 2.0, 3.0])
    with pytest.warns(UserWarning, match="site.*`d`.*enumerated site `z`.*NaN.*infer_discrete"):
        tr = handlers.trace(handlers.substitute(handlers.enum(model), {"w": 0.3})).get_trace(y)
    assert tr["d"]["value"].shape == (3,) and np.all(np.isnan(tr["d"]["value"]))
    samples = {"w": jnp.array([0.3, -0.2])}
    drawn = effppl.infer.Predictive(model, samples, infer_discrete=True)(jax.random.PRNGKey(1), y)
    np.testing.assert_allclose(drawn["d"], 3.0 * drawn["z"] + samples["w"][:, None], rtol=1e-12)
