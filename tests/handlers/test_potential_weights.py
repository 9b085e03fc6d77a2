"""`handlers.mask` and `handlers.scale` weigh a latent site's log|det J| element by element, as
NumPyro's potential does (it adds the Jacobian as a factor site beside the site)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.handlers as nh
import pytest
from numpyro.infer.util import potential_energy as np_potential_energy

import effppl
from effppl import distributions as dist
from effppl import handlers


def _models(body):
    return body(effppl.sample, handlers), body(numpyro.sample, nh)


def _scale_array(sample, h):
    def model():
        with h.scale(scale=jnp.array([0.5, 2.0, 3.0])):
            sample("b", dist.Exponential(jnp.ones(3)))
            sample("w", dist.Dirichlet(jnp.ones((3, 4))))
    return model


def _scale_in_plate(sample, h):
    def model():
        with numpyro.plate("g", 2) if h is nh else effppl.plate("g", 2):
            with h.scale(scale=jnp.array([0.25, 4.0])):
                sample("s", dist.LogNormal(0.0, 1.0))
    return model


def _mask_array(sample, h):
    def model():
        sample("a", dist.HalfNormal(1.0))
        with h.mask(mask=jnp.array([True, False])):
            sample("c", dist.HalfNormal(jnp.ones(2)))
        with h.mask(mask=False):
            sample("d", dist.Gamma(2.0, 1.0))
    return model


def _masked_distribution(sample, h):  # `Distribution.mask`: the Jacobian stays, as in NumPyro
    def model():
        sample("c", dist.HalfNormal(jnp.ones(2)).mask(jnp.array([False, True])))
    return model


CASES = {
    "scale array": (_scale_array, {"b": [0.1, -0.2, 0.3], "w": np.linspace(-1, 1, 9).reshape(3, 3)}),
    "scale in plate": (_scale_in_plate, {"s": [0.4, -0.8]}),
    "mask": (_mask_array, {"a": -0.4, "c": [0.3, 0.7], "d": 0.2}),
    "masked distribution": (_masked_distribution, {"c": [0.3, 0.7]}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_weighted_jacobians_match_numpyro(case):
    body, point = CASES[case]
    params = {name: jnp.asarray(value, jnp.float64) for name, value in point.items()}
    ours, theirs = _models(body)

    def effppl_potential(p):
        return handlers.potential_energy(ours, (), {}, p)

    def numpyro_potential(p):
        return np_potential_energy(theirs, (), {}, p)

    np.testing.assert_allclose(effppl_potential(params), numpyro_potential(params), rtol=1e-12)
    got, want = jax.grad(effppl_potential)(params), jax.grad(numpyro_potential)(params)
    for name in params:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-14)
