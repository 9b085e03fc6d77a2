"""`lift`: turn param sites into sample sites drawn from a prior (NumPyro's `lift`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro.distributions as dist

from .._errors import EffpplError
from ..effects.internal import exclusive, iter_performs
from ..primitives import SiteError, param_op, sample
from ._handler import Handler, forward_param

_API = "effppl.handlers.lift(fn, prior=...)"


class LiftPriorError(EffpplError, TypeError):
    """A `lift` prior, or one of its entries, that is not a distribution."""


def _check_prior(prior):
    """Raise `LiftPriorError` unless `prior` is a distribution or a dict of distributions."""
    if isinstance(prior, dict):
        for name, entry in prior.items():
            if not isinstance(entry, dist.Distribution):
                raise LiftPriorError(
                    f"{_API} expected a numpyro.distributions.Distribution for param site "
                    f"`{name}`, but got {_kind(entry)}. Give a distribution instance (e.g. "
                    f"`dist.Normal(0.0, 1.0)`), or leave `{name}` out of the dict to keep it a "
                    f"param. (NumPyro ignores such an entry and keeps the param.)")
    elif not isinstance(prior, dist.Distribution):
        raise LiftPriorError(
            f"{_API} expected a numpyro.distributions.Distribution (the prior of every param "
            f"site) or a dict param name -> Distribution, but got {_kind(prior)}. (NumPyro "
            f"ignores such a prior and keeps every param.)")


def _kind(value):
    if isinstance(value, type):
        return f"the class {value.__name__} (not an instance)"
    return f"{type(value).__name__} {value!r:.60}"


class lift(Handler):
    """Make the param sites of `fn` random: each param site named in `prior` becomes a latent
    sample site of the same name drawn from its prior (its `init_value` and constraint are not
    used; the prior must draw values of the param's shape).

    **Arguments:** `fn` (model); `prior`: a `numpyro.distributions.Distribution` (the prior of
    every param site) or a dict param name -> Distribution (param sites not in the dict stay
    params; entries naming no param site are not used).

    **Raises:**
    - `LiftPriorError` (a `TypeError`) when `prior`, or an entry of the dict, is not a
      Distribution instance (a float, an array, a callable, a Distribution class, None), naming
      the param site. NumPyro ignores such a prior silently and keeps the param.
    - `SiteError` when a prior's draws (`prior.shape()`) do not have the param's shape (NumPyro
      returns the prior's draw whatever its shape; effppl's param keeps its type).
    - `SiteError` when a lifted param site is read inside a loop (`lax.scan`, `while_loop`) or
      twice: NumPyro draws such a param once and every read shares that draw; effppl would draw
      at each read, so it refuses rather than differ.

    **Example:** `trace(seed(lift(model, prior={"w": dist.Normal(0.0, 1.0)}), 0)).get_trace(x)`
    gives site `w` of type `"sample"`, the same draw as NumPyro's with the same seed.

    **References:** NumPyro's `numpyro.handlers.lift`; Pyro's `poutine.lift`.
    """

    def __init__(self, fn=None, prior=None):
        super().__init__(fn)
        _check_prior(prior)
        self.prior = prior

    def value_hint(self, kind, name):
        prior = self._prior(name) if kind == "param" else None
        if prior is None:
            return None
        return jax.eval_shape(prior.sample, jax.ShapeDtypeStruct((2,), jnp.uint32))

    def _prior(self, name):
        return self.prior.get(name) if isinstance(self.prior, dict) else self.prior

    def _check_reads(self, program):
        """Raise `SiteError` for a lifted param read in a loop or twice in `program`."""
        seen = {}
        for perform in iter_performs(program, (param_op,)):
            name = dict(perform.eqn.params["static"])["name"]
            if self._prior(name) is None:
                continue
            where = perform.source
            if perform.loops:
                raise SiteError(
                    f"{_API}: param site `{name}` (at {where}) is read inside a loop. A lifted "
                    f"param is one random draw for the whole run (NumPyro's semantics), which "
                    f"effppl cannot share with a loop's iterations; read the param once before "
                    f"the loop and pass its value in.")
            for other in seen.get(name, []):
                if not exclusive(perform, other):
                    raise SiteError(
                        f"{_API}: param site `{name}` is read twice (at {other.source} and at "
                        f"{where}). A lifted param is one random draw shared by all its reads "
                        f"(NumPyro's semantics), which effppl does not support; read it once and "
                        f"reuse the value.")
            seen.setdefault(name, []).append(perform)

    def params(self, *args, **kwargs):
        self._check_reads(self._body_jaxpr)
        return ()

    def scope_params(self):  # a `with` block: its reads are checked in `scope_setup`
        return ()

    def scope_setup(self, eqns):
        self._check_reads(eqns)
        return None

    def clauses(self):
        def param(params, msg, *, resume, name, **static):
            prior = self._prior(name)
            if prior is None:
                return resume(params, forward_param(msg, name=name, **static))
            shape = param_op.out(msg, name=name, **static).shape
            if tuple(prior.shape()) != tuple(shape):
                raise SiteError(
                    f"{_API}: the prior of param site `{name}` draws values of shape "
                    f"{tuple(prior.shape())}, but the param has shape {tuple(shape)} (its "
                    f"`init_value`'s); a lifted param keeps its shape in effppl. Give a prior of "
                    f"that shape, e.g. `prior.expand({tuple(shape)}).to_event({len(shape)})`.")
            return resume(params, sample(name, prior))
        return {param_op: param}
