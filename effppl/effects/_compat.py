"""Every use of JAX internals (`jax._src`) in effppl lives here, so a JAX upgrade touches one file."""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

# What `jax.extend` does not export: effect-type registries, the tracing entry point with closure
# conversion, the current trace, and the transformation rule tables.
from jax._src import api_util as _api_util
from jax._src import config as _config
from jax._src import core as _core
from jax._src import effects as _effects
from jax._src.ad_util import Zero  # a symbolic zero tangent
from jax._src.interpreters import ad, batching, mlir
from jax._src.interpreters import partial_eval as pe
from jax._src.lax import lax as _lax
from jax._src.util import split_list  # noqa: F401  (re-exported for the rules)
from jax.core import ShapedArray, Tracer, eval_jaxpr
from jax.extend import linear_util as _lu
from jax.extend import source_info_util as _source_info_util
from jax.extend.core import (
    ClosedJaxpr,
    Effect,
    Jaxpr,
    Literal,
    Primitive,
    jaxpr_as_fun,
    jaxprs_in_params,
)
from jax.extend.core.primitives import (
    call_p,
    closed_call_p,
    cond_p,
    custom_jvp_call_p,
    custom_vjp_call_p,
    jit_p,
    remat_p,
    scan_p,
    while_p,
)

from ._errors import LeakedTracerError
from ._sources import noting_sources
from ._values import describe_non_array

typeof = jax.typeof
new_jaxpr_eqn = _core.new_jaxpr_eqn  # a DCE rule's new equation (`_bounded.py`)

__all__ = [  # re-exported for the rest of `effppl.effects`
    "ad", "Zero", "batching", "mlir", "pe", "Primitive", "ClosedJaxpr", "Jaxpr", "Literal", "ShapedArray",
    "Tracer", "Effect", "eval_jaxpr", "jaxpr_as_fun", "jaxprs_in_params", "typeof", "call_p",
    "closed_call_p", "cond_p", "custom_jvp_call_p", "custom_vjp_call_p", "jit_p", "remat_p",
    "scan_p", "while_p",
]


# Errors and source locations point at the user's code, not at effppl's own frames.
_source_info_util.register_exclusion(__file__.rsplit("/effects/", 1)[0])


def initialize_cpu_linalg() -> None:
    """Set up jaxlib's LAPACK kernels (the CPU's linear algebra: Cholesky, SVD, eigh, ...).

    JAX does this only while it lowers a linear-algebra operation; an executable deserialized
    from disk is never lowered in this process, and its LAPACK custom calls would jump through
    null function pointers (a segmentation fault, not an error). Idempotent and cheap."""
    from jax._src.lax import linalg

    init = getattr(linalg, "initialize_lapack", None)
    if init is not None:
        init()


def config_value(name: str) -> Any:
    """The value of JAX's setting `name` in force here (a context manager's too, e.g.
    `jax.numpy_dtype_promotion(...)`, which `jax.config.read` refuses)."""
    return getattr(jax.config, name)


# Whether the trace in progress is the body of a handler (`handle`, a `with`-scoped one): an
# operation performed here may be handled; outside every such body none can be (only an
# operation's default applies). Part of JAX's trace context, so that a `jax.jit` function traced
# outside any handler and called again inside one is traced anew.
_HANDLED_REGION = _config.bool_state(
    name="effppl_handled_region", default=False, include_in_trace_context=True,
    help="Internal to effppl.effects: tracing the body of an effect handler.")


def handled_region():
    """Context manager: the code traced inside is the body of a handler."""
    return _HANDLED_REGION(True)


def in_handled_region() -> bool:
    """Whether a handler may be installed around the code being traced now."""
    return bool(_HANDLED_REGION.value)


def register_effect_type(effect_type: type) -> None:
    """Allow `effect_type` inside control flow, custom derivatives, remat and lowering."""
    for type_set in (_effects.control_flow_allowed_effects,
                     _effects.custom_derivatives_allowed_effects,
                     _effects.remat_allowed_effects,
                     _effects.lowerable_effects):
        type_set.add_type(effect_type)


