import jax
import pytest


@pytest.fixture(autouse=True)
def x64():
    """The model oracles are compared in float64 (rtol 1e-6)."""
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)
