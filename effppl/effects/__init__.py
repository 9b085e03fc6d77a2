"""`effppl.effects`: algebraic effect handlers for JAX, compiled away into plain jaxprs.

A general effect library (state, exceptions, nondeterminism, ...) with no probabilistic
programming in it: effppl's PPL is built on it, and nothing here knows about the PPL.
`README.md` beside this file walks through how the translator compiles a handler away; the
translation follows the paper "Handling JAX" (§3–§5 and its appendices).
"""

# `_batching`: vmap of a cond/while that performs (element by element); `_checkpoint`: reverse
# mode of `while_loop`.
from . import _batching, _checkpoint  # noqa: F401
from . import rules as _rules  # noqa: F401  (registers the translation rules)
from ._api import eliminate, make_jaxpr
from ._bounded import while_loop
from ._core import Operation
from ._errors import EffectError, LeakedTracerError, UnhandledEffectError, UnsupportedHandlerError
from ._failure import FailureError, catch, fail, fail_if, fail_op
from ._handle import handle
from ._scope import scoped

__all__ = ["Operation", "handle", "eliminate", "make_jaxpr", "scoped", "while_loop", "fail",
           "fail_if", "catch", "fail_op", "FailureError", "EffectError",
           "UnhandledEffectError", "UnsupportedHandlerError", "LeakedTracerError"]
