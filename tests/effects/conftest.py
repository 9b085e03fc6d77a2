import os

from hypothesis import HealthCheck, settings

# `ci` is the default and reproducible; pick another with `--hypothesis-profile=long` (or the
# `HYPOTHESIS_PROFILE` environment variable).
_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=200, derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("long", max_examples=10_000, print_blob=True, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
