"""What every PPL handler shares: the wrapper that installs it, and the outermost base handler.

A PPL handler wraps a model (`seed(model, 0)`) and is itself a model: calling it runs the model
under an `fx.handle` whose clauses are tail-resumptive. The outermost handler of a composition,
when called, also installs the *base handler* (which returns the value the other handlers decided,
or draws it from the key `seed` attached, or raises naming the latent site nobody gave a value) and
compiles all handlers away with `fx.eliminate`. Which handler is outermost is known while tracing;
at run time there is no handler stack: the compiled program is a plain jaxpr.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpyro.distributions
import numpyro.primitives

from .. import _mutable, _runtime
from .. import effects as fx
from ..effects import internal
from ..primitives import (
    SiteError,
    callback_site_errors,
    check_eager_trace,
    deterministic_op,
    eager_blocks,
    giving_values,
    message_contexts,
    param_op,
    sample_op,
    validating_parameters,
    value_shape,
)
from ._sites import analyze


class _NoNumPyroPrimitives(numpyro.primitives.Messenger):
    """On NumPyro's handler stack while an effppl model runs: a NumPyro primitive there would be
    invisible to effppl's handlers (and, with no NumPyro handler, fail deep inside NumPyro)."""

    def process_message(self, msg):
        kind, name = msg.get("type"), msg.get("name")
        if kind == "sample" and isinstance(msg.get("fn"), numpyro.distributions.Unit):
            kind = "factor"  # what numpyro.factor sends
        instead = (f"`effppl.{kind}`" if kind in ("sample", "plate", "deterministic", "factor")
                   else "effppl's primitives (`sample`, `plate`, `deterministic`, `factor`)")
        raise SiteError(
            f"`numpyro.{kind}` (site `{name}`) was called inside an effppl model. effppl's "
            f"handlers (seed, trace, log density, MCMC) do not see NumPyro's primitives; use "
            f"{instead}, which take NumPyro's arguments.")


def _nesting():
    return _runtime.state().depth


def handler_traces() -> list:
    """The JAX traces of the handler bodies being traced, outermost first: code traced in one of
    them runs at a model's top level, not inside a loop, branch or `jit` of the model."""
    return _runtime.state().handler_traces


@contextlib.contextmanager
def _inside(handler=None):
    """The body of a handler, around the model: its traces are the model's top level, and the
    mutable sites its model creates get their final values performed when the model returns.
    `handler`: the handler whose body it is: a `param` with no `init_value` reads its shape
    from its `value_hint` (and a full plate its indices), and its `body_flag` is set."""
    runtime = _runtime.state()
    runtime.depth += 1
    runtime.handler_traces.append(internal.current_trace())
    frame = _mutable.open_frame()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_NoNumPyroPrimitives())
            if handler is not None:
                stack.enter_context(giving_values(handler.value_hint))
                if handler.body_flag is not None:
                    stack.enter_context(_runtime.flag(handler.body_flag))
            yield
        _mutable.close_frame(frame)
    finally:
        _mutable.drop_frame(frame)
        runtime.depth -= 1
        runtime.handler_traces.pop()


@internal.forwards_static("name", "cond_indep_stack")
def _base_sample(params, msg, *, resume, name, **static):
    value = msg.value
    if value is None:
        if msg.rng_key is None and static.get("site_type") == "plate":
            raise SiteError(f"The subsampled plate `{name}` needs a random key for its indices: "
                            f"run the model under `effppl.handlers.seed`, or give the indices "
                            f"with `substitute`. NUTS, HMC and SA do not subsample; "
                            f"`effppl.infer.HMCECS` does (energy-conserving subsampling).")
        if msg.rng_key is None:
            raise SiteError(f"The latent site `{name}` has no value: no handler gave it one. Run "
                            f"the model under `effppl.handlers.seed(model, rng_seed)` to draw it, "
                            f"or `substitute`/`condition` it.")
        value = msg.fn.sample(msg.rng_key)
        infer = dict(static.get("infer", ()))
        if value.shape != value_shape(msg, infer):
            parents = ", ".join(f"`{p}`" for p in infer.get("_enumerated_parents", ()))
            raise SiteError(f"The latent site `{name}` has no value, and its distribution "
                            f"depends on the enumerated site(s) {parents}: under `enum` it has "
                            f"one value shared by all of theirs, which cannot be drawn. Give "
                            f"it a value (`substitute`, posterior samples, a guide), or draw "
                            f"the model without enumeration.")
    return resume(params, value)


@internal.forwards_static("name")
def _base_param(params, msg, *, resume, name, **static):
    if msg.decided() is None:
        raise SiteError(f"The param site `{name}` has a function as `init_value`, which needs a "
                        f"PRNG key: run the model under `effppl.handlers.seed(model, rng_seed)`, "
                        f"or `substitute` the param's value.")
    return resume(params, msg.decided())