def abstractify(x: Any) -> ShapedArray:
    """The unweakened `ShapedArray` of an array, tracer, `ShapeDtypeStruct` or aval."""
    if isinstance(x, ShapedArray):
        return ShapedArray(x.shape, x.dtype)
    if isinstance(x, jax.ShapeDtypeStruct):
        return ShapedArray(x.shape, x.dtype)
    aval = typeof(x)
    return ShapedArray(aval.shape, aval.dtype)


def weaken(x: Any):
    """`x` (an array or tracer) weakly typed, as a Python scalar of its dtype would be: JAX's
    loops then promote it to a carry's type as they do a Python scalar (`lax.scan`)."""
    return _lax._convert_element_type(x, weak_type=True)


def _trace_flat(fn: Callable, args: Sequence[Any], name: str):
    """Trace `fn(*args)` (args: pytrees of avals): `(jaxpr, consts, out_tree)`, where the jaxpr's
    constvars stand for `consts`, the values `fn` closes over (tracers of an enclosing trace, or
    arrays). Uses `trace_to_jaxpr_dynamic`, stable across JAX 0.10-0.11."""
    args = tuple(args)
    leaves, in_tree = jax.tree_util.tree_flatten(args)
    out_tree_box = []

    def flat_fn(*flat):
        out = fn(*jax.tree_util.tree_unflatten(in_tree, flat))
        out_leaves, tree = jax.tree_util.tree_flatten(out)
        bad = next((x for x in out_leaves if not _is_array_like(x)), None)
        if bad is not None:
            raise TypeError(f"`{name}` returned {out!r:.200}, which holds "
                            f"a {type(bad).__name__} ({bad!r:.80}): a function run under effect "
                            f"handlers (a model, a handled body) must return arrays, pytrees of "
                            f"arrays, or None.")
        out_tree_box.append(tree)
        return out_leaves

    debug = _debug_info(name, fn, args, in_tree)
    wrapped = _lu.wrap_init(flat_fn, debug_info=debug)
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(wrapped, [abstractify(a) for a in leaves])
    return jaxpr, list(consts), out_tree_box[0]


# `(source info, argument names)` of JAX's debug info, for a plain function's code and the tree of
# its arguments: they depend on nothing else, and `inspect.signature` per trace costs ~8 % of an
# elimination. Bounded; cleared when full (a miss only recomputes).
_DEBUG_NAMES: dict = {}


def _debug_info(name: str, fn: Callable, args, in_tree):
    """JAX's `debug_info(name, fn, args, {})`, whose parts that depend on `fn`'s code alone are
    computed once per code object and argument tree."""
    bound = type(fn) is types.MethodType  # a handler's `ret`: its signature without `self`
    code = fn.__func__ if bound else fn
    plain = (type(code) is types.FunctionType and code.__kwdefaults__ is None
             and all(d is None for d in code.__defaults__ or ())
             and not hasattr(code, "__wrapped__") and code.__name__ == code.__code__.co_name)
    if not plain:
        return _api_util.debug_info(name, fn, args, {})
    key = (code.__code__, code.__defaults__, bound, in_tree)
    names = _DEBUG_NAMES.get(key)
    if names is None:
        info = _api_util.debug_info(name, fn, args, {})
        names = (info.func_src_info, info.arg_names)
        if len(_DEBUG_NAMES) >= 4096:
            _DEBUG_NAMES.clear()
        _DEBUG_NAMES[key] = names
    source, arg_names = names
    return _core.DebugInfo(name, source, arg_names, _core.initial_result_paths)


def outside_transformations() -> bool:
    """Whether no JAX transformation (jit, grad, vmap, a trace) is in progress: code runs
    eagerly on concrete values."""
    return _core.trace_state_clean()


def trace_context() -> Any:
    """JAX's settings that a trace depends on (`jax.jit` keys its cache with them: x64, the
    default device, effppl's handled region, ...), a hashable value."""
    return _config.trace_context()


