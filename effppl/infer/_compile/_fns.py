"""The compiled functions of one model and one argument structure, shared by every inference API.

`model_fns(model, structure, dynamic)` returns the same `ModelFns` for the same model object and
the same `ArgsStructure` (see `_cache.py`), so its `jax.jit`-wrapped functions keep their identity
and `jax.jit`'s cache (keyed by the shapes of the array arguments) is hit on every later call, as
long as the model's own program and the values it closes over stay the same.
"""

import functools
import inspect
import os
import re
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.core
import jax.extend
import jax.numpy as jnp
import numpy as np
import numpyro.distributions

from ...effects import internal
from .. import _model
from .._arviz import plate_dims
from .._init import ModelContext
from ._arguments import model_arguments
from ._cache import (
    ArgsStructure,
    StaticArray,
    StaticObject,
    cached,
    has_static_arrays,
    lookup,
    split_cache_key,
    with_static_arrays,
)
from ._chains import over_chains, per_chain_types
from ._fingerprint import fingerprint
from ._forward import forward_gradient, value_and_forward_grad
from ._persistent import digest, stored
from ._windows import windows_as_updates

__all__ = ["SiteInfo", "ModelFns", "model_fns", "prepare", "StaticArgumentWarning"]


def _compiled(fn: Callable, runs_few_times: bool = False) -> Callable:
    """`jax.jit(fn)`, whose XLA programs the persistent cache (`_persistent.py`) stores. With
    `runs_few_times` (initial points: a call or a few per run), XLA's backend does not optimise the
    program: it compiles in a fraction of the time and runs a little slower, which only pays
    where it runs once or twice. Such a function cannot be called inside another `jax.jit`
    (nor `jax.eval_shape`d): JAX takes compiler options only at the top level."""
    options = {"xla_backend_optimization_level": 0} if runs_few_times else None
    return stored(jax.jit(fn, compiler_options=options), None, getattr(fn, "__name__", "fn"))


EAGER_FROM_EQNS = 1000
"""A potential whose jaxpr has at least this many equations (outside loops and branches) is
evaluated primitive by primitive at initial points, not compiled (`ModelFns.potential_and_grad`)."""


MANY_REDUCTIONS = 48
"""A potential whose jaxpr holds at least this many reductions (outside loops and branches) is
given to XLA in the sampler's program in the form NumPyro's sampler gives it
(`ModelFns.reductions`, `_sampler._fusible_copy`). The six benchmark models hold 4-24 (their
programs are unchanged); a Python-loop model with a plate per group, 64 at 100 sites."""


class SiteInfo(NamedTuple):
    """The sites of a model, in execution order.

    `latent`: unobserved sample sites; `observed`: observed sample sites; `deterministic`:
    deterministic sites; `discrete_latent`: the latent sites with a discrete support;
    `unrecorded`: observed sites inside a `while_loop`, which count in the log density but are
    not recorded in traces (no static number of occurrences); `dims`: `(site, axis names)` pairs
    for the sites inside a `plate`, naming the axes of a value's batch part (`None` where no plate
    sits, `plate_dims`); `enumerated`: the latent sites marked for enumeration, summed out of the
    log density (not in `latent` nor `discrete_latent`); `not_enumerable`: `(site,
    distribution)` for those among them whose distribution has no finite support; `valued`: the
    latent sites a handler inside the model gives their value (`substitute`, `do`), which no
    outer handler replaces, so they need no draws (`log_likelihood`); `missing_plates`:
    `(site, dim, batch shape)` for each batch dimension longer than 1 of a sample site inside
    some plate that no plate covers (`missing_plates`, NumPyro's loose plate check).
    """

    latent: tuple
    observed: tuple
    deterministic: tuple
    discrete_latent: tuple
    unrecorded: tuple = ()
    dims: tuple = ()
    enumerated: tuple = ()
    not_enumerable: tuple = ()
    valued: tuple = ()
    missing_plates: tuple = ()


