"""The errors of the automatic guides (`effppl.infer.autoguide`)."""

from __future__ import annotations

from ...._errors import EffpplError

__all__ = ["AutoGuideError", "MissingParamError", "ParamTypeError", "InconsistentPlateError"]


class AutoGuideError(EffpplError, ValueError):
    """An autoguide cannot cover the model (a discrete latent site, a site in a `while_loop`),
    was asked for something before it has seen the model's arguments, or was given params of the
    wrong shapes."""


class MissingParamError(AutoGuideError, KeyError):
    """The params given to an autoguide's `median`, `quantiles`, `sample_posterior` (or
    `NeuTraReparam`) lack one of the guide's params: a `KeyError`, as NumPyro's lookup raises."""

    __str__ = BaseException.__str__  # the message as written (KeyError's would quote it)


class ParamTypeError(AutoGuideError, TypeError):
    """A value in the params given to an autoguide's `median`, `quantiles`, `sample_posterior`
    (or `NeuTraReparam`) is not an array of numbers (a string, an object): a `TypeError`, as
    JAX's would be, naming the param and what it is."""


class InconsistentPlateError(AutoGuideError, AssertionError):
    """One plate with different dims or sizes at two latent sites: an `AutoGuideError` naming
    them, and the `AssertionError` NumPyro's guides raise (programs catching it keep working)."""