def check_no_leaked_tracers(consts: Sequence[Any], name: str) -> None:
    """Raise `LeakedTracerError` naming `name` when, outside every JAX transformation, a value
    the traced function `name` closes over (`consts`) is a tracer: it leaked out of an earlier
    trace (JAX would fail later, naming neither the function nor the cause)."""
    if _core.trace_state_clean() and any(isinstance(c, Tracer) for c in consts):
        raise LeakedTracerError(
            f"`{name}` reads a JAX value that leaked out of another trace: a tracer (an "
            f"intermediate value of a function being traced, such as a model run by a handler or "
            f"under jit/vmap/grad) was stored in a global, a closure or an attribute, and is read "
            f"here, outside that trace, where it has no value. Return such values, or pass them "
            f"as arguments, instead of storing them.")


def _is_array_like(x) -> bool:
    return isinstance(x, (jax.Array, Tracer, np.ndarray, np.generic, bool, int, float,
                          complex))


def trace_to_jaxpr(fn: Callable, args: Sequence[Any], name: str):
    """Trace `fn(*args)` (args: pytrees of avals) with closure conversion.

    **Returns:** `(closed_jaxpr, consts, out_tree)`: the jaxpr takes the closed-over values
    `consts` (tracers of an enclosing trace, or arrays) as its leading inputs, then the flattened
    args; `out_tree` is the treedef of `fn`'s result.
    """
    jaxpr, consts, out_tree = _trace_flat(fn, args, name)
    return ClosedJaxpr(pe.convert_constvars_jaxpr(jaxpr), ()), consts, out_tree


def trace_to_closed_jaxpr(fn: Callable, avals: Sequence[Any], name: str) -> ClosedJaxpr:
    """Trace `fn(*flat_args) -> list of arrays` at `avals`; closed-over values stay as consts."""
    jaxpr, consts, _ = _trace_flat(lambda *a: list(fn(*a)), [abstractify(a) for a in avals], name)
    return ClosedJaxpr(jaxpr, consts)


def _is_dynamic(x) -> bool:
    return isinstance(x, (jax.Array, Tracer, np.ndarray, np.generic, float, complex)) \
        and not isinstance(x, bool)


def split_traced_args(args, kwargs):
    """Flatten `(args, kwargs)` into the array leaves to trace and a function rebuilding them.

    Python ints, bools, strings and other non-array leaves stay static (as NumPyro models use them
    for sizes and options); arrays and Python floats are traced. (`effppl.infer` keys its
    compiled functions by `split_cache_key` instead, which keeps Python floats static too.)

    **Raises:** `TypeError` naming the argument (`args[0]`, `kwargs['y']`) for a NumPy array that
    JAX cannot trace (of strings or objects).
    """
    with_paths, tree = jax.tree_util.tree_flatten_with_path((args, kwargs))
    leaves = [x for _, x in with_paths]
    dynamic = [_is_dynamic(x) for x in leaves]
    for (path, x), d in zip(with_paths, dynamic):
        problem = d and describe_non_array(x)
        if problem:
            where = ("args" if path[0].idx == 0 else "kwargs") + jax.tree_util.keystr(path[1:])
            raise TypeError(f"The argument {where} is {problem}, which JAX cannot trace: pass "
                            f"arrays of numbers (or static Python values).")

    def rebuild(dyn):
        it = iter(dyn)
        full = [next(it) if d else x for x, d in zip(leaves, dynamic)]
        return jax.tree_util.tree_unflatten(tree, full)

    return [x for x, d in zip(leaves, dynamic) if d], rebuild


def trace_call(fn: Callable, args, kwargs, name: str):
    """Trace `fn(*args, **kwargs)` at the types of its array arguments (`split_traced_args` says
    which are traced; the others stay static), with closure conversion as `trace_to_jaxpr`.

    **Returns:** `(closed_jaxpr, consts, leaves, out_tree)`: the jaxpr takes `consts` then the
    traced `leaves` of `(args, kwargs)`; `out_tree` is the treedef of `fn`'s result.
    """
    leaves, rebuild = split_traced_args(args, kwargs)

    def flat(*xs):
        with noting_sources(xs, leaves):  # what each tracer stands for (`_sources.py`)
            a, kw = rebuild(xs)
            return fn(*a, **kw)

    closed, consts, out_tree = trace_to_jaxpr(flat, [abstractify(x) for x in leaves], name)
    return closed, consts, leaves, out_tree


