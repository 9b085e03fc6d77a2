"""`mutable`: a named value a model may change in place while it runs (NumPyro's
`numpyro.mutable`), e.g. the running statistics of a batch-normalisation layer.

`mutable(name, init_value)` performs the operation `mutable_op(value, name=..., final=False)`:
`substitute` may give the value (SVI gives the state of the previous step), and the model gets a
fresh pytree (a dict stays a dict) that it may change in place. Effects are compiled away, so the
changed pytree is not seen by the handlers when it changes: the handler body that runs the model
(`handlers._handler._inside`) keeps the pytrees its model made, and when the model returns it
performs `mutable_op(final_value, name=..., final=True)` for each, at the model's top level, so
`trace` records the value the model left (what NumPyro's trace holds, the same dict changed in
place) and `SVI` keeps it in `SVIState.mutable_state`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from . import _runtime
from . import effects as fx
from ._site_base import (
    SiteError,
    check_eager_trace,
    check_name,
    eager_blocks,
    given_value,
)
from ._site_base import outside_handlers as _outside_handlers
from .effects import internal

__all__ = ["mutable", "mutable_op"]


def _same_type(value, **static):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), x.dtype), value)


mutable_op = fx.Operation("mutable", out=_same_type, unhandled=_outside_handlers)
"""`mutable_op(value, name=..., final=...)`: the site's value when it is created (`final=False`;
handlers may replace it) and when the model returns (`final=True`; recorded, never replaced)."""

def open_frame() -> list:
    """Start collecting the mutable values of a model whose handler body is being traced."""
    frame = []
    _runtime.state().mutable_frames.append(frame)
    return frame


def close_frame(frame: list) -> None:
    """Perform the final value of each mutable site the model of `frame` created (call it at the
    end of the handler body, in its trace), then forget them."""
    drop_frame(frame)
    for name, value, tree, avals, returned, caller in frame:
        if caller is not None and _unchanged(value, returned) \
                and not _unchanged(caller[0], caller[1]):
            value = caller[0]  # NumPyro returns the caller's own pytree: it changed that one
        leaves, now = jax.tree.flatten(value)
        same = now == tree and all(jnp.shape(x) == a.shape for x, a in zip(leaves, avals))
        if same:
            leaves = [jnp.asarray(x, a.dtype) for x, a in zip(leaves, avals)]
            mutable_op(tree.unflatten(leaves), name=name, final=True)
            continue
        filled = _filled_placeholders(tree.unflatten(avals), value)
        if filled is None:
            raise SiteError(f"The model changed the mutable site `{name}` from {tree.unflatten(avals)}"
                            f" to {jax.tree.map(jnp.shape, value)}: change its values in place, "
                            f"keeping its keys and shapes (as they are carried from step to step; "
                            f"a None placeholder may be given its first value).")
        mutable_op(filled, name=name, final=True)


def _filled_placeholders(before, after):
    """`after` as arrays when it is `before` with None placeholders given values (NumPyro's
    `mutable(name, {"value": None})`, filled by the model's first run) and the other leaves'
    shapes kept; else None."""
    def is_none(x):
        return x is None

    old, old_tree = jax.tree.flatten(before, is_leaf=is_none)
    new, new_tree = jax.tree.flatten(after, is_leaf=is_none)
    if old_tree != new_tree or any(n is None or (o is not None and jnp.shape(n) != o.shape)
                                   for o, n in zip(old, new) if not (o is None and n is None)):
        return None
    try:
        new = [n if n is None else jnp.asarray(n, None if o is None else o.dtype)
               for o, n in zip(old, new)]
    except TypeError:
        return None
    return new_tree.unflatten(new)


def _unchanged(tree, leaves) -> bool:
    """Whether `tree` still holds exactly the objects `leaves` (it was changed in place else)."""
    now = jax.tree.leaves(tree)
    return len(now) == len(leaves) and all(a is b for a, b in zip(now, leaves))


def drop_frame(frame: list) -> None:
    """Forget `frame` (the handler body raised)."""
    stack = _runtime.state().mutable_frames
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is frame:  # by identity: empty frames are equal lists
            del stack[i]
            return


def mutable(name: str, init_value: Any = None):
    """A named value the model may change in place, kept from one run to the next by SVI, as
    NumPyro's `numpyro.mutable` (e.g. the running mean of a batch-normalisation layer).

    **Arguments:**
    - `name`: the site name (str).
    - `init_value`: a pytree of arrays (a dict of arrays, typically): the value when no handler
      gives one. effppl needs it to know the value's shapes; or None (NumPyro's placeholder):
      then the value a handler gives (`substitute`, SVI's state from the previous step), or
      None when none gives one, so the caller creates the state and calls `mutable(name,
      state)` (as NumPyro's `flax_module` does with its `name + "$state"`). A pytree with None
      placeholders (`{"value": None}`, NumPyro's) takes the value a handler gives, else the
      model fills them in place on its first run (`state["value"] = ...`); the value it leaves
      then sets the site's keys and shapes.

    **Returns:** the value, a fresh pytree of `init_value`'s structure (or `init_value` itself
    outside any handler, as in NumPyro). Change it in place (`state["mean"] = ...`), keeping its
    keys and shapes (when no handler gives the value, a caller that changes its `init_value` in
    place instead, as NumPyro's `flax_module` does, changes the site's value too, as in NumPyro,
    where the value is then `init_value` itself): `trace` records the value the model leaves
    (`type: "mutable"`), and
    `effppl.infer.SVI` keeps it in `SVIState.mutable_state`, giving it back at the next step
    (gradients do not flow through it). With `init_value=None` and no value given: None, and no
    site is recorded (NumPyro records one whose value is None, unless a later `mutable` call of
    the same name overwrites it). Under `with` blocks entered outside any model (`with
    substitute(data=...), trace():`), the blocks give the value and record it as it is created
    (NumPyro's trace holds the pytree itself, so it also shows the changes made later).

    **Raises:** `SiteError` naming the site for an `init_value` that is not arrays, a
    call inside a loop, branch, `jit` or `vmap` of the model (call it at the top level), and a
    value whose keys or shapes the model changed.

    **Example:**

    >>> import jax.numpy as jnp
    >>> import effppl
    >>> from effppl.handlers import substitute, trace
    >>> def model():
    ...     state = effppl.mutable("state", {"count": jnp.zeros(())})
    ...     state["count"] = state["count"] + 1.0
    >>> float(trace(model).get_trace()["state"]["value"]["count"])
    1.0
    >>> given = substitute(model, data={"state": {"count": jnp.array(4.0)}})
    >>> float(trace(given).get_trace()["state"]["value"]["count"])
    5.0
    """
    check_name("mutable", name)
    runtime = _runtime.state()
    if not runtime.depth:
        if not eager_blocks():
            return init_value
        # `with substitute(...), trace():` blocks outside any model (NumPyro's eager use): the
        # blocks give and record the value it is created with
        check_eager_trace(f"Mutable site `{name}`")
        given = given_value("mutable", name)
        value = _runtime.run_eager(lambda: mutable(name, init_value))
        return value if given is not None else init_value
    if not runtime.handler_traces or runtime.handler_traces[-1] is not internal.current_trace():
        raise SiteError(f"effppl.mutable({name!r}) was called inside a loop, branch, `jit` or "
                        f"`vmap` of the model: call it at the model's top level (its value is "
                        f"recorded when the model returns).")
    given = given_value("mutable", name)  # `substitute` (SVI's state) gives the value
    if init_value is None and given is None:
        return None  # as NumPyro's: the caller creates the state, `mutable(name, state)`
    if init_value is None or (given is not None  # the given value fills None placeholders
                              and jax.tree.structure(init_value) != jax.tree.structure(given)
                              and _filled_placeholders(init_value, given) is not None):
        init_value = jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), jnp.result_type(x)), given)
    # NumPyro returns `init_value` itself when no handler gives a value: a caller that changes
    # its own pytree in place (NumPyro's `flax_module`) changes the site's value
    caller = (init_value, jax.tree.leaves(init_value)) if given is None else None
    try:
        init_value = jax.tree.map(jnp.asarray, init_value)
    except TypeError:
        raise SiteError(f"effppl.mutable({name!r}, init_value) expected a pytree of arrays, but "
                        f"got {init_value!r:.60}.") from None
    if given is None and not jax.tree.leaves(init_value):
        value = init_value  # only None placeholders: nothing to give, the final value is recorded
    else:
        value = mutable_op(init_value, name=name, final=False)
    leaves, tree = jax.tree.flatten(value)
    runtime.mutable_frames[-1].append((name, value, tree, [internal.abstractify(x) for x in leaves],
                                       leaves, caller))
    return value
