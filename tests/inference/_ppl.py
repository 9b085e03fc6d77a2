"""The PPL that the inference tests run on.

`effppl.infer` reaches the PPL only through `effppl/infer/_model.py`, which calls
`effppl.handlers.{potential_energy, constrain_fn, unconstrain_fn, seed, substitute, trace}`.
These tests can also run on NumPyro's functions of the same names and semantics (a test-only
shim installed through `_model._backend`; nothing outside these tests sees it), which checks the
inference code against NumPyro's handlers on the same models. Models are written against `sample`, `plate`, `deterministic`, `factor`
and `scan` imported from here (`scan` is `jax.lax.scan` for effppl, NumPyro's contrib `scan` for
NumPyro). Choose with `EFFPPL_INFERENCE_TEST_PPL=auto|effppl|numpyro` (default `auto`: effppl
when `effppl.handlers` and `effppl.sample` are complete, else NumPyro).
"""

import os
import types

import numpyro
import numpyro.distributions as dist  # noqa: F401  (effppl.distributions re-exports these)
import numpyro.handlers
import numpyro.infer.util

from effppl.infer import _model

__all__ = ["BACKEND", "install", "sample", "plate", "deterministic", "factor", "mask", "scan",
           "dist"]

_NUMPYRO = types.SimpleNamespace(
    potential_energy=numpyro.infer.util.potential_energy,
    constrain_fn=numpyro.infer.util.constrain_fn,
    unconstrain_fn=numpyro.infer.util.unconstrain_fn,
    seed=numpyro.handlers.seed,
    substitute=numpyro.handlers.substitute,
    condition=numpyro.handlers.condition,
    trace=numpyro.handlers.trace,
    log_density=numpyro.infer.util.log_density,
)


def _effppl_ready() -> bool:
    try:
        import effppl
        from effppl import handlers
    except ImportError:
        return False
    return all(hasattr(handlers, n) for n in _model._REQUIRED) and all(
        hasattr(effppl, n) for n in ("sample", "plate", "deterministic", "factor")
    )


_choice = os.environ.get("EFFPPL_INFERENCE_TEST_PPL", "auto")
BACKEND = "effppl" if _choice == "effppl" or (_choice == "auto" and _effppl_ready()) else "numpyro"

if BACKEND == "effppl":
    from jax.lax import scan  # noqa: F401  (effppl models use plain lax.scan)

    from effppl import deterministic, factor, plate, sample  # noqa: F401
    from effppl.handlers import mask  # noqa: F401
else:
    from numpyro import deterministic, factor, plate, sample  # noqa: F401
    from numpyro.contrib.control_flow import scan  # noqa: F401
    from numpyro.handlers import mask  # noqa: F401


def install():
    """Point `effppl.infer` at the test PPL; returns the previous backend (for `uninstall`)."""
    previous = _model._backend
    _model._backend = _NUMPYRO if BACKEND == "numpyro" else None
    return previous


def uninstall(previous):
    _model._backend = previous
