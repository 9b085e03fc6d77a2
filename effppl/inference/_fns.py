"""The compiled functions of one model and one argument structure, shared by every inference API.

`model_fns(model, structure, dynamic)` returns the same `ModelFns` for the same model object and
the same `ArgsStructure` (see `_cache.py`), so its `jax.jit`-wrapped functions keep their identity
and `jax.jit`'s cache (keyed by the shapes of the array arguments) is hit on every later call, as
long as the model's own program and the values it closes over stay the same.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..effects import _compat
from . import _model
from ._arviz import plate_dims
from ._cache import ArgsStructure, cached
from ._chains import over_chains
from ._init import ModelContext
from ._persistent import with_persistent_cache

__all__ = ["SiteInfo", "ModelFns", "model_fns"]


def _compiled(fn: Callable) -> Callable:
    """`jax.jit(fn)`, whose XLA programs the persistent cache (`_persistent.py`) serves."""
    return with_persistent_cache(jax.jit(fn))


class SiteInfo(NamedTuple):
    """The sites of a model, in execution order.

    `latent`: unobserved sample sites; `observed`: observed sample sites; `deterministic`:
    deterministic sites; `discrete_latent`: the latent sites with a discrete support;
    `unrecorded`: observed sites inside a `while_loop`, which count in the log density but are
    not recorded in traces (no static number of occurrences); `dims`: `(site, axis names)` pairs
    for the sites inside a `plate`, naming the axes of a value's batch part (`None` where no plate
    sits, `plate_dims`).
    """

    latent: tuple
    observed: tuple
    deterministic: tuple
    discrete_latent: tuple
    unrecorded: tuple = ()
    dims: tuple = ()


def _signature(dynamic: tuple) -> tuple:
    return tuple((tuple(x.shape), str(x.dtype)) for x in dynamic)


def _is_discrete(fn: Any) -> bool:
    support = getattr(fn, "support", None)
    return bool(getattr(support, "is_discrete", False))


class ModelFns:
    """Traced building blocks and compiled functions of `model` for one `ArgsStructure`.

    Every compiled function takes the array leaves of the model arguments (`dynamic`) as an
    argument; none closes over an array.
    """

    def __init__(self, model: Callable, structure: ArgsStructure):
        self.model = model
        self.structure = structure
        self.programs: dict = {}  # shape signature -> _Program the functions were built from
        self._site_info: dict = {}
        self._proposers: dict = {}
        self._predictors: dict = {}
        self._potentials: dict = {}  # argument types -> handler-free jaxpr of the potential
        self.potential_and_grad = _compiled(over_chains(self._potential_and_grad, (0, None)))
        self.observed_values = _compiled(self._observed_values)
        self.log_likelihood = _compiled(jax.vmap(self._log_likelihood, in_axes=(0, None)))

    @property
    def name(self) -> str:
        return getattr(self.model, "__qualname__", repr(self.model))

    def args(self, dynamic: tuple) -> tuple[tuple, dict]:
        """`(args, kwargs)` of the model, rebuilt from the array leaves `dynamic`."""
        return self.structure.rebuild(dynamic)

    def potential(self, params: dict, dynamic: tuple) -> Any:
        """The potential energy at the unconstrained `params` (traceable). Its handler-free
        jaxpr is built once per argument types and reused by every compiled function (the
        initial point's check, the sampler), not translated again for each."""
        leaves = jax.tree.leaves((params, dynamic))
        key = (jax.tree.structure((params, dynamic)),
               tuple(_compat.abstractify(x) for x in leaves))
        if key not in self._potentials:
            def potential(params, dynamic):
                args, kwargs = self.args(dynamic)
                return _model.potential_energy(self.model, args, kwargs, params)

            closed = jax.make_jaxpr(potential)(params, dynamic)
            # Tracers of the trace it was built in, if any, must not outlive it: keep it only
            # when it closes over no tracer (nothing of that trace leaks into a later one).
            if any(isinstance(c, jax.core.Tracer) for c in closed.consts):
                return potential(params, dynamic)
            self._potentials[key] = closed
        (out,) = _compat.jaxpr_as_fun(self._potentials[key])(*leaves)
        return out

    def logdensity_fn(self, dynamic: tuple) -> Callable:
        """The log density of the unconstrained latent sites (traceable; for blackjax)."""
        def logdensity(params):
            return -self.potential(params, dynamic)

        return logdensity

    def constrain(self, params: dict, dynamic: tuple) -> dict:
        """Constrained latent values and deterministic sites at `params` (traceable)."""
        args, kwargs = self.args(dynamic)
        return _model.constrain(self.model, args, kwargs, params)

    def site_info(self, dynamic: tuple) -> SiteInfo:
        """The model's sites for arguments of these shapes (traced once per shape signature)."""
        sig = _signature(dynamic)
        if sig not in self._site_info:
            found, unrecorded, dims = {}, [], []

            def probe(key, dynamic):
                args, kwargs = self.args(dynamic)
                with _model.initialising():
                    sites = _model.get_trace(self.model, args, kwargs, rng_key=key)
                record(sites, _model.analyze_sites(self.model, args, kwargs))

            def record(sites, static):
                for name, site in sites.items():
                    found[name] = (site.kind, site.is_observed, _is_discrete(site.fn))
                    loop_ndim = len(static[name].loops) if name in static else 0
                    if (names := plate_dims(site, loop_ndim)) is not None:
                        dims.append((name, names))
                # observed sites inside a `while_loop`: no static number of occurrences
                unrecorded.extend(n for n, s in static.items()
                                  if s.type == "sample" and s.is_observed and not s.bounded)

            if _model._backend is None:  # effppl: the static analysis says it all, no run
                sites, static = _model.recorded_sites(self.model, *self.args(dynamic))
                record(sites, static)
            else:
                jax.eval_shape(probe, jax.ShapeDtypeStruct((2,), jnp.uint32), dynamic)
            latent = tuple(n for n, (k, obs, _) in found.items() if k == "sample" and not obs)
            self._site_info[sig] = SiteInfo(
                latent=latent,
                observed=tuple(n for n, (k, obs, _) in found.items() if k == "sample" and obs),
                deterministic=tuple(n for n, (k, _, _) in found.items() if k == "deterministic"),
                discrete_latent=tuple(n for n in latent if found[n][2]),
                unrecorded=tuple(unrecorded),
                dims=tuple(dims),
            )
        return self._site_info[sig]

    def _potential_and_grad(self, params, dynamic):
        pe, grad = jax.value_and_grad(self.potential)(params, dynamic)
        param_ok = {n: jnp.all(jnp.isfinite(v)) for n, v in params.items()}
        grad_ok = {n: jnp.all(jnp.isfinite(g)) for n, g in grad.items()}
        return pe, grad, param_ok, grad_ok

    def _observed_values(self, dynamic):
        args, kwargs = self.args(dynamic)
        key = jax.random.key_data(jax.random.key(0))
        sites = _model.get_trace(self.model, args, kwargs, rng_key=key)
        return {n: s.value for n, s in sites.items() if s.kind == "sample" and s.is_observed}

    def _log_likelihood(self, samples, dynamic):
        args, kwargs = self.args(dynamic)
        sites = _model.get_trace(self.model, args, kwargs, substitutions=samples)
        return {
            n: s.log_prob if s.log_prob is not None else s.fn.log_prob(s.value)
            for n, s in sites.items()
            if s.kind == "sample" and s.is_observed
        }

    def init_proposer(self, strategy) -> Callable:
        """Compiled `(keys[chain], strategy.dynamic(), dynamic) -> unconstrained params[chain]`."""
        key = (type(strategy), strategy)
        if key not in self._proposers:

            def propose(rng_key, strategy_dynamic, dynamic):
                args, kwargs = self.args(dynamic)
                with _model.initialising():
                    latent = self.site_info(dynamic).latent
                    ctx = ModelContext(model=self.model, args=args, kwargs=kwargs, latent=latent)
                    return strategy.propose(rng_key, ctx, strategy_dynamic)

            self._proposers[key] = _compiled(over_chains(propose, (0, None, None)))
        return self._proposers[key]

    def predictor(self, return_sites: tuple) -> Callable:
        """Compiled `(keys[n], samples[n], dynamic) -> {site: value[n]}` for `return_sites`."""
        if return_sites not in self._predictors:

            def predict(rng_key, samples, dynamic):
                args, kwargs = self.args(dynamic)
                sites = _model.get_trace(
                    self.model, args, kwargs,
                    rng_key=jax.random.key_data(rng_key), substitutions=samples,
                )
                return {n: sites[n].value for n in return_sites if n in sites}

            self._predictors[return_sites] = _compiled(jax.vmap(predict, in_axes=(0, 0, None)))
        return self._predictors[return_sites]


class _Program(NamedTuple):
    """The model's own program (no handler) for arguments of one shape signature: its jaxpr's
    text and the values it closes over (global arrays, closure cells, attributes read)."""

    text: str
    consts: tuple

    def same_as(self, other: "_Program") -> bool:
        return (self.text == other.text and len(self.consts) == len(other.consts)
                and all(_same_value(a, b) for a, b in zip(self.consts, other.consts)))


def _same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):
        return False
    if any(jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key) for x in (a, b)):
        try:
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        except TypeError:
            return False
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)


