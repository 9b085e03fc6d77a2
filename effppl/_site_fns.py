"""The user's functions of a site's message, as NumPyro calls them: `substitute`'s
`substitute_fn`, `condition`'s `condition_fn`, `block`'s `hide_fn`, a `reparam` config, an init
strategy. Each is given NumPyro's message dict for the site (`numpyro_message`) and called by
`ask` while the model is traced, so the arrays in the message are JAX tracers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpyro.util

from ._errors import EffpplError
from .effects.internal import callable_name
from .primitives import ParamMsg, SampleMsg, prng_key_op

__all__ = ["SiteFunctionError", "numpyro_message", "ask"]


class SiteFunctionError(EffpplError, TypeError):
    """A user's function of a site's message (`substitute_fn`, `condition_fn`, `hide_fn`, a
    `reparam` config, an init strategy) needed the Python value of a traced array."""


_NEEDS_VALUE = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                jax.errors.TracerIntegerConversionError)


def numpyro_message(kind: str, name: str, static: dict, msg: Any = None) -> dict:
    """NumPyro's message for site `name` of type `kind` (`"sample"`, `"plate"`, `"param"`,
    `"deterministic"`, `"mutable"`), the dict NumPyro's handlers give the user's site functions.
    Built from the site's message (`SampleMsg`, `ParamMsg`, a deterministic or mutable site's
    value, or None) and its static parameters. As in NumPyro:

    - `value` is the value an inner handler decided (`substitute`, `condition`, `obs=`), None
      while there is none; a param's `value` is None until a handler gives one, and its
      `init_value` is `args[0]` (for an `init_value` function, `args` is empty and `fn()` gives
      its value, called with a key from `seed`).
    - `kwargs["rng_key"]` of a sample site is the typed key (`jax.random.key`'s kind) that a
      `seed` inside the asking handler gave it: `substitute(seed(model, 0), substitute_fn=f)`
      shows `f` the keys NumPyro's does; with `seed` outside, or none, it is None. (NumPyro's
      seed keeps a raw `PRNGKey` it was given raw; effppl's keys are typed, with the same bits.)
    - a param's `kwargs` are its `constraint` and `event_dim`; `infer` is a dict.
    """
    args: tuple = ()
    if isinstance(msg, SampleMsg):
        fields = msg
        key = None if msg.rng_key is None else jax.random.wrap_key_data(msg.rng_key)
        kwargs = {"rng_key": key, "sample_shape": ()}
    elif isinstance(msg, ParamMsg):
        init_fn = static.get("init_fn")
        fields = SampleMsg(fn=_param_fn(msg, init_fn), value=msg.value)
        args = (msg.init,) if init_fn is None else ()
        kwargs = {"constraint": msg.constraint, "event_dim": static.get("event_dim")}
    else:
        fields = SampleMsg(fn=None, value=msg)
        kwargs = {"rng_key": None, "sample_shape": ()}
    return {"type": kind, "name": name, "fn": fields.fn, "value": fields.value,
            "is_observed": bool(static.get("is_observed", False)),
            "infer": dict(static.get("infer", ())), "scale": fields.scale, "mask": fields.mask,
            "cond_indep_stack": list(static.get("cond_indep_stack", ())),
            "args": args, "kwargs": kwargs, "intermediates": [], "stop": False,
            "continuation": None}


def _param_fn(msg, init_fn):
    """A param message's `fn`, as NumPyro's: `fn(*args)` is the initial value (the identity of
    `args`; for an `init_value` function, its value at a key from `seed`)."""
    if init_fn is None:
        return numpyro.util.identity
    if msg.init is not None:  # an inner `seed` drew it already
        return lambda *args, **kwargs: msg.init
    return lambda *args, **kwargs: init_fn(prng_key_op(name=None), *msg.init_args)


def ask(api: str, fn: Callable, kind: str, name: str, static: dict, msg: Any = None):
    """`fn(numpyro_message(kind, name, static, msg))`: the answer of the user's function `fn`,
    given as the argument `api` (e.g. "effppl.handlers.substitute(fn, substitute_fn=...)"),
    about site `name`.

    **Raises:** `SiteFunctionError` naming `fn`, `api` and the site when `fn` needs the Python
    value of a traced array (`float(msg["value"])`, a Python `if` on it), with JAX's error as its
    `__cause__`; any other error of `fn` unchanged.
    """
    try:
        return fn(numpyro_message(kind, name, static, msg))
    except _NEEDS_VALUE as err:
        raise SiteFunctionError(
            f"`{api}`: the function `{callable_name(fn)}` needed the Python value of a traced "
            f"array in the message of {kind} site `{name}` ({type(err).__name__}). effppl calls "
            f"it while the model is traced, so the message's "
            f"`value`, its distribution's parameters and its `rng_key` are JAX tracers. Decide "
            f"with its static fields (`name`, `type`, `is_observed`, `infer`, shapes) and compute "
            f"with `jnp` (`jnp.where` instead of a Python `if`, no `float(...)`).") from err
