"""Distribution parameters validated as NumPyro does (its validation is on by default): an
invalid parameter passed as an array raises a `ValueError` where NumPyro raises one (eager
`trace`, `log_density`, `potential_energy`, MCMC's initialisation), ours naming the site, the
parameter and its constraint; under `jax.jit` neither checks (NaN, as NumPyro's)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.handlers
import numpyro.infer
import pytest

import effppl
from effppl import InvalidParameterError
from effppl import distributions as dist
from effppl.handlers import potential_energy, seed, trace
from effppl.infer import MCMC, NUTS

NUMPYRO_MESSAGE = "Normal distribution got invalid scale parameter"


def make(ppl):
    def model(s, y=None):
        x = ppl.sample("x", dist.Normal(0.0, s))
        ppl.sample("y", dist.Normal(x, 1.0), obs=y)
    return model


def _entry_points(ppl, handlers, log_density, potential, infer):
    model = make(ppl)
    return {
        "trace": lambda s: handlers.trace(handlers.seed(model, 0)).get_trace(s),
        "log_density": lambda s: log_density(model, (s,), {"y": 1.0}, {"x": 0.3}),
        "potential_energy": lambda s: potential(model, (s,), {"y": 1.0}, {"x": 0.3}),
        "MCMC": lambda s: MCMC_run(infer, model, s),
    }


def MCMC_run(infer, model, s):
    mcmc = infer.MCMC(infer.NUTS(model), num_warmup=5, num_samples=5, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), s, y=1.0)
    return mcmc.get_samples()


OURS = _entry_points(effppl, effppl.handlers, effppl.log_density, potential_energy, effppl.infer)
THEIRS = _entry_points(numpyro, numpyro.handlers, numpyro.infer.util.log_density,
                       numpyro.infer.util.potential_energy, numpyro.infer)


@pytest.mark.parametrize("entry", list(OURS))
def test_invalid_array_parameter_raises_naming_the_site_where_numpyro_raises(entry):
    s = jnp.array(-1.0)
    with numpyro.validation_enabled():
        with pytest.raises(ValueError, match=NUMPYRO_MESSAGE):
            THEIRS[entry](s)
        with pytest.raises(InvalidParameterError,
                           match=r"Site `x`: Normal distribution got invalid scale parameter "
                                 r"\(outside its constraint Positive"):
            OURS[entry](s)


def test_valid_parameters_and_validation_off_give_numpyros_values():
    with numpyro.validation_enabled():
        ours = effppl.log_density(make(effppl), (jnp.array(2.0),), {"y": 1.0}, {"x": 0.3})[0]
        theirs = numpyro.infer.util.log_density(make(numpyro), (jnp.array(2.0),), {"y": 1.0},
                                                {"x": 0.3})[0]
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)
        # under jit neither checks: the compiled program carries no check, the value is NaN
        assert np.isnan(jax.jit(lambda s: effppl.log_density(
            make(effppl), (s,), {"y": 1.0}, {"x": 0.3})[0])(jnp.array(-1.0)))
    with numpyro.validation_enabled(False):
        assert np.isnan(effppl.log_density(make(effppl), (jnp.array(-1.0),), {"y": 1.0},
                                           {"x": 0.3})[0])
        assert np.isnan(numpyro.infer.util.log_density(make(numpyro), (jnp.array(-1.0),),
                                                       {"y": 1.0}, {"x": 0.3})[0])


def test_invalid_parameter_inside_a_plain_scan_names_the_site():
    """NumPyro cannot check a site inside its `scan` (traced); ours is checked as the program
    runs, every step, naming the site and each invalid parameter."""
    def model(scales):
        def step(carry, s):
            return carry, effppl.sample("z", dist.Beta(s, 1.0))
        jax.lax.scan(step, 0.0, scales)

    with numpyro.validation_enabled():
        values = trace(seed(model, 0)).get_trace(jnp.array([1.0, 2.0]))["z"]["value"]
        assert values.shape == (2,) and np.all((values > 0) & (values < 1))
        with pytest.raises(InvalidParameterError,
                           match=r"Site `z`: Beta distribution got invalid concentration1"):
            trace(seed(model, 0)).get_trace(jnp.array([1.0, -2.0]))


def test_mcmc_with_valid_parameters_is_unchanged_by_validation():
    """The compiled sampler carries no check: MCMC's draws are the same with validation on and
    off."""
    draws = []
    for on in (True, False):
        with numpyro.validation_enabled(on):
            mcmc = MCMC(NUTS(make(effppl)), num_warmup=50, num_samples=20, progress_bar=False)
            mcmc.run(jax.random.PRNGKey(1), jnp.array(2.0), y=1.0)
            draws.append(mcmc.get_samples()["x"])
    np.testing.assert_array_equal(draws[0], draws[1])

