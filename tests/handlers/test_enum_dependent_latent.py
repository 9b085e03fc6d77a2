"""A continuous latent site below an enumerated one (its distribution's parameters depend on the
enumerated value; NumPyro's annotation example, models `id` and `lre`): as in NumPyro, its value
has the shape it has in the model traced with the discrete sites drawn, one value shared by
every enumerated value; its log density broadcasts over the enumeration dims and the
contraction sums the discrete sites out of `p(c) p(z | c) p(x | z, c)`. Oracles: NumPyro on the
same model (`initialize_model`'s potential, `TraceEnum_ELBO`) and the hand-marginalised density."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import numpyro.infer.autoguide
import optax
import pytest
from jax.scipy.special import logsumexp
from numpyro.contrib.funsor import config_enumerate as numpyro_config_enumerate

import effppl
import effppl.infer.autoguide
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
