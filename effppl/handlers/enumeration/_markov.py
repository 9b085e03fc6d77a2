"""`markov`: enumeration dimensions recycled along a Python loop (NumPyro's and Pyro's `markov`).

Each step of `for t in markov(range(T)):` (or each `with markov():` block, or each call of a
function wrapped by `markov`) opens a *frame*. A site enumerated inside a frame takes the
rightmost enumeration dim not used by the frames it can see: its own, the `history` frames opened
just before it (the previous steps), the frames enclosing the loop (its `iter_parents`), and the
model's top level. So an HMM of T steps needs `history + 1` dims, not T, and its factors form a
chain that the contraction (`_contract.py`) eliminates in time linear in T.

Since a dim then holds different sites in different steps, each site records which enumerated
site each visible dim holds for it (`infer["_markov_dims"]`); the contraction names its factor's
dims by that record. The frames live in a thread-local stack while the model is traced; `enum`
(`_enum._Context`) allocates the dims.
"""

from __future__ import annotations

import functools

from ... import _runtime
from ...primitives import SiteError


def frames() -> list:
    """The frames open in this thread, outermost first."""
    return _runtime.state().markov_frames


class _Frame:
    """One open markov frame: the enumerated sites it allocated (`name -> dim`) and the frames
    whose dims it sees besides its own."""

    __slots__ = ("dims", "parents", "iter_parents", "keep")

    def __init__(self, dims, parents, iter_parents, keep):
        self.dims, self.parents, self.iter_parents, self.keep = dims, parents, iter_parents, keep

    def visible(self):
        """The frames this one reads, in NumPyro's order: itself, its parents, its
        `iter_parents`."""
        return (self, *self.parents, *self.iter_parents)


def _lineage(frame):
    """`frame` and the frames it sees through the loops that enclose it."""
    out, frontier = [frame], (frame,)
    while frontier:
        frontier = tuple(p for f in frontier for p in f.iter_parents)
        out.extend(frontier)
    return tuple(out)


def visible_dims() -> dict:
    """`{dim: site name}` of the enumerated sites that the innermost open frame sees (empty
    outside every frame)."""
    stack = frames()
    out = {}
    if stack:
        for frame in stack[-1].visible():
            for name, dim in frame.dims.items():
                out.setdefault(dim, name)
    return out


def lookup(name):
    """The dim an open frame visible from the innermost one gave `name`, or None."""
    stack = frames()
    for frame in stack[-1].visible() if stack else ():
        if name in frame.dims:
            return frame.dims[name]
    return None


def record(name, dim):
    """Record that the innermost frame gave enumerated site `name` the dim `dim` (and its
    parents, for a frame opened with `keep=True`)."""
    frame = frames()[-1]
    for target in (frame, *(frame.parents if frame.keep else ())):
        target.dims[name] = dim


class _Markov:
    """A markov context: `with` opens one frame; iterating over it (see `markov`) opens one
    frame per element, all closed when the iteration ends."""

    def __init__(self, history, keep, iterable=None):
        self.history, self.keep, self.iterable = history, keep, iterable
        self._saved = []         # closed frames' dims, replayed by the next `with` (keep=True)
        self._iter_parents = ()
        self._opened = []        # frames this context has open, innermost last

    def __enter__(self):
        stack = frames()
        dims = self._saved.pop() if self.keep and self._saved else {}
        parents = tuple(reversed(stack[max(len(stack) - self.history, 0):])) if self.history \
            else ()
        frame = _Frame(dims, parents, self._iter_parents, self.keep)
        stack.append(frame)
        self._opened.append(frame)
        return self

    def __exit__(self, *exc):
        frame = self._opened.pop()
        stack = frames()
        stack.remove(frame)
        if self.keep:
            self._saved.append(frame.dims)
        return False

    def __iter__(self):
        if self.iterable is None:
            raise TypeError("effppl.handlers.markov() without an iterable is a context manager "
                            "(`with markov():`); iterate over `markov(range(T))` instead.")
        stack = frames()
        self._iter_parents = _lineage(stack[-1]) if stack else ()
        depth = len(self._opened)
        try:
            for value in self.iterable:
                self.__enter__()
                yield value
        finally:
            while len(self._opened) > depth:
                self.__exit__(None, None, None)


