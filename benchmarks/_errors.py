"""Errors raised by the benchmark harness; each subclasses `effppl.EffpplError` and a builtin."""

from effppl._errors import EffpplError


class BenchmarkError(EffpplError, RuntimeError):
    """Base class of the errors raised by `benchmarks`."""


class BenchmarkConfigError(BenchmarkError, ValueError):
    """An unknown mode, model or framework was asked for on the command line or in `run`."""


class AgreementError(BenchmarkError):
    """Two frameworks gave different log densities (or gradients) at the same unconstrained point.

    Raised after the whole run has been recorded, so the JSON still holds every figure and the
    values that disagreed.
    """


class OryxEnvironmentError(BenchmarkError):
    """The pinned Oryx virtual environment could not be created, or its worker failed."""