@internal.forwards_static("name", "cond_indep_stack")
def _base_value(params, value, *, resume, **static):
    """A deterministic or mutable site's value, as it is: one jaxpr for every site of a type."""
    return resume(params, value)


def _base_fail(params, when, carry, values, *, resume, message):
    """`effects.fail` that no handler inside took (not a log density: `Predictive`, `trace`):
    the model goes on with what the failing code returned (`inf` values of a failed solve)."""
    return resume(params, carry)


_BASE = {sample_op: _base_sample, param_op: _base_param, deterministic_op: _base_value,
         _mutable.mutable_op: _base_value, fx.fail_op: _base_fail}


def forward_param(msg, **static):
    """Re-perform the param operation for the handlers outside the current one."""
    return param_op(msg, **static)


def masked_log_prob(fn, value, mask=None, scale=None):
    """`fn.log_prob(value)`, zero where `mask` is False, times `scale`: a site's elementwise log
    density under `handlers.mask`/`handlers.scale` (NumPyro's masked and scaled distribution)."""
    return weighted(fn.log_prob(value), mask, scale)


def weighted(lp, mask=None, scale=None):
    """Elementwise log densities `lp`, zero where `mask` is False, times `scale`
    (`handlers.mask`/`handlers.scale`; broadcasting against `lp`'s batch shape)."""
    if mask is not None:
        lp = jnp.where(mask, lp, 0.0)
    if scale is not None:
        lp = lp * scale
    return lp


def model_name(fn) -> str:
    """A model's name for messages and traced programs (`effects.internal.callable_name`); for
    a handler, or a handler's bound method, the name of the model the handler wraps."""
    owner = getattr(fn, "__self__", fn)
    if isinstance(owner, Handler) and owner.fn is not None:
        return model_name(owner.fn)
    return internal.callable_name(fn)


def _named_like(fn):
    """`functools.wraps` that also names the wrapper after a partial or a callable object."""
    def deco(wrapper):
        wrapper = functools.wraps(fn, updated=())(wrapper)
        wrapper.__name__ = model_name(fn)
        return wrapper
    return deco


def run_outermost(fn, *args, **kwargs):
    """Run `fn` (a model, possibly wrapped in handlers) under the base handler, compiled."""
    if _nesting():
        return fn(*args, **kwargs)
    if eager_blocks():
        return run_eager(fn, *args, **kwargs)

    @_named_like(fn)
    def body(*a, **kw):
        with _inside():
            return fn(*a, **kw)

    if not (numpyro.distributions.Distribution._validate_args
            and internal.outside_transformations()):
        with internal.recording_sources():  # for `concrete_arguments`
            return fx.eliminate(fx.handle(body, clauses=_BASE))(*args, **kwargs)
    # validation on, run eagerly: the traced distribution parameters are checked as it runs
    with internal.recording_sources(), validating_parameters(), callback_site_errors():
        return jax.block_until_ready(
            fx.eliminate(fx.handle(body, clauses=_BASE))(*args, **kwargs))


def concrete_arguments(args, kwargs):
    """`(args, kwargs)` with each tracer replaced by the concrete value the outermost handler
    was called with, for arguments a model passes on unchanged (a guide's under `trace(seed(
    guide, key))`); None when some tracer stands for no such value (one computed while tracing,
    or traced by an outer `jax.jit`)."""
    return internal.source_values((args, kwargs))


def run_eager(fn, *args, **kwargs):
    """Run `fn` under the handlers of the `with` blocks entered outside any entry point
    (innermost nearest to `fn`), which then keep their final parameters (NumPyro's eager
    handlers: a `seed` block's key moves on, a `trace` block records)."""
    blocks, traces = eager_blocks(), _runtime.state().eager_traces
    handlers, entered = list(blocks), list(traces)
    blocks.clear()
    traces.clear()
    try:
        def inner(*a, **kw):
            return fn(*a, **kw), ()
        run, copies = inner, []
        for h in reversed(handlers):
            run, handled = h._collecting(run)
            copies.append(handled)
        result, finals = run_outermost(run, *args, **kwargs)
    finally:
        blocks[:] = handlers
        traces[:] = entered
    for h, handled, params in zip(reversed(handlers), copies, finals):
        h.absorb(handled, params)
    return result


