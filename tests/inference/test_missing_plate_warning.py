"""NumPyro's loose plate check at `MCMC.run`: a sample site inside some plate whose batch shape
has a dimension longer than 1 that no plate covers gets "Missing a plate statement" naming the
dimension. Oracle: NumPyro's warning on the same models (warns on the same site and dim, or
neither warns)."""

import re
import warnings

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as nd
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import MCMC, NUTS


def _models(sample, plate, d):
    def missing():
        x = sample("x", d.Normal(0, 1))
        with plate("N", 10):
            sample("obs", d.Normal(x, 1), obs=jnp.ones((5, 10)))

    def covered():
        x = sample("x", d.Normal(0, 1))
        with plate("M", 5, dim=-2), plate("N", 10):
            sample("obs", d.Normal(x, 1), obs=jnp.ones((5, 10)))

    def no_plate():  # (loose: a site in no plate is not checked)
        x = sample("x", d.Normal(0, 1))
        sample("obs", d.Normal(x, 1), obs=jnp.ones((5, 10)))

    def latent_missing():
        with plate("N", 3):
            sample("z", d.Normal(jnp.zeros((2, 3)), 1))

    def event_dims_are_fine():
        with plate("N", 3):
            sample("z", d.Normal(jnp.zeros((3, 4)), 1).to_event(1))

    return {"missing": missing, "covered": covered, "no_plate": no_plate,
            "latent_missing": latent_missing, "event_dims_are_fine": event_dims_are_fine}


def _warned(mcmc_cls, kernel_cls, model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc_cls(kernel_cls(model), num_warmup=5, num_samples=5,
                 progress_bar=False).run(jax.random.PRNGKey(1))
    found = [re.search(r"batch dimension (-\d+) at site '(\w+)'", str(w.message))
             for w in caught if "Missing a plate statement" in str(w.message)]
    return sorted((m.group(2), int(m.group(1))) for m in found if m)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::effppl.infer.DivergenceWarning")
@pytest.mark.parametrize("name", ["missing", "covered", "no_plate", "latent_missing",
                                  "event_dims_are_fine"])
def test_missing_plate_warning_as_numpyros(name):
    ours = _warned(MCMC, NUTS, _models(effppl.sample, effppl.plate, dist)[name])
    theirs = _warned(numpyro.infer.MCMC, numpyro.infer.NUTS,
                     _models(numpyro.sample, numpyro.plate, nd)[name])
    assert ours == theirs
    assert bool(ours) == (name in ("missing", "latent_missing"))
