import os

import jax
import pytest

# Tests compile into no shared folder: effppl's persistent compilation cache is off unless a test
# turns it on (tests/inference/test_persistent_cache.py).
os.environ.setdefault("EFFPPL_CACHE_DIR", "off")


@pytest.fixture(autouse=True, scope="session")
def _x64():
    """Tests compare against numeric oracles in float64, so tolerances measure the method, not
    float32 rounding."""
    jax.config.update("jax_enable_x64", True)
    yield


def pytest_report_header(config):
    return f"JAX_ENABLE_CHECKS={os.environ.get('JAX_ENABLE_CHECKS', '0')}, jax {jax.__version__}"
