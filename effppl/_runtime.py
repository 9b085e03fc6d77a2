"""The PPL's tracing-time state: one context object, beneath `primitives`.

While a model is traced, the PPL keeps a little state outside the program: the plates entered,
the `with` blocks of handlers around the code (message adjusters, site configurators, masks,
eager blocks), how deep inside handler bodies the tracing is, the mutable sites a model made, the
enumeration and `markov` frames, and a few flags. All of it lives in one `Runtime` object held in
a `contextvars.ContextVar`, so each thread sees its own (a new thread starts with a fresh one).
None of it exists at run time: the compiled program is a plain jaxpr.

`primitives` and `mutable` read only this module. The handlers, a floor above, install what the
primitives need from them with `install` (how to run a site under the eager `with` blocks), so
nothing below `effppl.handlers` imports it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["Runtime", "state", "flag", "is_set", "install", "run_eager"]


@dataclasses.dataclass(eq=False)
class Runtime:
    """The PPL's tracing-time state of one thread.

    - `plates`: the `effppl.plate`s entered, outermost first.
    - `message_adjusters`: functions `msg -> msg` of the `with mask(...)`/`with scale(...)`
      blocks being traced, outermost first; each sample site's message passes through them.
    - `site_configurators`: functions `configure(name, msg, infer, is_observed) -> (msg, infer)`
      of the `config_enumerate`/`enum`/`reparam` wrappers being traced, outermost first.
    - `site_rewriters`: functions `rewrite(name, fn, obs, infer)` of the `reparam` handlers and
      blocks around the code, outermost first: a reparameterizer replaces a site by auxiliary
      sites as the model makes it, so every handler sees them (NumPyro's order).
    - `masks`: the masks of the `mask` handlers and blocks being traced (`get_mask`).
    - `eager_handlers`: the handlers of `with` blocks entered outside any entry point (NumPyro's
      eager use), outermost first.
    - `eager_traces`: the JAX trace each of them was entered in (a site reached in another one,
      e.g. inside a `lax.scan` body traced within the block, cannot be handled one at a time).
    - `value_hints`: functions `hint(kind, name) -> value or None` of the handlers being traced
      that give sites their values (`substitute`, `replay`, `lift`), innermost last: a `param`
      (`kind` "param") with no `init_value` takes its shape and dtype from them (NumPyro's
      `param(name)` under `substitute`), and a plate (`kind` "plate") its subsample size.
    - `flags`: the names of the flags set (`flag`): `"in_clause"` (a handler's clause is being
      traced), `"validating"` (distribution parameters are checked as the program runs),
      `"initialising"` (inference draws initial points), `"guide_first_run"` (an autoguide
      sets up its prototype).
    - `depth`: the number of handler bodies being traced around the code (0: outside a model).
    - `handler_traces`: the JAX traces of those bodies, outermost first.
    - `mutable_frames`: per handler body, the mutable sites its model made (`effppl.mutable`).
    - `enum_context`: what the `enum` handler being traced keeps, or None.
    - `markov_frames`: the `markov` frames open (a Python loop recycling enumeration dims).
    """

    plates: list = dataclasses.field(default_factory=list)
    message_adjusters: list = dataclasses.field(default_factory=list)
    site_configurators: list = dataclasses.field(default_factory=list)
    site_rewriters: list = dataclasses.field(default_factory=list)
    masks: list = dataclasses.field(default_factory=list)
    eager_handlers: list = dataclasses.field(default_factory=list)
    eager_traces: list = dataclasses.field(default_factory=list)
    value_hints: list = dataclasses.field(default_factory=list)
    flags: set = dataclasses.field(default_factory=set)
    depth: int = 0
    handler_traces: list = dataclasses.field(default_factory=list)
    mutable_frames: list = dataclasses.field(default_factory=list)
    enum_context: Any = None
    markov_frames: list = dataclasses.field(default_factory=list)


_current: contextvars.ContextVar[Runtime] = contextvars.ContextVar("effppl_runtime")


def state() -> Runtime:
    """This thread's `Runtime` (made on first use)."""
    try:
        return _current.get()
    except LookupError:
        runtime = Runtime()
        _current.set(runtime)
        return runtime


@contextlib.contextmanager
def flag(name: str):
    """Set the flag `name` (see `Runtime.flags`) for the block."""
    flags = state().flags
    before = name in flags
    flags.add(name)
    try:
        yield
    finally:
        if not before:
            flags.discard(name)


def is_set(name: str) -> bool:
    """Whether the flag `name` is set (see `flag`)."""
    return name in state().flags


_run_eager: Callable | None = None


def install(*, run_eager: Callable) -> None:
    """Install what the primitives need from the handlers (called once, when `effppl.handlers`
    is imported): `run_eager(thunk)` runs `thunk` (which performs one operation) under the
    handlers of the eager `with` blocks."""
    global _run_eager
    _run_eager = run_eager


def run_eager(thunk: Callable) -> Any:
    """`thunk()` under the handlers of the eager `with` blocks (see `install`)."""
    if _run_eager is None:  # only handlers enter eager blocks, so they are installed by then
        raise RuntimeError("effppl.handlers is not imported: no eager handlers can run.")
    return _run_eager(thunk)
