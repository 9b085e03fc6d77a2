"""The HSGP periodic kernel's Bessel coefficients and the births preprocessing."""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special

from models import hsgp
from models._hsgp_basis import diag_spectral_density_periodic
from models._special import bessel_ive

Z = np.geomspace(1e-4, 1e5, 200)


def test_bessel_ive_matches_scipy_in_float64():
    expected = scipy.special.ive(np.arange(20.0)[:, None], Z)
    actual = jax.jit(bessel_ive, static_argnums=0)(20, jnp.asarray(Z))
    np.testing.assert_allclose(actual[:10], expected[:10], rtol=1e-12)
    np.testing.assert_allclose(actual, expected, rtol=1e-9)


def test_bessel_ive_gradient_matches_recurrence():
    orders = np.arange(10.0)[:, None]
    # d/dz [I_n(z) e^-z] = (I_{n-1}(z) + I_{n+1}(z)) / 2 e^-z - I_n(z) e^-z
    expected = (scipy.special.ive(orders - 1, Z) + scipy.special.ive(orders + 1, Z)) / 2
    expected -= scipy.special.ive(orders, Z)
    grad = jax.jit(jax.vmap(jax.jacfwd(lambda z: bessel_ive(10, z))))(jnp.asarray(Z))
    np.testing.assert_allclose(grad.T, expected, rtol=1e-8, atol=1e-300)


def test_periodic_coefficients_do_not_overflow_in_float32():
    lengths = np.array([0.01, 0.05, 0.1, 0.2, 1.0, 10.0])
    coefficients = jax.jit(lambda length: diag_spectral_density_periodic(1.3, length, 10))
    expected = coefficients(jnp.asarray(lengths)[:, None])
    jax.config.update("jax_enable_x64", False)  # restored by the x64 fixture
    actual = coefficients(jnp.asarray(lengths, jnp.float32)[:, None])
    assert actual.dtype == jnp.float32
    np.testing.assert_allclose(actual, np.asarray(expected), rtol=1e-4, atol=1e-30)


def test_births_holidays_two_days_a_year_each():
    (x, weekday, day_of_year, *indicators, y), kwargs = hsgp.make_data("paper")
    assert [int(i.sum()) for i in indicators] == [40, 40, 40]
    assert weekday.min() == 0 and weekday.max() == 6 and day_of_year.max() == 365
    np.testing.assert_allclose([x.mean(), x.std(), y.mean(), y.std()], [0, 1, 0, 1], atol=1e-12)
    assert (kwargs["M1"], kwargs["M2"], kwargs["M3"]) == (10, 10, 5)
    np.testing.assert_allclose(kwargs["L"], 1.5 * x.max())


def test_float32_gradients_are_finite_for_long_length_scales():
    args, kwargs = hsgp.make_data("quick")
    params = {k: jnp.zeros(s) for k, s in hsgp.latent_shapes(*args, **kwargs).items()}
    for name in ("trend/length", "week-trend/length", "year/length"):
        params[name] = jnp.asarray(2.5)  # length 12: the SE spectral density underflows float32
    params["year/length"] = jnp.asarray(-2.5)  # length 0.08: exp(a) overflows float32
    jax.config.update("jax_enable_x64", False)  # restored by the x64 fixture
    params = jax.tree.map(lambda p: p.astype(jnp.float32), params)
    value, grads = jax.jit(jax.value_and_grad(
        lambda p, a: hsgp.handwritten_log_density(p, *a, **kwargs)))(params, args)
    assert value.dtype == jnp.float32 and jnp.isfinite(value)
    assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))