def missing_plates(site, loop_ndim: int) -> list:
    """`[(dim, batch shape)]`: the batch dimensions longer than 1 of sample site `site` that no
    enclosing plate covers, where some plate encloses it (NumPyro's "loose" check of
    `numpyro.util._validate_model`: a site in no plate is not checked). The batch shape is the
    distribution's broadcast with the value's; a site in a loop is not checked (its recorded
    distribution may hold the loop's axes)."""
    if site.kind != "sample" or site.fn is None or not site.plates or loop_ndim:
        return []
    event_ndim = len(site.fn.event_shape)
    shape = jnp.shape(site.value)
    try:
        batch = jnp.broadcast_shapes(tuple(site.fn.batch_shape),
                                     tuple(shape[:len(shape) - event_ndim]))
    except ValueError:  # (the density says so, naming the site)
        return []
    covered = {frame.dim for frame in site.plates}
    return [(-i, tuple(batch)) for i in range(1, len(batch) + 1)
            if batch[-i] > 1 and -i not in covered]


def _signature(dynamic: tuple) -> tuple:
    return tuple((tuple(x.shape), str(x.dtype)) for x in dynamic)


def _is_discrete(fn: Any) -> bool:
    support = getattr(fn, "support", None)
    return bool(getattr(support, "is_discrete", False))


def _types_key(params: dict, dynamic: tuple) -> tuple:
    # With the mesh in force (a `shard_map`'s, for a sharded sampler): a jaxpr traced under one
    # mesh has avals of that mesh, and another mesh's program cannot use it.
    return (jax.tree.structure((params, dynamic)),
            tuple(internal.abstractify(x) for x in jax.tree.leaves((params, dynamic))),
            jax.sharding.get_abstract_mesh())


def _has_derivative_rules(jaxpr) -> bool:
    """Whether `jaxpr` holds a custom derivative rule at any depth (`jax.custom_jvp`,
    `custom_vjp`, also behind JAX's own `custom_gradient` or `lax.custom_root`, whose rules run
    user code)."""
    return any(eqn.primitive.name.startswith("custom") for eqn in internal.iter_eqns(jaxpr))


def _untold_values(jaxpr, rules_told: bool) -> list | None:
    """What the text of `jaxpr` leaves out, at any depth: the values its literals stand for and
    the values closed over by the closed jaxprs in its equations' parameters (a `jax.jit`
    function's constants are kept there, printed by type only). `None` when an equation holds a
    Python function no text shows (a callback, a rematerialisation policy, a derivative rule
    unless `rules_told`: the jaxpr is one whose derivatives are not taken, or its gradient's)."""
    found: list = []
    for eqn in internal.iter_eqns(jaxpr):
        found.extend(v.val for v in eqn.invars if isinstance(v, jax.extend.core.Literal))
        rule = rules_told and eqn.primitive.name.startswith("custom")
        for param in eqn.params.values():
            for p in param if isinstance(param, (tuple, list)) else (param,):
                if isinstance(p, jax.extend.core.ClosedJaxpr):
                    found.extend(p.consts)  # (its equations come later in `iter_eqns`)
                elif not rule and _is_function(p):
                    return None
    return found


def _is_function(value) -> bool:
    """A Python function in an equation's parameters (JAX prints its name only)."""
    return (isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinFunctionType,
                               functools.partial))
            or type(value).__name__.endswith("Callback"))


def _closes_over_tracer(closed) -> bool:
    """Whether a jaxpr built while tracing closes over that trace's tracers: such a jaxpr must
    not be kept (nothing of that trace may leak into a later one)."""
    return any(isinstance(c, jax.core.Tracer) for c in closed.consts)


