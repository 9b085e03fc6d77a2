"""The README's Python example runs as written and gives what its comments state. (The longer
examples that used to live in the README are tutorials now: `docs/tutorials/*.md`, run and
checked by the strict site build, `mkdocs build --strict`.)"""

import contextlib
import pathlib
import re

import jax
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def namespace():
    """The blocks run one after the other in one namespace, as a reader would, in JAX's default
    float32."""
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


def test_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    commands = re.findall(r"```bash\n(.*?)```", text, flags=re.S)[0].splitlines()
    assert commands[0].startswith('pip install -e ".[bench]" && python -m benchmarks --quick')
    assert commands[1].startswith('pip install -e ".[test]" && JAX_ENABLE_CHECKS=1 python -m '
                                  'pytest -m "not slow" -q -n 2')
    assert "mkdocs build --strict" in text and "mkdocs serve" in text
    assert any("MCMC(NUTS(local_level)" in c for c in _blocks())


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text())
    assert len(links) > 10
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_model_example_samples_its_latent_walk(namespace):
    x = np.asarray(namespace["mcmc"].get_samples()["x"])
    assert x.shape == (4 * 500, 50)
    assert set(namespace["idata"].groups()) >= {"posterior", "sample_stats", "observed_data"}
    # the second run's data are y + 1: the states moved up by about one
    y = np.sin(np.arange(50) / 5.0)
    assert np.mean(np.abs(x.mean(0) - (y + 1))) < 0.3
