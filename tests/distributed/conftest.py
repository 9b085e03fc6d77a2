import pytest

from ._launch import run_script


@pytest.fixture(scope="package")
def four(tmp_path_factory):
    """The results of `_four_devices.py`, run once with 4 forced CPU devices (and XLA's dumps
    of the optimized programs, whose collectives it counts)."""
    dump = tmp_path_factory.mktemp("xla-dump")
    return run_script("_four_devices.py", devices=4, timeout=900,
                      xla_flags=f"--xla_dump_to={dump}", EFFPPL_TEST_DUMP=dump)