class ModelFns:
    """Traced building blocks and compiled functions of `model` for one `ArgsStructure`.

    Every compiled function takes the array leaves of the model arguments (`dynamic`) as an
    argument; none closes over an array.
    """

    def __init__(self, model: Callable, structure: ArgsStructure):
        self.model = with_static_arrays(model) if has_static_arrays(structure) else model
        self.structure = structure
        self.programs: dict = {}  # shape signature -> _Program the functions were built from
        # shape signature -> `_fingerprint.Fingerprint` of the model at its last trace that
        # found these functions valid (`model_fns` skips the trace while it holds)
        self.traced_with: dict = {}
        self._site_info: dict = {}
        self._proposers: dict = {}
        self._predictors: dict = {}
        # argument types -> (handler-free jaxpr, output tree) of the potential, of `constrain`
        self._potentials: dict = {}
        self._constrained: dict = {}
        self._unconstrained: dict = {}
        self._potential_calls: dict = {}  # id(the potential's jaxpr) -> (it, its jax.jit)
        self._fingerprints: dict = {}  # argument types -> `fingerprint`
        self._checked_point = over_chains(self._potential_and_grad, (0, None))
        self._checked_point_compiled = _compiled(self._checked_point, runs_few_times=True)
        self._checked_point_forward = _compiled(over_chains(
            functools.partial(self._potential_and_grad, forward=True), (0, None)),
            runs_few_times=True)
        self.observed_values = _compiled(self._observed_values)
        # batched over the draws' index too: a model without latent sites has no draws to
        # take the batch size from; the rows of sites in loops written in place, not scattered
        # (`_windows`: never differentiated)
        self._log_likelihood_compiled = _compiled(windows_as_updates(jax.vmap(
            lambda draw, samples, dynamic: self._log_likelihood(samples, dynamic),
            in_axes=(0, 0, None))))

    @property
    def name(self) -> str:
        return _model.model_name(self.model)

    def args(self, dynamic: tuple) -> tuple[tuple, dict]:
        """`(args, kwargs)` of the model, rebuilt from the array leaves `dynamic`."""
        return self.structure.rebuild(dynamic)

    def _jaxpr(self, store: dict, fn: Callable, params: dict, dynamic: tuple):
        """The handler-free jaxpr of `fn(self.model, args, kwargs, params)` for arguments of
        these types (arrays or `ShapeDtypeStruct`s), built once per types (in `store`); `None`
        when it closes over a tracer."""
        key = _types_key(params, dynamic)
        if key not in store:
            def flat(params, dynamic):
                args, kwargs = self.args(dynamic)
                return fn(self.model, args, kwargs, params)

            closed, shapes = jax.make_jaxpr(flat, return_shape=True)(params, dynamic)
            if _closes_over_tracer(closed):
                return None
            store[key] = closed, jax.tree.structure(shapes)
        return store[key]

    def _potential_jaxpr(self, params: dict, dynamic: tuple):
        """The handler-free jaxpr of the potential (`_jaxpr`), or `None`."""
        found = self._jaxpr(self._potentials, _model.potential_energy, params, dynamic)
        return None if found is None else found[0]

    def _evaluate(self, store: dict, fn: Callable, params: dict, dynamic: tuple) -> Any:
        found = self._jaxpr(store, fn, params, dynamic)
        if found is None:
            return fn(self.model, *self.args(dynamic), params)
        closed, out_tree = found
        out = internal.jaxpr_as_fun(closed)(*jax.tree.leaves((params, dynamic)))
        return jax.tree.unflatten(out_tree, out)

    def potential(self, params: dict, dynamic: tuple) -> Any:
        """The potential energy at the unconstrained `params` (traceable). Its handler-free
        jaxpr is built once per argument types and reused by every compiled function (the
        initial point's check, the sampler), not translated again for each."""
        return self._evaluate(self._potentials, _model.potential_energy, params, dynamic)

    def _potential_call(self, params: dict, dynamic: tuple) -> Any:
        """`potential`, as one call of a `jax.jit` function of its jaxpr: in the sampler's
        program, which evaluates the potential's gradient in several places and batches them over
        chains, JAX then differentiates and batches the potential once (its caches are keyed by
        the jaxpr), not at each use. XLA inlines the call: the compiled program is the same."""
        closed = self._potential_jaxpr(params, dynamic)
        if closed is None:
            return self.potential(params, dynamic)
        if id(closed) not in self._potential_calls:
            self._potential_calls[id(closed)] = closed, jax.jit(internal.jaxpr_as_fun(closed))
        (out,) = self._potential_calls[id(closed)][1](*jax.tree.leaves((params, dynamic)))
        return out

    def fingerprint(self, params: dict, dynamic: tuple) -> str | None:
        """A digest of what the model gives the sampler's program for arguments of these types
        (unconstrained values of one chain, model data): the jaxprs of the potential and of the
        constrain pass and the values they close over (`_persistent.stored` keys the stored
        executable with it); the jaxpr of the potential's value and gradient instead of the
        potential's when it holds a custom derivative rule (`jax.custom_jvp`, `custom_vjp`,
        `custom_gradient`, `lax.custom_root`, ...: their rules are Python code the potential's
        text does not show). `None` when a jaxpr closes over a tracer or holds a Python function
        (a callback) that even the gradient's text does not show.

        **Arguments:** `params`: `{site: array or ShapeDtypeStruct}`, one chain's unconstrained
        values (no chain axis); `dynamic`: the model's array arguments. **Returns:** a
        64-character hex `str` (SHA-256, `_persistent.digest`), built once per argument types,
        or `None`. **Raises:** what tracing the model raises (as the sampler would)."""
        key = _types_key(params, dynamic)
        if key not in self._fingerprints:
            self._fingerprints[key] = self._fingerprint(params, dynamic)
        return self._fingerprints[key]

    def _fingerprint(self, params: dict, dynamic: tuple) -> str | None:
        potential = self._potential_jaxpr(params, dynamic)
        values = self._jaxpr(self._constrained, _model.constrain, params, dynamic)
        if potential is None or values is None:
            return None
        rules = _has_derivative_rules(potential.jaxpr)
        if rules:  # what a rule computes shows only once the gradient is taken
            potential = jax.make_jaxpr(jax.value_and_grad(self.potential))(params, dynamic)
            if _closes_over_tracer(potential):
                return None
        untold = [_untold_values(potential.jaxpr, rules_told=not rules),
                  _untold_values(values[0].jaxpr, rules_told=True)]
        if None in untold:
            return None
        return digest(str(potential.jaxpr), str(values[0].jaxpr), potential.consts,
                      values[0].consts, untold)

    def potential_and_grad(self, params: dict, dynamic: tuple, forward: bool = False):
        """`(potential energy[chain], grad, param_ok, grad_ok)` at `params` (leading chain
        axis), with per-site flags saying each unconstrained value and gradient is finite.

        It runs once or a few times per run (initial points). A small potential is compiled
        (without XLA's optimisations); a large one is evaluated primitive by primitive: at
        hundreds of sites that takes a fraction of the time XLA needs to compile the potential
        and its gradient (2 s against 12-20 s at 400 sites), which the sampler's program does
        anyway. Small ones stay compiled: eager evaluation compiles each distinct primitive
        once, more programs than one compiled function for a model of a few sites."""
        if forward:  # (NumPyro's `forward_mode_differentiation`: rare, small models)
            return self._checked_point_forward(params, dynamic)
        one_chain = per_chain_types(params)
        closed = self._potential_jaxpr(one_chain, dynamic)
        if closed is not None and len(closed.jaxpr.eqns) >= EAGER_FROM_EQNS:
            return self._checked_point(params, dynamic)
        return self._checked_point_compiled(params, dynamic)

    def reductions(self, params: dict, dynamic: tuple) -> int:
        """The number of reductions over at least one axis among the top-level equations of the
        potential's jaxpr (at `params`, unconstrained values of one chain): in a model written
        with a Python loop, about one per site with a plate. 0 when the jaxpr is not kept."""
        closed = self._potential_jaxpr(params, dynamic)
        if closed is None:
            return 0
        return sum(1 for eqn in closed.jaxpr.eqns
                   if eqn.primitive.name.startswith("reduce_") and eqn.params.get("axes"))

    def logdensity_fn(self, dynamic: tuple, forward: bool = False) -> Callable:
        """The log density of the unconstrained latent sites (traceable; for blackjax); with
        `forward`, JAX takes its gradient in forward mode (`_forward.forward_gradient`)."""
        potential = forward_gradient(self._potential_call) if forward else self._potential_call

        def logdensity(params):
            return -potential(params, dynamic)

        return logdensity

    def constrain(self, params: dict, dynamic: tuple) -> dict:
        """Constrained latent values and deterministic sites at `params` (traceable; its
        handler-free jaxpr built once per argument types)."""
        return self._evaluate(self._constrained, _model.constrain, params, dynamic)

    def unconstrain(self, values: dict, dynamic: tuple) -> dict:
        """Unconstrained values of the constrained latent `values` (every latent site;
        traceable; its handler-free jaxpr built once per argument types)."""
        return self._evaluate(self._unconstrained, _model.unconstrain, values, dynamic)

    def site_info(self, dynamic: tuple) -> SiteInfo:
        """The model's sites for arguments of these shapes (traced once per shape signature)."""
        sig = _signature(dynamic)
        if sig not in self._site_info:
            found, unrecorded, dims, not_enumerable, valued = {}, [], [], [], []
            missing: list = []

            def probe(key, dynamic):
                args, kwargs = self.args(dynamic)
                with _model.initialising():
                    sites = _model.get_trace(self.model, args, kwargs, rng_key=key)
                record(sites, _model.analyze_sites(self.model, args, kwargs))

            def record(sites, static):
                for name, site in sites.items():
                    if site.enumerated and not site.is_observed and site.fn is not None \
                            and not getattr(site.fn, "has_enumerate_support", False):
                        not_enumerable.append((name, site.fn))
                    found[name] = (site.kind, site.is_observed, _is_discrete(site.fn),
                                   site.enumerated)
                    loop_ndim = len(static[name].loops) if name in static else 0
                    if not site.enumerated and (names := plate_dims(site, loop_ndim)) is not None:
                        dims.append((name, names))
                    missing.extend((name, dim, batch)
                                   for dim, batch in missing_plates(site, loop_ndim))
                valued.extend(n for n, s in static.items() if s.type == "sample"
                              and not s.is_observed
                              and getattr(getattr(s, "message", None), "value", None) is not None)
                # observed sites inside a `while_loop`: no static number of occurrences
                unrecorded.extend(n for n, s in static.items()
                                  if s.type == "sample" and s.is_observed and not s.bounded)

            if _model._backend is None:  # effppl: the static analysis says it all, no run
                sites, static = _model.recorded_sites(self.model, *self.args(dynamic))
                record(sites, static)
            else:
                jax.eval_shape(probe, jax.ShapeDtypeStruct((2,), jnp.uint32), dynamic)
            hidden = tuple(n for n, (k, obs, _, enum) in found.items()
                           if k == "sample" and not obs and enum)
            latent = tuple(n for n, (k, obs, _, enum) in found.items()
                           if k == "sample" and not obs and not enum)
            self._site_info[sig] = SiteInfo(
                latent=latent,
                observed=tuple(n for n, (k, obs, *_) in found.items() if k == "sample" and obs),
                deterministic=tuple(n for n, (k, *_) in found.items() if k == "deterministic"),
                discrete_latent=tuple(n for n in latent if found[n][2]),
                unrecorded=tuple(unrecorded),
                dims=tuple(dims),
                enumerated=hidden,
                not_enumerable=tuple(not_enumerable),
                valued=tuple(n for n in valued if n in latent),
                missing_plates=() if hidden else tuple(missing),
            )
        return self._site_info[sig]

    def _potential_and_grad(self, params, dynamic, forward=False):
        pe, grad = (value_and_forward_grad if forward else jax.value_and_grad)(self.potential)(
            params, dynamic)
        param_ok = {n: jnp.all(jnp.isfinite(v)) for n, v in params.items()}
        grad_ok = {n: jnp.all(jnp.isfinite(g)) for n, g in grad.items()}
        return pe, grad, param_ok, grad_ok

    def _observed_values(self, dynamic):
        args, kwargs = self.args(dynamic)
        key = jax.random.key_data(jax.random.key(0))
        with _model.initialising():  # latent sites are drawn only to reach the observed ones,
            sites = _model.get_trace(self.model, args, kwargs, rng_key=key)  # flat ones too
        return {n: s.value for n, s in sites.items() if s.kind == "sample" and s.is_observed}

    def log_likelihood(self, samples: dict, dynamic: tuple, num_draws: int | None = None):
        """`{observed site: log_prob[n]}` at the `n` draws `samples` (dict latent site ->
        `[n, ...]`); `num_draws` gives `n` when `samples` is empty (a model without latent
        sites)."""
        if num_draws is None:
            num_draws = int(next(iter(jax.tree.leaves(samples))).shape[0])
        return self._log_likelihood_compiled(np.arange(num_draws), samples, dynamic)

    def _log_likelihood(self, samples, dynamic):
        args, kwargs = self.args(dynamic)
        # the observed sites' scores only: every field recorded is written at each step of the
        # loops around its site, read or not
        sites = _model.get_trace(self.model, args, kwargs, substitutions=samples,
                                 keep=lambda n, s: s.type == "sample" and s.is_observed,
                                 record="scores")
        return {n: s.log_prob for n, s in sites.items() if s.kind == "sample" and s.is_observed}

    def init_proposer(self, strategy) -> Callable:
        """Compiled `(keys[chain], strategy.dynamic(), dynamic) -> unconstrained params[chain]`."""
        key = (type(strategy), strategy)
        if key not in self._proposers:

            def propose(rng_key, strategy_dynamic, dynamic):
                args, kwargs = self.args(dynamic)
                with _model.initialising():
                    info = self.site_info(dynamic)
                    ctx = ModelContext(model=self.model, args=args, kwargs=kwargs,
                                       latent=info.latent)
                    proposed = strategy.propose(rng_key, ctx, strategy_dynamic)
                    if info.valued:  # NumPyro: a site that already stores a value starts there
                        stored = ctx.unconstrain(ctx.prior(rng_key))
                        proposed = {**proposed, **{n: stored[n] for n in info.valued}}
                    return proposed

            self._proposers[key] = _compiled(over_chains(propose, (0, None, None)))
        return self._proposers[key]

    def predictor(self, return_sites: tuple, infer_discrete: bool = False) -> Callable:
        """Compiled `(keys[n], samples[n], params, dynamic) -> {site: value[n]}` for
        `return_sites`; `params` (param sites' values, the same for every draw) and `samples`
        are substituted. With `infer_discrete`, the enumerated sites are drawn from their
        conditional given each draw (`effppl.infer.infer_discrete`), not from the prior."""
        if (return_sites, infer_discrete) not in self._predictors:

            def predict(rng_key, samples, params, dynamic):
                args, kwargs = self.args(dynamic)
                given = {**params, **samples}
                model = self.model
                if infer_discrete:
                    rng_key, discrete_key = jax.random.split(rng_key)
                    model = _model.infer_discrete(model, given, discrete_key)
                sites = _model.get_trace(  # the values returned only (see `_log_likelihood`)
                    model, args, kwargs,
                    rng_key=jax.random.key_data(rng_key), substitutions=given,
                    keep=lambda n, s: n in return_sites, record="values",
                )
                return {n: sites[n].value for n in return_sites if n in sites}

            self._predictors[return_sites, infer_discrete] = _compiled(
                jax.vmap(predict, in_axes=(0, 0, None, None)))
        return self._predictors[return_sites, infer_discrete]


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
    if any(jnp.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key) for x in (a, b)):
        try:
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        except TypeError:
            return False
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)