def run_in_blocks(fn, *args, **kwargs):
    """`fn(*args, **kwargs)`, run whole under the handlers of the `with` blocks entered outside
    any model when there are some and the code runs outside every model (NumPyro's `scan` under
    `with seed(...), trace() as tr:`: the translator then handles the sites inside `fn`'s loops,
    and the blocks record them stacked); else called as it is.

    **Raises:** `SiteError` when called inside a JAX transformation begun within the blocks."""
    if eager_blocks() and not _nesting():
        check_eager_trace(f"`{internal.callable_name(fn)}`")
        return run_eager(fn, *args, **kwargs)
    return fn(*args, **kwargs)


def keep_weak_types(tree):
    """`tree` with each array leaf weakly typed when the value it stands for is: a Python
    scalar or a weakly typed array, also one an entry point or `with` block traced as a model's
    argument (tracing makes it strongly typed; `internal.stands_for_weak` tells it). NumPyro
    runs a model on the values themselves, so `lax.scan` there promotes such a carry to the
    body's dtype (`init=0.0` with a float32 body); this keeps that promotion."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef.unflatten([
        internal.weaken(x) if isinstance(x, jax.Array) and not jax.typeof(x).weak_type
        and internal.stands_for_weak(x) else x for x in leaves])


_runtime.install(run_eager=run_eager)  # the primitives run a site under eager blocks with it


class Handler:
    """Base class of the PPL handlers: `Handler(fn)(*args, **kwargs)` runs `fn` handled.

    Subclasses define `clauses()` (a dict Operation -> clause), and may define `params(...)`,
    `ret(params, result)`.

    With `fn=None` a handler scopes a block instead, as NumPyro's do: `with seed(rng_seed=0): ...`.
    Inside a model that an entry point runs, the block becomes an `effects.scoped` handler, which
    the translator compiles away like a wrapping one (sites inside plain loops included); a
    subclass says which arrays its clauses read (`scope_consts`/`with_scope_consts`) and may
    analyse the block's sites first (`scope_setup`). Outside any entry point (NumPyro's eager
    use) the block's handlers wrap each site, and each entry point called, as they run
    (`run_eager`). A handler that only adjusts each site's message (`mask`, `scale`) defines
    `adjust_message(msg) -> msg`, which a `with` block applies to the messages it makes.
    """

    adjust_message: Callable | None = None
    body_flag: str | None = None  # a runtime flag set while the model it wraps is traced

    def __init__(self, fn: Any = None):
        self.fn = fn
        self._scope: fx.scoped | None = None    # the `effects.scoped` of a `with` block in a model
        self._scope_info: Any = None            # what `scope_setup` found in that block
        self._body_jaxpr: Any = None            # the model's jaxpr its handler traced (`analysis`)
        if fn is None:
            return  # a context manager: `with seed(rng_seed=0): ...`
        if not callable(fn):
            raise TypeError(f"effppl.handlers.{type(self).__name__}(fn, ...) expected a callable "
                            f"model, but got {fn!r}.")
        functools.update_wrapper(self, fn, updated=())

    def __enter__(self):
        if self.fn is not None:
            raise TypeError(f"effppl.handlers.{type(self).__name__}(model, ...) wraps a model; to "
                            f"scope a block, leave the model out: `with "
                            f"{type(self).__name__}(...): ...`.")
        if self.adjust_message is not None:  # mask, scale: adjust each message as it is made
            message_contexts().append(self.adjust_message)
        elif _nesting():
            self._scope = fx.scoped(self._scoped_clauses, params=self.scope_params(),
                                    consts=self.scope_consts(), setup=self.scope_setup,
                                    name=type(self).__name__)
            self._scope.__enter__()
        else:
            eager_blocks().append(self)
            _runtime.state().eager_traces.append(internal.current_trace())
        _runtime.state().value_hints.append(self.value_hint)
        return self

    def __exit__(self, *exc):
        hints = _runtime.state().value_hints
        if self.value_hint in hints:
            hints.remove(self.value_hint)
        if self.adjust_message is not None:
            message_contexts().remove(self.adjust_message)
        elif self._scope is not None:
            scope, self._scope = self._scope, None
            scope.__exit__(*exc)
        else:
            index = eager_blocks().index(self)
            del eager_blocks()[index], _runtime.state().eager_traces[index]
        return False

    def value_hint(self, kind, name):
        """The value (or its shape and dtype) this handler gives site `name` of type `kind`
        ("param", "plate"), or None: a `param(name)` with no `init_value` takes its shape from
        it (NumPyro's `param(name)` under `substitute`), a full plate its indices (`replay` of
        a subsampled plate's trace)."""
        return None

    def scope_params(self):
        """The initial parameters of this handler scoping a block inside a model."""
        return self.params()

    def scope_consts(self):
        """The arrays this handler's clauses read (a pytree), for a block inside a model."""
        return ()

    def with_scope_consts(self, consts):
        """A copy of this handler whose clauses read `consts` (the trace's values)."""
        return self

    def scope_setup(self, eqns):
        """What the clauses need to know about the block's equations (`effects.scoped`)."""
        return None

    def _scoped_clauses(self, consts, info):
        h = copy.copy(self.with_scope_consts(consts))
        h._scope_info = info
        return h.clauses()

    def _collecting(self, fn):
        """`(run, copy)`: `run(*args)` runs `fn` (returning `(result, params)`) under a copy of
        this handler, returning `(result, params + (this handler's final params,))`."""
        h = copy.copy(self)
        h.fn = fn

        def run(*args, **kwargs):
            @_named_like(fn)
            def body(*a, **kw):
                with _inside(h):
                    return fn(*a, **kw)
            return fx.handle(body, params=h._params_of(args, kwargs), clauses=h.clauses(),
                             ret=lambda p, r: (r[0], (*r[1], p)))(*args, **kwargs)
        return run, h

    def absorb(self, handled, params):
        """After an eager run under the copy `handled` of this handler, keep its final
        `params` (seed: the key; trace: the sites recorded)."""

    def params(self, *args, **kwargs):
        return ()

    def ret(self, params, result):
        return result

    def clauses(self):
        raise NotImplementedError

    def handled(self, *args, **kwargs):
        """Run under this handler only (inside an outer composition)."""
        if self.fn is None:
            raise TypeError(f"effppl.handlers.{type(self).__name__}(...) was built without a "
                            f"model, to scope a `with` block; to call it, wrap a model: "
                            f"`{type(self).__name__}(model, ...)(*args)`.")
        @_named_like(self.fn)
        def body(*a, **kw):
            with _inside(self):
                return self.fn(*a, **kw)
        return fx.handle(body, params=self._params_of(args, kwargs), clauses=self.clauses(),
                         ret=self.ret)(*args, **kwargs)

    def _params_of(self, args, kwargs):
        """`effects.handle`'s `params`: a function of the body's traced jaxpr, which it keeps
        for `analysis()` (no second trace of the model), giving `self.params(*args, **kwargs)`."""
        def params(body_jaxpr):
            self._body_jaxpr = body_jaxpr
            return self.params(*args, **kwargs)
        return params

    def analysis(self) -> dict:
        """The site analysis (`_sites.analyze`) of the model this handler wraps, read from the
        jaxpr its handler traced (inside `params`): the model is not traced again for it."""
        return analyze(self._body_jaxpr)

    def __call__(self, *args, **kwargs) -> Any:
        if self.fn is None:
            return self.decorate(*args, **kwargs)
        return run_outermost(self.handled, *args, **kwargs)

    def decorate(self, *args, **kwargs):
        """A handler built without a model, called on one: it wraps that model and returns
        itself, as NumPyro's handlers do (`seed(rng_seed=0)(model)`, `@scale(scale=2.0)`).

        **Raises:** `TypeError` unless called with exactly one callable (the model)."""
        self.set_model(model_to_wrap(type(self).__name__, args, kwargs))
        return self

    def set_model(self, fn):
        """Wrap the model `fn` (a handler built without one, `decorate`)."""
        self.fn = fn
        functools.update_wrapper(self, fn, updated=())


def model_to_wrap(name, args, kwargs) -> Callable:
    """The model in `args`, those of a call of the handler `effppl.handlers.<name>` built
    without one (NumPyro's decorator use, `seed(rng_seed=0)(model)`).

    **Raises:** `TypeError` unless `args` is one callable and `kwargs` is empty."""
    if len(args) != 1 or kwargs or not callable(args[0]):
        got = ", ".join([*(type(a).__name__ for a in args), *kwargs])
        raise TypeError(f"effppl.handlers.{name}(...) was built without a model, so calling it "
                        f"wraps one: it expected one callable model (`{name}(...)(model)`, or "
                        f"`@{name}(...)` above a model), but got ({got}). To run a model under "
                        f"it, wrap a model: `{name}(model, ...)(*args)`.")
    return args[0]


def forward(msg, **static):
    """Re-perform the sample operation for the handlers outside the current one."""
    return sample_op(msg, **static)


def call_unhandled(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` with its sites left as unhandled operations, to trace its program
    (handlers inside `fn` are not compiled away either); evaluating the result raises."""
    with _inside():
        return fn(*args, **kwargs)


def trace_model(fn, *args, **kwargs):
    """The effectful jaxpr of `fn(*args, **kwargs)` (for site analysis); never runs it."""
    closed, *_ = internal.trace_call(functools.partial(call_unhandled, fn), args, kwargs,
                                     model_name(fn))
    return closed.jaxpr
