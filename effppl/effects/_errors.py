"""Errors of the effects core."""

import jax

from .._errors import EffpplError


class EffectError(EffpplError):
    """Base class of errors raised by `effppl.effects`."""


class UnhandledEffectError(EffectError, LookupError):
    """An operation was performed where no handler handles it."""


class LeakedTracerError(EffectError, jax.errors.UnexpectedTracerError):
    """A traced function (a model, a handled body, a clause) reads a JAX tracer that leaked out of
    another trace: an intermediate value stored in a global, a closure or an attribute. JAX's
    `UnexpectedTracerError`, naming the function."""


class UnsupportedHandlerError(EffectError, NotImplementedError):
    """A clause is used where the translation cannot compile it away (for example a clause that
    resumes more than once, inside a `while` loop)."""
