"""`infer_discrete`: draw the enumerated sites from their exact conditional, or take their most
likely joint assignment, given everything else (NumPyro's `infer_discrete`)."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp

from ..._errors import EffpplError
from ..._keys import key_data
from .._basic import block, substitute
from .._handler import model_name, model_to_wrap, run_outermost, trace_model
from .._sites import analyze
from .._trace import is_enumerated, trace
from ._contract import sample as sample_plates
from ._enum import enum


class InferDiscreteError(EffpplError, ValueError):
    """Invalid arguments to `infer_discrete`."""


class infer_discrete:
    """The model `fn` with its sites marked for enumeration drawn from their exact conditional
    distribution given every other site (`temperature=1`: forward filtering, backward sampling
    inside a plain `lax.scan`), or set to their jointly most likely values (`temperature=0`:
    Viterbi inside a scan, max-product elsewhere).

    Runs `fn` twice: once enumerated, hidden from the handlers outside (as NumPyro's, under
    `block`: values of the other latent sites must be given inside, e.g.
    `infer_discrete(condition(model, posterior_draw))`), to draw the sites; then as usual with
    those values substituted, so that `trace` records them with their usual shapes (`(T, ...)`
    inside a scan; the plate shape in plates).

    **Arguments:**
    - `fn`: the model; its discrete sites marked `infer={"enumerate": "parallel"}` (or wrapped in
      `effppl.infer.config_enumerate`).
    - `first_available_dim`: as for `effppl.handlers.enum` (`None`: inferred from the plates).
    - `temperature`: 1 (draw) or 0 (most likely).
    - `rng_key`: a `jax.random.PRNGKey` (required for temperature 1).

    **Returns:** a model (callable, and usable under every handler).

    **Raises:** `InferDiscreteError` for another temperature or a missing key.

    **Example:** `trace(infer_discrete(config_enumerate(hmm), temperature=0)).get_trace(y)["z"]`

    **References:** NumPyro's `numpyro.contrib.funsor.infer_discrete`; Rabiner (1989) (forward
    algorithm, Viterbi); Obermeyer et al. (2019) (adjoint of the sum-product for plates).
    """

    def __init__(self, fn: Any = None, first_available_dim=None, temperature=1, rng_key=None):
        if fn is not None and not callable(fn):
            raise TypeError(f"effppl.infer.infer_discrete(fn, ...) expected a callable model, but "
                            f"got {type(fn).__name__} {fn!r:.60}.")
        if temperature not in (0, 1):
            raise InferDiscreteError(f"effppl.infer.infer_discrete(fn, temperature={temperature!r})"
                                     f" expected 0 (most likely values) or 1 (draws).")
        if temperature == 1 and rng_key is None:
            raise InferDiscreteError("effppl.infer.infer_discrete(fn, temperature=1) draws the "
                                     "discrete sites: pass `rng_key=jax.random.PRNGKey(...)`.")
        self.fn = fn
        self.first_available_dim = first_available_dim
        self.temperature = temperature
        self.rng_key = None if rng_key is None else key_data(
            rng_key, "effppl.infer.infer_discrete(fn, rng_key=...)")
        if fn is not None:
            functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args, **kwargs):
        if self.fn is None:  # built without a model: wrap the one given (NumPyro's decorator use)
            self.fn = model_to_wrap("infer_discrete", args, kwargs)
            functools.update_wrapper(self, self.fn, updated=())
            return self
        return run_outermost(self._run, *args, **kwargs)

    def _run(self, *args, **kwargs):
        values = block(self._draw)(*args, **kwargs)
        return substitute(self.fn, data=values)(*args, **kwargs)

    def _draw(self, *args, **kwargs):
        """The enumerated sites' values, shaped as in the model without enumeration."""
        plain = analyze(trace_model(self.fn, *args, **kwargs))
        marked = [n for n, s in plain.items() if s.type == "sample" and not s.is_observed
                  and is_enumerated(dict(s.key.static).get("infer", ()))]
        key = self.rng_key
        scan_key, plate_key = (None, None) if key is None else jax.random.split(key)
        enumerated = enum(self.fn, self.first_available_dim)
        enumerated.discrete = (self.temperature, scan_key)
        tracer = trace(enumerated)
        _, tr = tracer._run(*args, **kwargs)
        _warn_nan_data(model_name(self.fn), tr)
        loops = {name: len(site.loops) for name, site in tracer._recorded.items()}
        values = sample_plates(tr, loops, self.temperature, plate_key)
        for name in marked:
            if f"_infer_discrete_{name}" in tr:
                values[name] = tr[f"_infer_discrete_{name}"]["value"]
            site = plain[name]
            shape = (*site.loops, *site.aval.shape)
            if name not in values:
                raise InferDiscreteError(f"effppl.infer.infer_discrete: site `{name}` of model "
                                         f"`{model_name(self.fn)}` was not enumerated.")
            values[name] = jnp.broadcast_to(values[name], shape).astype(site.aval.dtype)
        return values


def _warn_nan_data(model, tr):
    """Warn, when the compiled model runs, if observed data hold NaN: NaN is out of every
    distribution's support, so every assignment of the discrete sites has probability 0 and the
    values drawn (or the most likely path) would be arbitrary."""
    flags = {name: jnp.any(jnp.isnan(site["value"])) for name, site in tr.items()
             if site["type"] == "sample" and site["is_observed"]
             and jnp.issubdtype(jnp.result_type(site["value"]), jnp.inexact)}

    def warn(flags):
        bad = sorted(name for name, flag in flags.items() if bool(jnp.any(flag)))
        if bad:
            warnings.warn(f"effppl.infer.infer_discrete: the observed values of site(s) "
                          f"{', '.join(f'`{n}`' for n in bad)} of model `{model}` hold NaN, "
                          f"so every assignment of the discrete sites has probability 0 and the "
                          f"values returned are arbitrary. Remove or mask the NaN data.",
                          RuntimeWarning, stacklevel=2)

    if flags:
        jax.debug.callback(warn, flags)
