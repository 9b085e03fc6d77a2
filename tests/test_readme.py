"""The README's Python examples run as written and give the values their comments state."""

import contextlib
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def _blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def namespaces():
    """The blocks run one after the other in one namespace, as a reader would, in JAX's default
    float32 (as the README says)."""
    ns = {}
    with _float32():
        for code in _blocks():
            exec(compile(code, str(README), "exec"), ns)
    return ns


@contextlib.contextmanager
def _float32():
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", x64)


def test_readme_has_the_model_and_effects_examples():
    codes = _blocks()
    assert any("MCMC(NUTS(local_level)" in c for c in codes)
    assert any("fx.handle(counter" in c for c in codes)
    assert any("fx.handle(log_sum" in c for c in codes)
    assert any("infer_discrete(condition(hmm" in c for c in codes)


def test_discrete_latents_example_samples_and_decodes_the_states(namespaces):
    assert set(namespaces["hmm_draws"]) == {"trans", "locs"}
    assert namespaces["states"].shape == (300, 7)
    np.testing.assert_array_equal(namespaces["map_path"], [0, 0, 1, 1, 2, 2, 0])
    # TraceEnum_ELBO's MAP of the levels: the three clusters of the sequence
    np.testing.assert_allclose(namespaces["map_locs"], [0.2, 2.0, 3.9], atol=0.1)


def test_model_example_samples_its_latent_walk(namespaces):
    x = np.asarray(namespaces["mcmc"].get_samples()["x"])
    assert x.shape == (4 * 500, 50)


def test_svi_example_fits_the_latent_walk(namespaces):
    ns = namespaces
    assert ns["result"].params["x_auto_loc"].shape == (50,)
    assert np.mean(ns["result"].losses[-100:]) < np.mean(ns["result"].losses[:100])
    y = np.sin(np.arange(50) / 5.0)  # the README's data (later blocks rebind `y`)
    assert np.mean(np.abs(np.asarray(ns["x_mean"]) - y)) < 0.3  # the states track y
    assert ns["draws"]["x"].shape == (100, 50) and ns["post"]["x"].shape == (100, 50)


def test_effects_examples_give_the_values_in_their_comments(namespaces):
    ns = namespaces
    with _float32():
        total, running = ns["state"](jnp.arange(4.0))
        caught = ns["catch"](jnp.array([1.0, 2.0])), ns["catch"](jnp.array([1.0, -2.0, 3.0]))
        paths = ns["every"]()
    assert total == 6.0 and np.array_equal(running, [0.0, 1.0, 3.0, 6.0])
    np.testing.assert_allclose(caught[0], np.log(2.0), rtol=1e-6)
    assert np.isnan(caught[1])
    assert np.array_equal(paths, [0.0, 10.0, 1.0, 11.0])
