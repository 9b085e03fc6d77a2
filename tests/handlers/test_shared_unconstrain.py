"""`potential_energy` traces its unconstraining clause once per distinct site signature (sites
outside loops with the same distribution types and shapes share one jaxpr, each reading its own
value), and still gives each site its own value: checked against NumPyro's potential."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.infer.util import potential_energy as np_potential_energy

import effppl
from effppl import distributions as dist
from effppl import handlers
from effppl.effects import _clauses
from effppl.handlers import _density


def _model(sample, plate):
    def model(y):
        scales = [sample(f"s{i}", dist.HalfNormal(1.0 + i)) for i in range(4)]  # one signature
        locs = [sample(f"m{i}", dist.Normal(0.0, 2.0)) for i in range(3)]  # another
        w = sample("w", dist.LogNormal(jnp.zeros(2), 1.0))
        u = sample("u", dist.Uniform(0.0, scales[0]))  # support from another latent
        with plate("data", y.shape[0]):
            sample("y", dist.Normal(sum(locs) + w[0] * u, scales[1] + w[1]), obs=y)
    return model


Y = np.array([0.3, -1.2, 2.5, 0.7])


def _params(shift=0.0):
    """Unconstrained values, a different one for each site (float64: the tests run in x64)."""
    return {**{f"s{i}": jnp.float64(0.3 * i - 0.4 + shift) for i in range(4)},
            **{f"m{i}": jnp.float64(1.1 - 0.9 * i + shift) for i in range(3)},
            "w": jnp.array([0.2, -0.5]) + shift, "u": jnp.float64(-0.7 + shift)}


@pytest.fixture
def counted(monkeypatch):
    """The number of times the unconstraining clause is traced (it asks for one bijector each
    time), with the jaxprs shared across eliminations cleared first."""
    _clauses.SHARED_CLAUSES.items.clear()
    calls = []
    original = _density.bijector

    def bijector(name, fn):
        calls.append(name)
        return original(name, fn)

    monkeypatch.setattr(_density, "bijector", bijector)
    return calls


def test_each_site_gets_its_own_value_from_a_shared_clause(counted):
    params = _params()
    got = handlers.potential_energy(_model(effppl.sample, effppl.plate), (Y,), {}, params)
    want = np_potential_energy(_model(numpyro.sample, numpyro.plate), (Y,), {}, params)
    assert got.dtype == jnp.float64 and jnp.allclose(got, want, rtol=1e-12, atol=1e-12)
    # s0..s3 one signature, m0..m2 another, w, u: four traces for nine latent sites
    assert len(counted) == 4
    # a second potential, other values: the clause's jaxprs are reused, values still its own
    params = _params(0.25)
    got = handlers.potential_energy(_model(effppl.sample, effppl.plate), (Y,), {}, params)
    want = np_potential_energy(_model(numpyro.sample, numpyro.plate), (Y,), {}, params)
    assert jnp.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert len(counted) == 4


def test_the_gradient_reaches_each_site(counted):
    model = _model(effppl.sample, effppl.plate)
    params = _params()
    got = jax.jit(jax.grad(lambda p: handlers.potential_energy(model, (Y,), {}, p)))(params)
    want = jax.grad(lambda p: np_potential_energy(
        _model(numpyro.sample, numpyro.plate), (Y,), {}, p))(params)
    for name in params:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-10, atol=1e-12)
    assert len({float(got[f"s{i}"]) for i in range(4)}) == 4  # no site read another's value


def test_a_wrong_shape_names_its_own_site(counted):
    params = dict(_params(), m2=jnp.zeros(3))
    with pytest.raises(effppl.SiteError, match="`m2`"):
        handlers.potential_energy(_model(effppl.sample, effppl.plate), (Y,), {}, params)
