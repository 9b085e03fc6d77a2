"""Translation rules for JAX's higher-order primitives, one module per family."""

from . import _call, _cond, _loops  # noqa: F401  (registers the rules)