def scan_counts(params) -> tuple[int, int]:
    """`(num_consts, num_carry)` of a scan equation (JAX 0.11 groups its inputs in `ft_in`, a
    `FlatTree` of (consts, carry, xs) whose `len` counts leaves)."""
    if "num_consts" in params:
        return params["num_consts"], params["num_carry"]
    consts, carry, _ = params["ft_in"].unpack()
    return len(consts), len(carry)


def vmap_indices(*, across_derivatives: bool = True) -> list:
    """Inside `jax.vmap`s being traced, the batched index of the current element along each of
    them (int arrays, each batched along its vmapped axis), nearest first; `[]` outside every
    `vmap`. Lets an operation under a `vmap` see the batch even when none of its arguments
    depend on it. The enclosing `vmap`s count also from inside a loop body or branch being
    traced under them (the indices are then closed over, so the loop or branch is batched along
    each of them). Take them when the operation is first traced, not in its batch rule: a batch
    rule may run while JAX batches a loop body (`batch_jaxpr`), where a value closed over from
    an outer `vmap` would be left behind in the batched body's constants.

    With `across_derivatives=False`, a `vmap` outside a derivative being taken (a `jvp`, as
    `jax.jacfwd` and `jax.hessian` map one over tangents) does not count, nor does any beyond
    it: a value batched by it would make the primal output batched, which `jacfwd` refuses."""
    indices = []
    trace = _core.trace_ctx.trace
    while trace is not None:
        if not across_derivatives and isinstance(trace, (ad.JVPTrace, ad.LinearizeTrace)):
            break
        if isinstance(trace, batching.BatchTrace):
            with _core.set_current_trace(trace.parent_trace):
                index = jax.numpy.arange(trace.axis_data.size)
            indices.append(batching.BatchTracer(trace, index, 0))
        trace = getattr(trace, "parent_trace", None)
    return indices


def vmap_index(*, across_derivatives: bool = True):
    """The nearest of `vmap_indices` (the innermost enclosing `vmap`'s), or None."""
    indices = vmap_indices(across_derivatives=across_derivatives)
    return indices[0] if indices else None


def current_trace():
    """The JAX trace now being recorded into (an opaque object, compared by identity)."""
    return _core.trace_ctx.trace


def bind_eqn(eqn, invals):
    """Re-emit `eqn` unchanged on `invals` in the current trace; returns the list of outputs."""
    trace = _core.trace_ctx.trace
    if type(trace) is pe.DynamicJaxprTrace and not eqn.effects and _emittable(eqn):
        outs = _emit_eqn(trace, eqn, invals)
        if outs is not None:
            return outs
    bind_params = eqn.primitive.get_bind_params(eqn.params)
    with _source_info_util.user_context(eqn.source_info.traceback,
                                        name_stack=eqn.source_info.name_stack), eqn.ctx.manager:
        out = eqn.primitive.bind(*invals, **bind_params)
    return list(out) if eqn.primitive.multiple_results else [out]


def _emittable(eqn) -> bool:
    """Whether `eqn` may be recorded as it is, as JAX inlines a jaxpr: a primitive whose staging
    rule only decides how to record a new equation (a nested `jit` without mutable-array
    constants, `reshape`, `broadcast_in_dim`, `dynamic_slice`), or one without such a rule."""
    if eqn.primitive is jit_p:
        return not any(isinstance(c, _core.Ref) for c in eqn.params["jaxpr"].consts)
    return eqn.primitive not in pe.custom_staging_rules or eqn.primitive in _STAGED_AS_THEY_ARE


