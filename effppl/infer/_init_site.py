"""Initialisation strategies written as NumPyro writes them: a function of a site message that
returns the site's constrained initial value (or None: draw it from the prior).

`init_to_feasible`, `init_to_mean` and `init_to_sample` are NumPyro's own site functions; any
user function with that protocol is accepted as `init_strategy` too (`as_strategy`).
"""

import dataclasses
from collections.abc import Callable

import numpyro.infer

from ._init import InitStrategy, is_site, site_message

__all__ = ["init_to_feasible", "init_to_mean", "init_to_sample", "as_strategy"]


@dataclasses.dataclass(frozen=True)
class _InitBySite(InitStrategy):
    """Each latent site takes `fn(site)`, in the order the model reaches them (so a site's
    distribution is built from the initial values of the sites before it)."""

    fn: Callable | None = None
    name: str = ""

    def propose(self, rng_key, ctx, dynamic):
        return ctx.unconstrain(ctx.prior(rng_key, substitute_fn=self.fn))

    def site_fn(self):
        return self.fn

    def describe(self):
        return self.name or f"init_strategy={getattr(self.fn, '__name__', repr(self.fn))}"


def as_strategy(strategy) -> InitStrategy:
    """An `InitStrategy` for `strategy`: itself, or a NumPyro-style function of a site message
    (`numpyro.infer.init_to_median(num_samples=5)`, or one of your own) wrapped. **Raises:**
    `TypeError` for anything else."""
    if isinstance(strategy, InitStrategy):
        return strategy
    if callable(strategy):
        return _InitBySite(fn=strategy)
    raise TypeError(f"expected an init strategy (init_to_uniform(), ...) or a function of a site "
                    f"message, but got {strategy!r}.")


def _numpyro(name, site):
    fn = getattr(numpyro.infer, name)
    if site is not None:
        if not is_site(site):
            raise TypeError(f"`effppl.infer.{name}(site)` expected a site message (a dict with "
                            f"`name` and `fn`), but got {site!r}.")
        return fn(site_message(site))
    return _InitBySite(fn=fn, name=f"{name}()")


def init_to_feasible(site=None):
    """Initialise each latent site at the point 0 of its unconstrained space (e.g. 1 for a
    positive site, the centre of an interval), as NumPyro's `init_to_feasible`.

    **Returns:** an `InitStrategy`, or with `site` (a site message) its initial value."""
    return _numpyro("init_to_feasible", site)


def init_to_mean(site=None):
    """Initialise each latent site at its prior mean (given the initial values of the sites it
    depends on), or at its prior median when the mean is not implemented, as NumPyro's
    `init_to_mean`. A site whose mean is not finite (HalfCauchy) then has no valid start.

    **Returns:** an `InitStrategy`, or with `site` its initial value."""
    return _numpyro("init_to_mean", site)


def init_to_sample(site=None):
    """Initialise each latent site at one draw from its prior (given the sites before it), as
    NumPyro's `init_to_sample`.

    **Returns:** an `InitStrategy`, or with `site` its initial value."""
    return _numpyro("init_to_sample", site)
