"""A continuous latent site below an enumerated one (its distribution's parameters depend on the
enumerated value; NumPyro's annotation example, models `id` and `lre`): its unconstrained values
would take the enumeration dims into their shape, a different and improper model, so the
entry points that give latent sites unconstrained values raise, naming both sites. With the
site's value given, the log density sums the discrete site out as the hand-written one does."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from jax.scipy.special import logsumexp

import effppl
from effppl import handlers
from effppl.infer import MCMC, NUTS, config_enumerate
from effppl.primitives import SiteError

Y = np.random.default_rng(0).normal(size=(20,))


@config_enumerate
def model(y):
    mu = effppl.sample("mu", dist.Normal(jnp.zeros(2), 3.0).to_event(1))
    with effppl.plate("data", y.shape[0]):
        c = effppl.sample("c", dist.Categorical(jnp.array([0.3, 0.7])))
        theta = effppl.sample("theta", dist.Normal(mu[c], 1.0))
        effppl.sample("y", dist.Normal(theta, 1.0), obs=y)


def test_mcmc_raises_naming_the_site_and_its_enumerated_parent():
    with pytest.raises(SiteError, match=r"latent site `theta` is not enumerated.*`c`"):
        MCMC(NUTS(model), num_warmup=2, num_samples=2, progress_bar=False).run(
            jax.random.PRNGKey(0), jnp.asarray(Y))


def test_potential_energy_raises():
    params = {"mu": jnp.zeros(2), "theta": jnp.zeros((2, 20))}
    with pytest.raises(SiteError, match="`theta`"):
        handlers.potential_energy(model, (jnp.asarray(Y),), {}, params)


def test_log_density_with_the_value_given_sums_the_discrete_site_out():
    mu, theta = jnp.array([-0.5, 1.0]), jnp.linspace(-1.0, 1.0, 20)
    got, _ = handlers.log_density(model, (jnp.asarray(Y),), {}, {"mu": mu, "theta": theta})
    weights = jnp.log(jnp.array([0.3, 0.7]))
    mixture = logsumexp(weights[:, None] + dist.Normal(mu[:, None], 1.0).log_prob(theta), axis=0)
    want = (dist.Normal(jnp.zeros(2), 3.0).log_prob(mu).sum() + mixture.sum()
            + dist.Normal(theta, 1.0).log_prob(Y).sum())
    np.testing.assert_allclose(got, want, rtol=1e-6)