def _program(model: Callable, structure: ArgsStructure, dynamic: tuple) -> _Program:
    def flat(*leaves):
        args, kwargs = structure.rebuild(leaves)
        return _model.run_unhandled(model, args, kwargs)

    closed, consts, _ = _compat.trace_to_jaxpr(flat, [_compat.abstractify(x) for x in dynamic],
                                               _model.model_name(model))
    # Without dead equations (a first-use cache may stage some into the first trace only).
    jaxpr, _ = _compat.pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars),
                                    instantiate=True)
    # A numpy constant may be a view of a global array that is later changed in place: keep a copy.
    consts = tuple(np.array(c) if isinstance(c, np.ndarray) else c for c in consts)
    return _Program(str(jaxpr), consts)


def model_fns(model: Callable, structure: ArgsStructure, dynamic: tuple) -> ModelFns:
    """The cached `ModelFns` of `model` for arguments of this structure.

    The model is traced (without handlers) at the shapes of `dynamic`; if a cached `ModelFns`
    was built from a different program or different closed-over values at those shapes (the model
    reads a global that has changed), it is replaced: compiled functions never silently keep old
    values.
    """
    program = _program(model, structure, dynamic)
    sig = _signature(dynamic)

    def valid(fns):
        return fns.programs.setdefault(sig, program).same_as(program)

    def build():
        fns = ModelFns(model, structure)
        fns.programs[sig] = program
        return fns

    return cached(("model_fns", model, structure), build, valid)
