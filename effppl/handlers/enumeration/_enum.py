"""Parallel enumeration of discrete latent sites: `config_enumerate` marks sites, `enum` gives each
marked site its whole support in a fresh batch dimension (Pyro's and NumPyro's semantics).

Both act while the model is traced, through `primitives.site_contexts`: a marked site at the
model's top level (not inside a loop, branch or `jit` of the model) is performed with the value
`fn.enumerate_support(expand=False)`, moved to its own dimension left of the model's plates, so
everything downstream broadcasts over it and each site's `log_prob` holds one entry per value of
the enumerated sites it depends on (`_contract.py` then sums them out). A marked site inside a
`lax.scan` is left to the scan rewrite (`_forward_algorithm.py`). Inside `markov` frames (a Python loop)
the dims are recycled (`_markov.py`).

A latent site that is not enumerated but whose distribution depends on enumerated sites (its
batch shape reaches their dims) keeps the shape it has in the model traced without enumeration,
as in NumPyro: its infer gets `_enumerated_parents` and `_value_shape`, which makes the site's
value that shape (`primitives.value_shape`), one value shared by every enumerated value, whose
`log_prob` broadcasts over their dims.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import jax.numpy as jnp

from ... import _runtime
from ...effects import internal
from ...primitives import SiteError, _plate_frames, configuring_sites
from .._handler import (
    Handler,
    _named_like,
    handler_traces,
    model_to_wrap,
    run_outermost,
    trace_model,
)
from .._sites import analyze, message_avals
from .._trace import is_enumerated
from . import _forward_algorithm, _markov


def _active():
    return _runtime.state().enum_context


def config_enumerate(fn=None, default="parallel"):
    """Mark every latent discrete site of `fn` with finite support for enumeration.

    Sets `infer={"enumerate": default}` on each unobserved sample site whose distribution has
    `has_enumerate_support` and whose `infer` does not say otherwise (NumPyro's
    `config_enumerate`). Usable as a decorator, with or without arguments.

    **Arguments:** `fn`: the model; `default`: `"parallel"` (the only strategy effppl has) or
    `None` (leave the sites unmarked).

    **Returns:** the model with its discrete sites marked.

    **Raises:** `ValueError` for another `default` (Pyro's `"sequential"` is not supported);
    `TypeError` when `fn` is not callable.

    **Example:** a two-component mixture whose component `z` is summed out: the log density
    is the log of the mixture's density.

    >>> import jax.numpy as jnp
    >>> from jax.scipy.stats import norm
    >>> import effppl
    >>> from effppl import distributions as dist
    >>> from effppl.handlers import config_enumerate, log_density
    >>> @config_enumerate
    ... def mixture(y):
    ...     z = effppl.sample("z", dist.Bernoulli(0.3))
    ...     effppl.sample("y", dist.Normal(jnp.where(z, 2.0, 0.0), 1.0), obs=y)
    >>> lp, _ = log_density(mixture, (0.5,), {}, {})
    >>> by_hand = jnp.log(0.3 * norm.pdf(0.5, 2.0) + 0.7 * norm.pdf(0.5))
    >>> round(float(lp), 4), round(float(by_hand), 4)
    (-1.2542, -1.2542)
    """
    if default not in ("parallel", None):
        raise SiteError(f"effppl.infer.config_enumerate(fn, default={default!r}) expected "
                        f"'parallel' or None: effppl enumerates in parallel only.")
    if fn is None:
        return functools.partial(config_enumerate, default=default)
    if not callable(fn):
        raise TypeError(f"effppl.infer.config_enumerate(fn, ...) expected a callable model, but "
                        f"got {type(fn).__name__} {fn!r:.60}.")

    def configure(name, msg, infer, is_observed):
        if (default is not None and not is_observed and "enumerate" not in infer
                and getattr(msg.fn, "has_enumerate_support", False)):
            infer = dict(infer, enumerate=default)
        return msg, infer

    return with_site_configurator(fn, configure)


def with_site_configurator(fn, configure):
    """`fn` run with `configure(name, msg, infer, is_observed) -> (msg, infer)` seeing each of
    its sample sites before it is performed (`primitives.site_contexts`)."""

    @_named_like(fn)
    def configured(*args, **kwargs):
        with configuring_sites(configure):
            return fn(*args, **kwargs)

    configured._wraps_model = (fn, lambda inner: with_site_configurator(inner, configure))
    return configured


def check_enumerable(name, fn):
    """Raise a `SiteError` naming site `name`, marked for enumeration, when its distribution
    `fn` has no finite support to enumerate."""
    if not getattr(fn, "has_enumerate_support", False):
        raise SiteError(f"Site `{name}` is marked for enumeration, but its distribution "
                        f"{type(fn).__name__} has no finite support to enumerate "
                        f"(`has_enumerate_support` is False). Remove `infer={{'enumerate': "
                        f"...}}` from it, or give it a distribution with finite support.")


class _Context:
    """One `enum` being traced: where the model's top level runs, and the dims given out."""

    def __init__(self, first_available_dim, top, plain, draws_dependents=False,
                 taken_dims=frozenset()):
        self.first = first_available_dim
        self.taken = frozenset(taken_dims)  # see `enum.taken_dims`
        self.draws_dependents = draws_dependents  # a guide's: see `enum.draws_dependents`
        self.dims = {}          # site name -> its enumeration dim, outside `markov` frames
        self.recycled = set()   # the dims given out inside `markov` frames
        self.top = top          # index into handler_traces(): the traces at the model's top level
        self.plain = plain      # {name: Site}: the model's sites, traced without enumeration

    def at_top_level(self):
        traces = handler_traces()[self.top:]
        return any(t is internal.current_trace() for t in traces)

    def configure(self, name, msg, infer, is_observed):
        """A site's configurator (`primitives.site_contexts`): gives a marked site at the top
        level its support along a fresh dim (recycled inside `markov` frames); marks a latent site
        whose distribution depends on enumerated sites with their names and its shape without
        enumeration; inside `markov` frames, records which site each visible dim holds."""
        msg, infer = self._configure(name, msg, infer, is_observed)
        if _markov.frames() and self.at_top_level():
            visible = _markov.visible_dims()
            if visible:  # which site each recycled dim holds here (read by `_contract`)
                infer = dict(infer, _markov_dims=tuple(sorted(visible.items())))
        return msg, infer

    def _configure(self, name, msg, infer, is_observed):
        if is_observed or msg.value is not None:
            return msg, infer
        if not is_enumerated(infer):
            reached = self._reached_by(msg.fn) if self.dims or _markov.frames() else ()
            if not reached or infer.get("_reparametrized") or self.draws_dependents:
                return msg, infer  # a reparametrized site: its auxiliary sites are configured
            # NumPyro's shape: its value, shared by every enumerated value, is that of a trace
            # in which the discrete sites are drawn; its log density broadcasts over their dims
            plain = self.plain.get(name)
            infer = dict(infer, _enumerated_parents=reached)
            if plain is None:
                return msg, infer  # the entry points that need its shape raise
            shape, enumerated = tuple(plain.aval.shape), tuple(msg.fn.shape())
            if _broadcast(shape, enumerated) != enumerated:
                raise SiteError(
                    f"effppl.handlers.enum: the latent site `{name}` has shape {shape} when the "
                    f"discrete site(s) {', '.join(f'`{p}`' for p in reached)} it depends on are "
                    f"drawn, which does not broadcast to its shape {enumerated} when they are "
                    f"enumerated. Declare its batch dims with plates (`effppl.plate`, not a "
                    f"`jax.vmap` of the model): enumeration takes the dims left of them.")
            return msg, dict(infer, _value_shape=shape)
        fn = msg.fn
        if infer["enumerate"] != "parallel":
            raise SiteError(f"Site `{name}` has infer={{'enumerate': {infer['enumerate']!r}}}; "
                            f"effppl enumerates in parallel only: use 'parallel'.")
        check_enumerable(name, fn)
        if not self.at_top_level():
            return msg, infer  # inside a loop, branch or `jit`: the scan rewrite's business
        dim = self._dim_of(name)
        batch = tuple(fn.batch_shape)
        if -dim <= len(batch) and batch[dim] != 1:
            raise SiteError(f"effppl.handlers.enum: site `{name}` has batch shape {batch}, of "
                            f"size {batch[dim]} at dim {dim}, but it was given enumeration dim "
                            f"{dim}. Pass a smaller `first_available_dim` (at most "
                            f"{-len(batch) - 1}).")
        plates = {frame.dim for frame in _plate_frames()}
        loose = [d for d in range(-len(batch), 0)
                 if d > self.first and batch[d] > 1 and d not in plates and d not in self.taken]
        if loose:
            raise SiteError(f"Site `{name}` is enumerated, but its batch dim {loose[0]} (of batch "
                            f"shape {batch}) is not declared by a `plate`: declare it with "
                            f"`effppl.plate(..., dim={loose[0]})` so that its values are "
                            f"enumerated independently.")
        support = fn.enumerate_support(expand=False)
        value = support.reshape((support.shape[0],) + (1,) * (-dim - 1) + tuple(fn.event_shape))
        infer = dict(infer, _enumerate_dim=dim)
        if self.draws_dependents:  # a guide's: `seed` splits its key there, as NumPyro's
            infer["_consumes_key"] = True
        return msg._replace(value=value), infer

    def _dim_of(self, name):
        """The enumeration dim of site `name`: outside `markov` frames, the next one left (never
        one a frame has used, so that every re-trace gives the same dims); inside, the
        rightmost one no visible site holds (`_markov`)."""
        if not _markov.frames():
            if name not in self.dims:
                self.dims[name] = self._free_dim(set(self.dims.values()) | self.recycled
                                                 | self.taken)
            return self.dims[name]
        dim = _markov.lookup(name)
        if dim is None:
            dim = self._free_dim(set(_markov.visible_dims()) | set(self.dims.values())
                                 | self.taken)
            _markov.record(name, dim)
            self.recycled.add(dim)
        return dim

    def _free_dim(self, taken):
        """The rightmost dim from `first_available_dim` leftwards that is not in `taken`."""
        return next(d for d in range(self.first, -10**6, -1) if d not in taken)

    def _reached_by(self, fn):
        """The enumerated sites whose enumeration dims reach the batch shape of `fn`, the
        distribution of a latent site that is not enumerated (its parameters depend on them)."""
        batch = tuple(fn.batch_shape)
        dims = {**{dim: name for name, dim in self.dims.items()},
                **_markov.visible_dims()}
        return tuple(sorted(name for dim, name in dims.items()
                            if -dim <= len(batch) and batch[dim] > 1))


def _broadcast(*shapes):
    """The shapes broadcast together, or None when they do not broadcast."""
    try:
        return tuple(jnp.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _max_batch_ndim(sites) -> int:
    """The most batch dims any sample site among `sites` (an `analyze` result) has (its plates
    included)."""
    deepest = 0
    for site in sites.values():
        for key in site.keys or (site.key,):
            if site.type != "sample":
                continue
            msg = message_avals(key)
            frames = dict(key.static).get("cond_indep_stack", ())
            deepest = max(deepest, len(msg.fn.batch_shape),
                          *(-frame.dim for frame in frames))
    return deepest


class enum:
    """Enumerate the discrete latent sites marked `infer={"enumerate": "parallel"}` in parallel
    (NumPyro's `enum`, Pyro's parallel enumeration).

    Each marked site at the model's top level takes the value `fn.enumerate_support(expand=False)`
    (shape `(K, 1, ..., 1) + event_shape`) with its K values along a fresh batch dimension left of
    the model's plates; the next site gets the dimension left of that. The values broadcast through
    the model, and the log density entry points sum them out exactly (`log_density`,
    `potential_energy`, and so `MCMC`). Inside `markov` frames (a Python loop under
    `effppl.handlers.markov`) a site takes the rightmost dim that no site it may depend on holds,
    so the dims are recycled along the loop. A marked site inside a plain `lax.scan` whose carry
    depends on it is marginalised by the forward algorithm instead.

    A continuous latent site whose distribution depends on enumerated sites (e.g. `theta ~
    Normal(mu[c], 1)` below an enumerated `c`) has, as in NumPyro, the shape it has in the
    model traced with the discrete sites drawn: one value shared by every enumerated value,
    which HMC positions, guides and `substitute` give, and its `log_prob` broadcasts over their
    dims, so the sum is `log sum_c p(c) p(theta | c) p(y | theta, c)`. Drawing such a site
    under `enum` (no value given) raises a `SiteError`.

    **Arguments:**
    - `fn`: the model.
    - `first_available_dim`: the rightmost dimension to enumerate in (a negative int), left of
      every plate; `None` takes the dimension left of the model's deepest batch shape.

    **Raises:** `SiteError` naming the site for a marked site with infinite support, a batch
    dimension of an enumerated site not declared by a plate, or a `first_available_dim` that
    overlaps the site's batch shape.

    **Example:** `trace(enum(config_enumerate(model))).get_trace(data)["z"]["value"]` is
    `[[0], [1], [2]]` for a `Categorical` of 3 values inside a plate at dim -1.
    """

    discrete: tuple | None = None  # (temperature, rng_key) when `infer_discrete` draws them
    # a guide's enumeration (`TraceEnum_ELBO`, NumPyro's semantics): a latent site whose
    # distribution depends on enumerated sites is drawn with its whole batch shape, one value
    # for each of their values, not one value shared by all of them
    draws_dependents: bool = False
    # dims that hold enumerated values already (a guide's, under `TraceEnum_ELBO`): no site is
    # given them, and a site's batch dim there needs no plate
    taken_dims: frozenset = frozenset()
    fn: Any  # the model (None until a handler built without one is called on one)

    def __init__(self, fn: Any = None, first_available_dim=None):
        if fn is not None and not callable(fn):
            raise TypeError(f"effppl.handlers.enum(fn, ...) expected a callable model, but got "
                            f"{fn!r}.")
        if first_available_dim is not None and (not isinstance(first_available_dim, int)
                                                or first_available_dim >= 0):
            raise SiteError(f"effppl.handlers.enum(fn, first_available_dim="
                            f"{first_available_dim!r}) expected a negative int or None.")
        self.fn = fn
        self.first_available_dim = first_available_dim
        if fn is not None:
            functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args, **kwargs):
        if self.fn is None:  # built without a model: wrap the one given (NumPyro's decorator use)
            self.fn = model_to_wrap("enum", args, kwargs)
            functools.update_wrapper(self, self.fn, updated=())
            return self
        return run_outermost(self._enumerated, *args, **kwargs)

    def _enumerated(self, *args, **kwargs):
        if _active() is not None:  # an enclosing `enum` already decides
            return self.fn(*args, **kwargs)
        plain = analyze(trace_model(self.fn, *args, **kwargs))
        first = self.first_available_dim
        if first is None:
            first = -_max_batch_ndim(plain) - 1
        context = _Context(first, max(len(handler_traces()) - 1, 0), plain,
                           self.draws_dependents, self.taken_dims)
        _runtime.state().enum_context = context
        open_frames = len(_markov.frames())
        try:
            with configuring_sites(context.configure):
                return _innermost(self.fn, self._rewritten)(*args, **kwargs)
        finally:
            _runtime.state().enum_context = None
            del _markov.frames()[open_frames:]  # a loop left by an exception


    def _rewritten(self, model):
        """`model` with its enumerated scans rewritten into their forward algorithm."""
        @_named_like(model)
        def rewritten(*args, **kwargs):
            return _forward_algorithm.run(model, args, kwargs, self.discrete)
        return rewritten


def _innermost(fn, wrap):
    """`fn` with `wrap` applied to the model inside the effppl handlers that wrap it (copies of
    them; `fn` is not changed), and inside the wrappers that only configure its sites
    (`config_enumerate`, `infer_config`, `reparam`'s marks: a `_wraps_model` attribute `(inner,
    rebuild)`): the scan rewrite reads the model's own program."""
    if isinstance(fn, Handler) and fn.fn is not None:
        outer = copy.copy(fn)
        outer.fn = _innermost(fn.fn, wrap)
        return outer
    wrapped = getattr(fn, "_wraps_model", None)
    if wrapped is not None:
        inner, rebuild = wrapped
        return rebuild(_innermost(inner, wrap))
    return wrap(fn)


def enumerated_sites(fn, args, kwargs) -> dict:
    """`{name: in a loop}` for `fn`'s latent sample sites marked for enumeration (static
    analysis)."""
    return enumerated_in(analyze(trace_model(fn, *args, **kwargs)))


def enumerated_in(sites) -> dict:
    """`{name: in a loop}` for the latent sample sites marked for enumeration among `sites` (an
    `analyze` result)."""
    return {name: site.in_loop for name, site in sites.items()
            if site.type == "sample" and not site.is_observed
            and is_enumerated(dict(site.key.static).get("infer", ()))}
