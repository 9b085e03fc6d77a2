"""Model arguments at the inference entry points (`MCMC.run`, `Predictive`, `log_likelihood`):
checked once, and named (by position and parameter name) when they cannot be data.

Arrays of strings or objects and ragged nested lists can never be data: they raise at once. A str
or another object may be a static option the model branches on, so it passes; only when tracing
the model then fails is the error re-raised naming that argument (JAX's own message names
neither the argument nor the model).
"""

import contextlib
import functools
import inspect
from collections.abc import Callable

import jax
import jax.core
import numpy as np

from ..._errors import EffpplError
from ...effects import LeakedTracerError
from ...effects.internal import describe_non_array

__all__ = ["ModelArgumentError", "holds_tracer", "leaked_tracers", "model_arguments",
           "names_leaks"]


class ModelArgumentError(EffpplError, TypeError):
    """A model argument given to an inference entry point cannot be data (a string, an object,
    a ragged list, an array of strings or objects), or is None where the model scans over it;
    the message names the argument by position and name."""


def _labelled(model: Callable, args: tuple, kwargs: dict):
    """`(label, value)` per argument: "argument 0 (`y`)", "keyword argument `y`"."""
    try:
        names = [p.name for p in inspect.signature(model).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    for i, value in enumerate(args):
        yield (f"argument {i} (`{names[i]}`)" if i < len(names) else f"argument {i}"), value
    for name, value in kwargs.items():
        yield f"keyword argument `{name}`", value


def _never_data(value) -> str | None:
    """What `value` is, when no model can use it as data: an array of strings or objects, or a
    ragged nested list of numbers (anywhere in the argument's pytree)."""
    if isinstance(value, (list, tuple)) and all(
            isinstance(x, (int, float, complex, np.number)) for x in jax.tree.leaves(value)):
        try:
            np.asarray(value)
        except ValueError:
            return f"a ragged nested {type(value).__name__} (rows of different lengths)"
    for leaf in jax.tree.leaves(value):
        if isinstance(leaf, np.ndarray) and describe_non_array(leaf):
            return describe_non_array(leaf)
    return None


def _maybe_not_data(value) -> tuple | None:
    """`(what it is, the leaf)` for a leaf of `value` that is not an array or a number (a str, an
    object), or None."""
    for leaf in jax.tree.leaves(value):
        if leaf is not None and not callable(leaf) and describe_non_array(leaf):
            return describe_non_array(leaf), leaf
    return None


def _numbers_list(value) -> bool:
    """Whether `value` is a non-empty (nested) list or tuple of Python numbers."""
    leaves = jax.tree.leaves(value)
    return isinstance(value, (list, tuple)) and bool(leaves) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in leaves)


def _model_name(model):
    from .._model import model_name
    return model_name(model)


def _message(api, model, label, problem):
    return (f"`{api}`: {label} of model `{_model_name(model)}` is {problem}, which cannot be "
            f"data: pass data as jax or numpy arrays of numbers (or Python numbers, or rectangular "
            f"lists of numbers).")


def _none_args(labels):
    """Which arguments are None, for the message of a scan over None (which of them the scan
    reads is not known)."""
    if len(labels) == 1:
        return f"{labels[0]} is None"
    return f"{', '.join(labels)} are None (one of them may be what the scan reads)"


def holds_tracer(tree) -> bool:
    """Whether a leaf of `tree` is a JAX tracer: the caller runs inside a JAX transformation
    (`jax.jit`, `jax.vmap`, a `lax` loop). The inference drivers (`MCMC.run`, a kernel's
    settings) refuse such inputs with their own errors."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(tree))


@contextlib.contextmanager
def leaked_tracers(api: str, model: Callable):
    """Turn JAX's `UnexpectedTracerError`, raised while the block traces or runs `model`, into
    `effects.LeakedTracerError` naming the model: the model read a tracer that an earlier trace
    of it (the model is traced more than once) stored in a global, closure or attribute."""
    try:
        yield
    except jax.errors.UnexpectedTracerError as err:
        if isinstance(err, LeakedTracerError):
            raise
        raise LeakedTracerError(
            f"`{api}`: model `{_model_name(model)}` reads a JAX value that leaked out of another "
            f"trace: a tracer (an intermediate value of a function being traced, such as the "
            f"model in an earlier trace of it) was stored in a global, a closure or an "
            f"attribute, and is read outside that trace. Return such values, or pass them as "
            f"arguments, instead of storing them. (JAX: {str(err)[:300]})") from err


def names_leaks(api: str):
    """Decorate a method of an object with a `model` so it runs under `leaked_tracers`."""
    def decorate(method):
        @functools.wraps(method)
        def wrapped(self, *args, **kwargs):
            with leaked_tracers(api, self.model):
                return method(self, *args, **kwargs)
        return wrapped
    return decorate


@contextlib.contextmanager
def model_arguments(api: str, model: Callable, args: tuple, kwargs: dict):
    """Check the model arguments `args`, `kwargs` of `api`, and name them in errors raised while
    the block (which traces the model) runs.

    **Raises:** `ModelArgumentError` naming the argument: at once for an array of strings or
    objects or a ragged list; for a str or another object, or a Python list of numbers (which
    the model gets as separate scalars), or None scanned over by a `lax.scan` without `length`,
    when the block raises a `TypeError`, `ValueError`, `IndexError` or `AttributeError` (e.g.
    `x.shape` of a list; re-raised from it). `effects.LeakedTracerError` naming the model for
    JAX's `UnexpectedTracerError` (the model read a tracer stored by an earlier trace).
    """
    labelled = list(_labelled(model, args, kwargs))
    for label, value in labelled:
        problem = _never_data(value)
        if problem:
            raise ModelArgumentError(_message(api, model, label, problem))
    try:
        with leaked_tracers(api, model):
            yield
    except (TypeError, ValueError, IndexError, AttributeError) as err:
        if isinstance(err, ModelArgumentError):
            raise
        nones = [label for label, value in labelled if value is None]
        if nones and "no values to scan over" in str(err):  # JAX's, from a `lax.scan` on None
            raise ModelArgumentError(
                f"`{api}`: {_none_args(nones)} of model `{_model_name(model)}`, and a "
                f"`lax.scan` in the model got no values to scan over and no `length` (JAX: "
                f"{str(err).rstrip('.')}). Pass the data, or give the scan its length when its "
                f"`xs` may be None: `jax.lax.scan(step, init, y, length=T)`.") from err
        lists = [(label, value) for label, value in labelled if _numbers_list(value)]
        if lists and not isinstance(err, EffpplError):
            label, value = lists[0]
            kind = type(value).__name__
            raise ModelArgumentError(
                f"`{api}`: {label} of model `{_model_name(model)}` is a Python {kind} of "
                f"numbers, which reaches the model as a {kind} of separate Python scalars (a "
                f"pytree), not as an array, and tracing the model failed on it with "
                f"{type(err).__name__}: {str(err).rstrip('.')}. Pass it as an array: "
                f"`jnp.asarray(...)`.") from err
        suspects = [(label, found) for label, value in labelled
                    if (found := _maybe_not_data(value))]
        if isinstance(err, EffpplError):  # effppl's own error: only if it is about that value
            suspects = [(label, (problem, leaf)) for label, (problem, leaf) in suspects
                        if repr(leaf)[:30] in str(err)]
        if not suspects:
            raise
        label, (problem, _) = suspects[0]
        raise ModelArgumentError(f"{_message(api, model, label, problem)} Tracing the model "
                                 f"failed with {type(err).__name__}: {err}") from err
