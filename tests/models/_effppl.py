"""Skip effppl-side checks only while the PPL layer is not written yet."""

import importlib

import pytest

import effppl


def require_log_density():
    """`effppl.handlers.log_density`, or skip the test while `effppl.sample` does not exist."""
    if not hasattr(effppl, "sample"):
        pytest.skip("effppl.sample does not exist yet (PPL layer in progress)")
    return importlib.import_module("effppl.handlers").log_density
