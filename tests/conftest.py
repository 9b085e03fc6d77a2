import os
import tempfile

import jax
import pytest

# Tests compile into no shared folder: effppl's persistent compilation cache is off unless a test
# turns it on (tests/inference/test_persistent_cache.py), and then signs its files with a key of
# the test session's, not the user's.
os.environ.setdefault("EFFPPL_CACHE_DIR", "off")
os.environ.setdefault("EFFPPL_CACHE_KEY_FILE",
                      os.path.join(tempfile.mkdtemp(prefix="effppl-tests-"), "cache-key"))


@pytest.fixture(autouse=True, scope="session")
def _x64():
    """Tests compare against numeric oracles in float64, so tolerances measure the method, not
    float32 rounding."""
    jax.config.update("jax_enable_x64", True)
    yield


def pytest_report_header(config):
    return f"JAX_ENABLE_CHECKS={os.environ.get('JAX_ENABLE_CHECKS', '0')}, jax {jax.__version__}"
