import pytest

from . import _ppl


@pytest.fixture(autouse=True, scope="package")
def _inference_ppl():
    """Run `effppl.infer` on the test PPL (see `_ppl.py`) for the tests of this package only."""
    previous = _ppl.install()
    yield _ppl.BACKEND
    _ppl.uninstall(previous)


def pytest_report_header(config):
    return f"tests/inference PPL backend: {_ppl.BACKEND}"
