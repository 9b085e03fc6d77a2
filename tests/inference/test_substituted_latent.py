"""A latent site given a value by a `substitute` inside the model, under inference: the entry
point's values replace it (NumPyro's `potential_energy` and `log_density` substitute over the
model's own handlers), its initial point is that value with NumPyro's "skipping initialization"
warning, and HMC samples it as any latent site. Oracle: NumPyro on the same model."""

import warnings

import jax
import numpy as np
import numpyro
import numpyro.distributions as nd
import numpyro.infer.util as npu
import pytest

import effppl
from effppl import distributions as dist
from effppl import handlers
from effppl.infer import MCMC, NUTS
from effppl.infer.util import initialize_model, potential_energy


def _model(sample, d):
    def model():
        sample("x", d.Normal(0, 1))
        sample("y", d.Normal(0, 2))
    return model


OURS = handlers.substitute(_model(effppl.sample, dist), data={"x": 10.0})
THEIRS = numpyro.handlers.substitute(_model(numpyro.sample, nd), data={"x": 10.0})


@pytest.mark.parametrize("params", [{"x": 1.0, "y": 0.5}, {"x": -3.0, "y": 2.0}])
def test_entry_point_values_replace_the_models_own(params):
    np.testing.assert_allclose(potential_energy(OURS, (), {}, params),
                               npu.potential_energy(THEIRS, (), {}, params), rtol=1e-6)
    np.testing.assert_allclose(effppl.log_density(OURS, (), {}, params)[0],
                               npu.log_density(THEIRS, (), {}, params)[0], rtol=1e-6)
    # without a value for `x`, the model's own (10.0) counts, in both
    np.testing.assert_allclose(effppl.log_density(OURS, (), {}, {"y": 0.5})[0],
                               npu.log_density(THEIRS, (), {}, {"y": 0.5})[0], rtol=1e-6)


def test_mcmc_starts_at_the_stored_value_and_samples_the_site():
    info = initialize_model(jax.random.PRNGKey(0), OURS)
    assert float(info.param_info.z["x"]) == 10.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = MCMC(NUTS(OURS), num_warmup=300, num_samples=2000, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(1))
    assert any("skipping initialization of site 'x' which already stores a value"
               in str(w.message) for w in caught)
    assert not any("maximum tree depth" in str(w.message) for w in caught)
    draws = mcmc.get_samples()
    for name, sd in (("x", 1.0), ("y", 2.0)):  # NumPyro's posterior: the prior
        np.testing.assert_allclose(np.mean(draws[name]), 0.0, atol=0.2 * sd)
        np.testing.assert_allclose(np.std(draws[name]), sd, rtol=0.15)
