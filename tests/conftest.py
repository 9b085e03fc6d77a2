import os
import tempfile

import jax
import pytest
from hypothesis import HealthCheck, settings

# Tests compile into no shared folder: effppl's persistent compilation cache is off unless a test
# turns it on (tests/inference/test_persistent_cache.py), and then signs its files with a key of
# the test session's, not the user's.
os.environ.setdefault("EFFPPL_CACHE_DIR", "off")
os.environ.setdefault("EFFPPL_CACHE_KEY_FILE",
                      os.path.join(tempfile.mkdtemp(prefix="effppl-tests-"), "cache-key"))

# Hypothesis profiles of the differential tests (the translator's random programs,
# tests/effects/test_differential.py; the random models, tests/random_models/): `ci` is the
# default and reproducible; pick another with `--hypothesis-profile=long` (or the
# `HYPOTHESIS_PROFILE` environment variable).
_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=200, derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("long", max_examples=10_000, print_blob=True, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _x64():
    """Tests compare against numeric oracles in float64, so tolerances measure the method, not
    float32 rounding."""
    jax.config.update("jax_enable_x64", True)
    yield


def pytest_report_header(config):
    return f"JAX_ENABLE_CHECKS={os.environ.get('JAX_ENABLE_CHECKS', '0')}, jax {jax.__version__}"