def _program(model: Callable, structure: ArgsStructure, dynamic: tuple) -> _Program:
    if has_static_arrays(structure):
        model = with_static_arrays(model)

    def flat(*leaves):
        args, kwargs = structure.rebuild(leaves)
        return _model.run_unhandled(model, args, kwargs)

    closed, consts, _ = internal.trace_to_jaxpr(flat, [internal.abstractify(x) for x in dynamic],
                                               _model.model_name(model))
    internal.check_no_leaked_tracers(consts, _model.model_name(model))
    # Without dead equations (a first-use cache may stage some into the first trace only).
    jaxpr = internal.dce(closed)
    # A numpy constant may be a view of a global array that is later changed in place: keep a copy.
    consts = tuple(np.array(c) if isinstance(c, np.ndarray) else c for c in consts)
    return _Program(str(jaxpr), consts)


def model_fns(model: Callable, structure: ArgsStructure, dynamic: tuple) -> ModelFns:
    """The cached `ModelFns` of `model` for arguments of this structure.

    The model is traced (without handlers) at the shapes of `dynamic`; if a cached `ModelFns`
    was built from a different program or different closed-over values at those shapes (the model
    reads a global that has changed), it is replaced: compiled functions never silently keep old
    values. The trace is skipped when the model's fingerprint (`_fingerprint.py`: its code,
    closures, the globals, defaults and static arguments it reads, and JAX's settings) equals
    the one taken at the last trace that found the cached `ModelFns` valid at these shapes; when
    it differs from that one, the `ModelFns` is replaced whatever the trace shows.
    """
    sig = _signature(dynamic)
    key = ("model_fns", model, structure)
    before = _model_fingerprint(model, structure)
    if before is not None:
        fns = lookup(key)
        if fns is not None and fns.traced_with.get(sig) == before:
            return fns
    program = _program(model, structure, dynamic)

    def valid(fns):
        recorded = fns.traced_with.get(sig)
        if before is not None and recorded is not None and recorded != before:
            # what the model reads changed since: rebuilt even when its program's text and
            # constants are the same (the values of a handler around the model are not in it)
            return False
        return fns.programs.setdefault(sig, program).same_as(program)

    def build():
        fns = ModelFns(model, structure)
        fns.programs[sig] = program
        return fns

    fns = cached(key, build, valid)
    # Kept only when the trace changed nothing it read (a model writing what it reads is traced
    # at every call).
    if before is not None and _model_fingerprint(model, structure) == before:
        fns.traced_with[sig] = before
    else:
        fns.traced_with.pop(sig, None)
    return fns