def emit_jaxpr(closed: ClosedJaxpr, *args) -> list:
    """`jaxpr_as_fun(closed)(*args)`, with each equation re-emitted by `bind_eqn` (in a jaxpr
    trace, recorded as it is, without dispatch and abstract evaluation)."""
    env = dict(zip(closed.jaxpr.constvars, closed.consts))
    env.update(zip(closed.jaxpr.invars, args))

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    for eqn in closed.jaxpr.eqns:
        env.update(zip(eqn.outvars, bind_eqn(eqn, [read(v) for v in eqn.invars])))
    return [read(v) for v in closed.jaxpr.outvars]


_STAGED_AS_THEY_ARE = {jax.lax.reshape_p, jax.lax.broadcast_in_dim_p, jax.lax.dynamic_slice_p}


def _emit_eqn(trace, eqn, invals):
    """`eqn` recorded into the jaxpr trace `trace` as it is, when its inputs have the types of
    its variables: what binding it would record, without the primitive's dispatch and abstract
    evaluation (the equations of a translation are re-emitted this way, as JAX inlines a jaxpr
    into a trace). `None` when an input is a constant or its type differs: then it is bound."""
    tracers = []
    for v, x in zip(eqn.invars, invals):
        if isinstance(v, Literal) and x is v.val:  # kept a literal, as JAX inlines one
            x = pe.DynamicJaxprTracer(trace, v.aval, v, eqn.source_info)
        elif type(x) is not pe.DynamicJaxprTracer or x._trace is not trace \
                or (x.aval is not v.aval and x.aval != v.aval):
            return None  # a constant (JAX canonicalizes it when binding) or another type
        tracers.append(x)
    return trace.emit_eqn(tracers, [v.aval for v in eqn.outvars], eqn.primitive, eqn.params,
                          eqn.effects, eqn.source_info, eqn.ctx)


def dce(closed: ClosedJaxpr) -> Jaxpr:
    """`closed`'s jaxpr without the equations no output depends on (every output kept)."""
    jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars), instantiate=True)
    return jaxpr


def without_dead_eqns(closed: ClosedJaxpr) -> ClosedJaxpr:
    """`closed` without its top-level equations that have no effect and whose outputs no later
    equation or output reads (one backward pass; nested jaxprs are left as they are). `closed`
    itself when there are none. A traced model holds such equations (NumPyro's `validate_args`
    computes its checks whether or not they can be raised on), which a translation would
    otherwise copy before dead code elimination drops them."""
    jaxpr = closed.jaxpr
    live = {v for v in jaxpr.outvars if not isinstance(v, Literal)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        if eqn.effects or any(v in live for v in eqn.outvars):
            kept.append(eqn)
            live.update(v for v in eqn.invars if not isinstance(v, Literal))
    if len(kept) == len(jaxpr.eqns):
        return closed
    kept.reverse()
    return ClosedJaxpr(jaxpr.replace(eqns=kept), closed.consts)


def summarize_source(source_info) -> str:
    """`file:line` of where an equation was traced, for error messages."""
    try:
        return _source_info_util.summarize(source_info) or "<unknown location>"
    except Exception:  # pragma: no cover - best effort only
        return "<unknown location>"


def wrap_batching_rule(primitive: Primitive, rule: Callable) -> None:
    """Make `rule(original, axis_data, args, dims, **params)` the batching rule of `primitive`,
    `original` being JAX's own (which `rule` calls for the cases it leaves to JAX)."""
    original = batching.fancy_primitive_batchers.get(primitive)
    if original is None:  # a JAX that keeps this rule elsewhere: say so, never fail silently
        import warnings
        warnings.warn(f"effppl: this JAX ({jax.__version__}) has no batching rule for "
                      f"`{primitive.name}` where effppl expects it, so a `jax.vmap` over a "
                      f"`{primitive.name}` that performs operations and whose predicate depends on "
                      f"the vmapped data will perform the operations of every branch/iteration.",
                      RuntimeWarning, stacklevel=2)
        return
    if getattr(original, "_effppl_wrapped", False):
        return  # a module reload must not wrap twice

    def wrapped(axis_data, args, dims, **params):
        return rule(original, axis_data, args, dims, **params)

    wrapped._effppl_wrapped = True
    batching.fancy_primitive_batchers[primitive] = wrapped
