"""Translation rules, one module per family: effppl's own primitives (`perform`, `handle`,
`resume`, the `with`-scope markers) and JAX's higher-order primitives (calls, `cond`, loops).
Another library adds a rule for its own primitive with `effppl.effects.internal.register`."""

from . import _call, _cond, _handlers, _loops  # noqa: F401  (registers the rules)