def _model_fingerprint(model: Callable, structure: ArgsStructure):
    """`_fingerprint.fingerprint` of `model`, of the static arguments of `structure` (a hashable
    object keys the cache by its hash, not by what it holds), and of the settings a trace reads:
    JAX's trace context, NumPyro's validation flag. `None` under the NumPyro backend (a test
    seam)."""
    if _model._backend is not None:
        return None
    static = tuple(v for _, v in structure.static_leaves
                   if not isinstance(v, (StaticArray, StaticObject)))
    settings = (internal.trace_context(), bool(numpyro.distributions.Distribution._validate_args))
    return fingerprint(model, static, settings)


class StaticArgumentWarning(UserWarning):
    """A model needs the value of an array argument while traced; effppl treats it as static."""


_NEEDS_VALUE = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                jax.errors.TracerIntegerConversionError, jax.errors.TracerBoolConversionError)
_warned: set = set()


def _argument_name(model: Callable, args: tuple, kwargs: dict, index: int) -> str:
    """The name of leaf `index` of `(args, kwargs)` as the user wrote it: `group`, `data['x']`."""
    path = jax.tree_util.tree_flatten_with_path((tuple(args), dict(kwargs)))[0][index][0]
    if path[0].idx == 1:
        return f"{path[1].key}{jax.tree_util.keystr(path[2:])}"
    position = path[1].idx
    try:
        params = [p for p in inspect.signature(model).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    name = params[position].name if position < len(params) else f"args[{position}]"
    return f"{name}{jax.tree_util.keystr(path[2:])}"


def prepare(api: str, model: Callable, args: tuple, kwargs: dict) -> tuple[ModelFns, tuple]:
    """`(model_fns(...), dynamic)` for `model(*args, **kwargs)`: `split_cache_key` and
    `model_fns`, except that an array argument whose *value* the model needs while traced (`n =
    len(np.unique(group))`, a Python `if` on it, a shape) becomes a static argument, hashed by
    value and part of the cache key (each new value compiles anew), with a `StaticArgumentWarning`
    naming it, once per model and argument. (`jax.jit` asks for `static_argnames`; here the
    model's own trace says which.)

    **Raises:** `ModelArgumentError` naming an argument that cannot be data (`model_arguments`);
    the JAX error, unchanged, when no argument explains it (a value closed over).
    """
    with model_arguments(api, model, args, kwargs):
        return _prepare(api, model, args, kwargs)


def _prepare(api: str, model: Callable, args: tuple, kwargs: dict) -> tuple[ModelFns, tuple]:
    static: set = set()
    while True:
        structure, dynamic = split_cache_key(api, args, kwargs, frozenset(static))
        try:
            return model_fns(model, structure, dynamic), dynamic
        except _NEEDS_VALUE as err:
            found = _culprits(err, model, structure, dynamic)
            if not found:
                raise
            array_leaves = [i for i, leaf in enumerate(jax.tree.leaves((tuple(args), dict(kwargs))))
                            if i not in static and i not in dict(structure.static_leaves)]
            for j in found:
                index = array_leaves[j]
                static.add(index)
                name = _argument_name(model, args, kwargs, index)
                if (model, name) not in _warned:
                    _warned.add((model, name))
                    warnings.warn(
                        f"{api}: model `{_model.model_name(model)}` needs the value of its array "
                        f"argument `{name}`, not only its shape, while it is traced (e.g. "
                        f"`len(np.unique({name}))`, a Python `if`, a shape), so effppl treats "
                        f"`{name}` as static: it keys the compiled functions, and each new value "
                        f"of it compiles anew. To silence this, pass it as a tuple or compute "
                        f"the value it needs outside the model and pass that as an int.",
                        StaticArgumentWarning, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """The `stacklevel` of `warnings.warn`, called from the caller of this function, that
    points at the first frame outside effppl (the user's call)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _culprits(err: Exception, model: Callable, structure: ArgsStructure, dynamic: tuple) -> list:
    """The indices into `dynamic` of the leaves whose value the model's trace needed: those
    JAX's message names, else the first one that, made concrete, lets the trace go further."""
    named = sorted({int(i) for i in re.findall(r"leaves\[(\d+)\]", str(err))
                    if int(i) < len(dynamic)})
    if named:
        return named
    for j, leaf in enumerate(dynamic):
        def flat(*leaves, j=j, leaf=leaf):
            args, kwargs = structure.rebuild(leaves[:j] + (leaf,) + leaves[j:])
            return _model.run_unhandled(with_static_arrays(model), args, kwargs)
        rest = [internal.abstractify(x) for k, x in enumerate(dynamic) if k != j]
        try:
            internal.trace_to_jaxpr(flat, rest, _model.model_name(model))
        except _NEEDS_VALUE as other:
            if str(other) == str(err):
                continue
        except Exception:  # noqa: BLE001  (another failure: this leaf got the trace further)
            pass
        return [j]
    return []