def markov(fn=None, history=1, keep=False):
    """Declare that the steps of a Python loop form a Markov chain of order `history`, so that
    enumeration recycles its dimensions (NumPyro's `numpyro.contrib.funsor.markov`, Pyro's
    `pyro.markov`).

    Used as `for t in markov(range(T)):`, as `with markov():`, or as `markov(fn)` (each call of
    `fn` in its own frame). A site enumerated in a step takes the rightmost enumeration dim not
    held by the sites of that step, of the `history` steps before it, of the loops around it and
    of the model's top level; so a Python-loop HMM of T steps uses `history + 1` enumeration
    dims instead of T, and its log density is contracted along the chain in time linear in T.
    Without `enum` (e.g. under `seed`) it does nothing.

    A site may use the values of the enumerated sites of its own step and of the `history`
    steps before it only: an older value shares its dim with a newer site (as in NumPyro, this
    is not detected). A site after the loop that uses a value enumerated in it raises (see
    below). Inside a plain `lax.scan`, effppl enumerates without `markov` (first-order chains).

    **Arguments:**
    - `fn`: None (a context manager), an iterable (a generator of its elements, one frame per
      element), or a callable (wrapped so that each call runs in a frame).
    - `history`: the number of previous frames whose enumerated values a frame may use (int
      >= 0; 0: the steps are independent, like a plate).
    - `keep`: if True, a frame closed by `with` is reopened by the next `with` of the same
      context, so that neighbouring branches may depend on each other (NumPyro's `keep`).

    **Returns:** the context manager, generator or wrapped callable.

    **Raises:** `SiteError` for a `history` that is not an int >= 0 or a `keep` that is not a
    bool; the contraction (`log_density`, `TraceEnum_ELBO`, MCMC's potential) raises a
    `SiteError` naming a site whose log density has the dim of an enumerated site it cannot see
    (a value used after its markov context closed).

    **Example:** a two-state HMM over 30 steps, marginalised with 2 enumeration dims.

    >>> import jax.numpy as jnp
    >>> import effppl
    >>> from effppl import distributions as dist
    >>> from effppl.contrib.funsor import config_enumerate, log_density, markov
    >>> @config_enumerate
    ... def hmm(y):
    ...     x = 0
    ...     for t in markov(range(len(y))):
    ...         x = effppl.sample(f"x_{t}", dist.Categorical(jnp.array([[0.9, 0.1],
    ...                                                                [0.2, 0.8]])[x]))
    ...         effppl.sample(f"y_{t}", dist.Normal(2.0 * x, 1.0), obs=y[t])
    >>> lp, tr = log_density(hmm, (jnp.zeros(30),), {}, {})
    >>> tr["x_28"]["value"].shape, tr["x_29"]["value"].shape  # dims -1 and -2, alternating
    ((2,), (2, 1))

    **References:** Obermeyer et al. (2019), "Tensor Variable Elimination for Plated Factor
    Graphs"; NumPyro's `markov` (`numpyro/contrib/funsor/enum_messenger.py`).
    """
    if isinstance(history, bool) or not isinstance(history, int) or history < 0:
        raise SiteError(f"effppl.handlers.markov(..., history={history!r}) expected an int >= 0 "
                        f"(the number of previous steps a step depends on).")
    if not isinstance(keep, bool):
        raise SiteError(f"effppl.handlers.markov(..., keep={keep!r}) expected a bool.")
    if fn is None:
        return _Markov(history, keep)
    if not callable(fn):
        return _Markov(history, keep, fn)
    context = _Markov(history, keep)

    @functools.wraps(fn)
    def in_frame(*args, **kwargs):
        with context:
            return fn(*args, **kwargs)

    return in_frame
