"""`Predictive(model, guide=..., params=..., batch_ndims=1)`: params with a leading axis of
particles (NumPyro's `test_predictive_with_particles`), against NumPyro's `Predictive` on the same
model, guide and params."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import Predictive as NumPyroPredictive

import effppl
from effppl.infer import Predictive, PredictiveError


def _model_guide(ppl):
    def model(x, y=None):
        w = ppl.sample("w", dist.Normal(0.0, jnp.ones(3)).to_event(1))
        with ppl.plate("data", x.shape[0]):
            ppl.sample("y", dist.Normal(x @ w, 0.5), obs=y)

    def guide(x, y=None):
        loc = ppl.param("loc", jnp.ones(3))
        assert loc.ndim == 1  # each particle is seen alone, as in NumPyro
        ppl.sample("w", dist.Normal(loc, 0.1).to_event(1))

    return model, guide


X = jnp.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0], [0.5, -1.0, 2.0]])
PARTICLES = {"loc": jnp.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [-2.0, 0.5, 1.0]])}


def test_particles_give_numpyros_shapes_and_distribution():
    n = 4000
    ours = Predictive(*_model_guide(effppl)[:1], guide=_model_guide(effppl)[1],
                      params=PARTICLES, num_samples=n, batch_ndims=1)(jax.random.key(0), X)
    model, guide = _model_guide(numpyro)
    theirs = NumPyroPredictive(model, guide=guide, params=PARTICLES, num_samples=n,
                               batch_ndims=1)(jax.random.key(1), X)
    assert ours["y"].shape == theirs["y"].shape == (n, 3, 4)
    assert "w" not in ours and "w" not in theirs  # the guide's sites are not returned
    # per particle: y's mean is X @ loc_i, its sd sqrt(0.5^2 + 0.1^2 |x|^2)
    exact = np.asarray(PARTICLES["loc"] @ X.T)  # [particle, data]
    sd = np.sqrt(0.25 + 0.01 * np.sum(np.asarray(X) ** 2, -1))
    for draws in (ours, theirs):
        np.testing.assert_allclose(np.mean(draws["y"], 0), exact, atol=4 * sd.max() / np.sqrt(n) * 1.5)
        np.testing.assert_allclose(np.std(draws["y"], 0), np.broadcast_to(sd, exact.shape), rtol=0.06)


def test_default_batch_ndims_with_a_guide_is_zero_as_numpyros():
    model, guide = _model_guide(effppl)
    pred = Predictive(model, guide=guide, params={"loc": jnp.array([1.0, 2.0, 3.0])}, num_samples=7)
    assert pred.batch_ndims == 0
    out = pred(jax.random.key(0), X)
    assert out["y"].shape == (7, 4)
    pred = Predictive(model, guide=guide, params={"loc": jnp.array([1.0, 2.0, 3.0])},
                      num_samples=500, return_sites=["w"])
    np.testing.assert_allclose(np.mean(pred(jax.random.key(1), X)["w"], 0), [1.0, 2.0, 3.0],
                               atol=0.02)
    assert Predictive(model, num_samples=3).batch_ndims == 1


def test_particles_with_different_leading_axes_or_more_batch_dims_raise():
    model, guide = _model_guide(effppl)
    with pytest.raises(PredictiveError, match="same leading axis of particles"):
        Predictive(model, guide=guide, params={"loc": jnp.zeros((3, 3)), "b": jnp.zeros(2)},
                   num_samples=2, batch_ndims=1)
    with pytest.raises(PredictiveError, match="not 2"):
        Predictive(model, guide=guide, params=PARTICLES, num_samples=2, batch_ndims=2)
