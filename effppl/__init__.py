"""effppl: a probabilistic programming language for JAX built on algebraic effect handlers."""

from ._errors import EffpplError
from . import effects

__all__ = ["EffpplError", "effects"]
