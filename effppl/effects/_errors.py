"""Errors of the effects core."""

from .._errors import EffpplError


class EffectError(EffpplError):
    """Base class of errors raised by `effppl.effects`."""


class UnhandledEffectError(EffectError, LookupError):
    """An operation was performed where no handler handles it."""


class UnsupportedHandlerError(EffectError, NotImplementedError):
    """A clause is used where the translation cannot compile it away (for example a clause that
    resumes more than once, inside a `while` loop)."""
