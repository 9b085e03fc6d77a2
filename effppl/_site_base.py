"""What the site primitives (`effppl.primitives`) and `effppl.mutable` share, below both: the
`SiteError`, the check of a site name, the message for a site reached outside every handler,
the eager `with` blocks (NumPyro's `with seed(...), trace():` use) and the values handlers
promise to give (`given_value`)."""

from __future__ import annotations

from . import _runtime
from ._errors import EffpplError
from .effects import internal


class SiteError(EffpplError, ValueError):
    """A model's sample site is used in a way effppl cannot give a meaning to."""


SiteError.__module__ = "effppl.primitives"  # where users import it from (and pickle finds it)


def outside_handlers(name, **static):
    return (f"The model reached site `{name}` outside of any handler: a model runs under a handler "
            f"or an entry point, e.g. `effppl.handlers.seed(model, rng_seed=0)(*args)` to draw "
            f"from the prior, `effppl.handlers.trace(...).get_trace(*args)`, "
            f"`effppl.log_density(model, args, kwargs, params)`, `effppl.infer.MCMC` or "
            f"`effppl.infer.Predictive`.")


def check_name(api, name):
    """Raise a `SiteError` unless `name`, the name given to `effppl.<api>`, is a non-empty str."""
    if not isinstance(name, str) or not name:
        raise SiteError(f"effppl.{api}(name, ...) expected a non-empty str site name, but got "
                        f"{'an empty str' if name == '' else type(name).__name__} {name!r}.")


def eager_blocks():
    """Handlers of the `with` blocks entered outside any effppl entry point (NumPyro's eager
    use: `with handlers.seed(rng_seed=0): x = sample(...)`), outermost first."""
    return _runtime.state().eager_handlers


def check_eager_trace(what):
    """Raise a `SiteError` when `what` (a site, described) is reached, under `with` blocks of
    handlers entered outside any model, inside a JAX transformation begun within the blocks (a
    plain `lax.scan`, `jit`, `vmap`, `cond`): the blocks handle one site at a time, so a loop's
    occurrences would be recorded as one, with values that leak out of the loop's trace."""
    traces = _runtime.state().eager_traces
    if not traces or internal.current_trace() is traces[-1]:
        return
    raise SiteError(
        f"{what} is reached inside a JAX transformation (a plain `jax.lax.scan`, `cond`, "
        f"`jit` or `vmap`) that runs within `with` blocks of effppl handlers entered outside "
        f"any model (e.g. `with seed(rng_seed=0), trace() as tr: model()`). Such blocks handle "
        f"one site at a time as it runs, so they cannot stack a loop's occurrences. Run the "
        f"model under the handlers instead (`trace(seed(model, rng_seed=0)).get_trace(*args)`), "
        f"or write the loop with `effppl.contrib.control_flow.scan` (NumPyro's `scan`), which "
        f"runs the whole loop under the blocks.")


def given_value(kind, name):
    """The value (or anything with its `shape` and `dtype`) that a handler around the code will
    give site `name` of type `kind` ("param" or "plate"), the innermost that gives one; None
    when none does."""
    for hint in reversed(_runtime.state().value_hints):
        value = hint(kind, name)
        if value is not None:
            return value
    return None
