"""The PPL's primitives: `sample`, `deterministic`, `factor` perform effect operations; `plate`
broadcasts distributions like NumPyro's.

A `sample` site performs the operation `sample_op(msg, name=..., is_observed=..., ...)`. The
message `msg` is a `SampleMsg`, a pytree holding the distribution (`fn`), the site's current
`value` (`None` until some handler decides it), and optional `scale`, `mask` and `rng_key`; its
static part (the site name, the distribution's treedef, which fields are None) decides at
translation time what each handler does. Handlers forward: each clause does its job and re-performs the
operation for the handlers outside it, so handlers compose by nesting (`trace(seed(model))`) and
each one's clause stays tail-resumptive, which the translator compiles away in place, also inside
plain loops.
"""

from __future__ import annotations

import contextlib
import copy
import operator
import warnings
from typing import Any, NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpyro.distributions as dist
import numpyro.primitives
from numpyro.distributions import batch_util
from numpyro.primitives import CondIndepStackFrame

from . import _runtime
from . import effects as fx
from ._mutable import mutable as mutable  # NumPyro's `numpyro.primitives.mutable`
from ._site_base import (
    SiteError,
    check_eager_trace,
    check_name,
    eager_blocks,
    given_value,
)
from ._site_base import outside_handlers as _outside_handlers
from .effects import internal
from .effects.internal import describe_non_array, describe_non_bool


class InvalidParameterError(SiteError):
    """A site's distribution got a parameter outside its constraint, with validation on
    (`effppl.enable_validation()` or `validate_args=True`): NumPyro's `ValueError`."""


class SampleMsg(NamedTuple):
    """The message of a `sample` site, the dynamic argument of `sample_op`: handlers read its
    fields and forward an updated copy (`msg._replace(value=...)`). A field that is None (or
    `plates` empty) flattens to no leaves, so which fields are set is part of the static treedef.

    - `fn`: the site's distribution (`numpyro.distributions.Distribution`).
    - `value`: the site's value (array), or None until a handler decides it.
    - `scale`: the factor its log density is multiplied by (array or float), or None.
    - `mask`: a bool array masking its log density, or None.
    - `rng_key`: the raw `uint32[2]` key to draw it with (from `seed`), or None.
    - `plates`: the element indices of the `jax.vmap`s inside the model around the site (one
      independent draw per element, like a plate), innermost last.
    - `obs`: the observation an `uncondition` handler took away (the site is then latent), or
      None; traces record it as `infer["obs"]`, as NumPyro's.
    """

    fn: Any
    value: Any = None
    scale: Any = None
    mask: Any = None
    rng_key: Any = None
    plates: tuple = ()
    obs: Any = None


class ParamMsg(NamedTuple):
    """The message of a `param` site, the dynamic argument of `param_op`.

    - `value`: the value a handler gave it (`substitute`, SVI), or None (as NumPyro's message).
    - `constraint`: its support, a `numpyro.distributions.constraints` object.
    - `init`: its `init_value` (array), or None while an `init_value` function waits for a key
      (`seed` draws it).
    - `init_args`: the values an `init_value` function closes over (its static `init_fn`, a
      `TracedInit`, is called as `init_fn(key, *init_args)`).
    """

    value: Any
    constraint: Any
    init: Any = None
    init_args: tuple = ()

    def decided(self):
        """The param's value: the one a handler gave, else its initial value (None while
        neither is known)."""
        return self.init if self.value is None else self.value


def value_shape(msg, infer=()) -> tuple:
    """The shape of a sample site's value: its value's when it has one, else its distribution's
    (`fn.shape()`), or the one `enum` set in its `infer` (dict or items) for a latent site whose
    distribution depends on enumerated sites: its shape in the model traced without enumeration,
    one value shared by every enumerated value (`handlers/enumeration/_enum.py`, NumPyro's semantics)."""
    if msg.value is not None:
        return tuple(msg.value.shape)
    shape = dict(infer).get("_value_shape")
    return tuple(msg.fn.shape()) if shape is None else tuple(shape)


def _value_type(msg, **static):
    if msg.value is not None:
        return jax.ShapeDtypeStruct(msg.value.shape, msg.value.dtype)
    leaves, tree = jax.tree_util.tree_flatten(msg.fn)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)  # an abstract key: nothing staged into a trace
    shape = value_shape(msg, static.get("infer", ()))
    try:
        drawn = jax.eval_shape(lambda ls, k: jax.tree_util.tree_unflatten(tree, ls).sample(k),
                               leaves, key)
    except NotImplementedError:  # e.g. ImproperUniform: a real-valued site that cannot be drawn
        return jax.ShapeDtypeStruct(shape, jnp.result_type(float))
    return drawn if drawn.shape == shape else jax.ShapeDtypeStruct(shape, drawn.dtype)


sample_op = fx.Operation("sample", out=_value_type, unhandled=_outside_handlers)
def _no_key(name, rows=None):
    if name is None:
        return ("`effppl.prng_key()` was called with no `seed` handler around the model: run it "
                "under `effppl.handlers.seed(model, rng_seed)`.")
    if rows is not None:
        return (f"Site `{name}` is given {rows[0]} rows, but its loop has {rows[1]} occurrences: "
                f"as with NumPyro's `scan`, the later occurrences are drawn, and no `seed` "
                f"handler gives a key for that. Run the model under `effppl.handlers.seed`, or "
                f"give all {rows[1]} rows.")
    return (f"Site `{name}` is hidden by `block` and has no value, and no `seed` handler gives "
            f"it a key: put `seed` inside or outside the `block`.")


prng_key_op = fx.Operation(
    "prng_key", out=lambda **static: jax.ShapeDtypeStruct((2,), jnp.uint32), unhandled=_no_key)
"""A fresh raw key from the nearest `seed` handler (NumPyro's `prng_key()`): `block` asks for
one for a hidden site that has neither a value nor a key yet."""
deterministic_op = fx.Operation("deterministic", out=lambda value, **static:
                                jax.ShapeDtypeStruct(value.shape, value.dtype),
                                unhandled=_outside_handlers)


def promote_batch_shape(fn):
    """numpyro's `promote_batch_shape` (leading axes added by `vmap`/stacking join the batch
    shape), with every `ExpandedDistribution` in `fn` rebuilt by `expand`: numpyro's rule for it
    updates the batch shapes but keeps the old expansion sizes, so `sample` drew the wrong shape
    (a `plate` or `sample_shape` site inside `jax.vmap` or a loop)."""
    if isinstance(fn, dist.ExpandedDistribution):
        return _promote_expanded(fn)
    if isinstance(fn, dist.Independent):
        return promote_batch_shape(fn.base_dist).to_event(fn.reinterpreted_batch_ndims)
    if isinstance(fn, dist.Unit):
        # numpyro's rule returns a `Unit` as it is, whose batch shape is its log factor's: a
        # `factor` in a plate inside `jax.vmap` kept the per-element shape and was not scored
        return dist.Unit(fn.log_factor)
    if isinstance(fn, dist.TransformedDistribution):
        # numpyro promotes neither the base nor the batch shape kept at construction (an
        # ordered site in a plate under `vmap` drew one value per element, not per plate row)
        return dist.TransformedDistribution(promote_batch_shape(fn.base_dist), fn.transforms)
    return _promote_held(batch_util.promote_batch_shape(fn))


def _promote_expanded(fn):
    """An `ExpandedDistribution`'s new leading axes are those its promoted base gained, and the
    axes it expanded become size-1 axes of the base (numpyro's rule, which read the new axes off
    numpyro's own promotion of the base: none for a `TransformedDistribution`, so a `LogNormal`
    in a plate in a loop kept its per-step batch shape and could not be scored)."""
    old = fn.base_dist.batch_shape
    new = promote_batch_shape(fn.base_dist).batch_shape
    new = new[:len(new) - len(old)]
    axes = tuple(range(len(new), len(new) + len(fn.batch_shape) - len(old)))
    base = jax.tree.map(lambda x: jnp.expand_dims(x, axes), fn.base_dist) if axes else fn.base_dist
    return promote_batch_shape(base).expand((*new, *fn.batch_shape))


def _promote_held(fn):
    """`fn` with the distributions it holds promoted too: numpyro's rule updates a
    distribution's own batch shape, not those of the distributions it keeps to draw with
    (`LKJCholesky`'s Beta, a Beta's Dirichlet), whose stale shapes made `sample` fail."""
    held = {k: v for k, v in vars(fn).items() if isinstance(v, dist.Distribution)}
    if not held:
        return fn
    fn = copy.copy(fn)
    for k, v in held.items():
        setattr(fn, k, promote_batch_shape(v))
    return fn


def _batch_message(args, dims, in_tree):
    """Move every batched leaf's axis to the front and broadcast the others (vmap as a plate)."""
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    moved = [jnp.moveaxis(a, d, 0) if d is not None else jnp.broadcast_to(a, (size, *jnp.shape(a)))
             for a, d in zip(args, dims)]
    return jax.tree_util.tree_unflatten(in_tree, moved)


def _with_vmap_index(msg):
    """Under `jax.vmap`s inside the model, add each one's element index to the message, so the
    operation is batched along every one of them (one independent draw per element, like a
    plate), also from inside a loop body or branch traced under them. Not in a handler's clause
    (`in_clause`): a clause is traced outside the model's own `vmap`s."""
    if _runtime.is_set("in_clause"):
        return msg
    return msg._replace(plates=(*msg.plates, *internal.vmap_indices()))


def _sample_batch_rule(args, dims, *, in_tree, static):
    """The batch rule of one `vmap` around a site: its index (a batched plate entry, added when
    the site was traced) becomes the leading axis; the other `vmap`s' indices stay."""
    plate_dims = jax.tree_util.tree_unflatten(in_tree, dims)[0].plates
    (msg,) = _batch_message(args, dims, in_tree)
    plates = tuple(p[0] for p, d in zip(msg.plates, plate_dims) if d is None)
    msg = msg._replace(fn=promote_batch_shape(_aligned_constraints(msg.fn)), plates=plates)
    if msg.rng_key is not None:  # one key per site occurrence: draws differ across the batch
        msg = msg._replace(rng_key=msg.rng_key[0])
    out = sample_op(msg, **dict(static))
    return [out], [0]


def _aligned_constraints(fn):
    """`fn` (batched along a new leading axis) with the arrays of the constraints it holds (a
    `Uniform`'s support, `interval(low, high)` as given, not broadcast to its batch shape) given
    size-1 axes after that axis up to the rank of one element's value: a scalar bound batched to
    `(n,)` would otherwise broadcast against a value's last axis, not its first (a
    `Uniform(-2, high[3, 1])` under `vmap` in a `dim=-2` plate scored 3 x 3 x 3 terms for 3 x 3).
    Distributions `fn` wraps (`Independent`, `MaskedDistribution`, a transformed distribution's
    base, ...) are aligned too, each to its own element's rank: `Uniform(v, high[3]).to_event(1)`
    under `vmap` checked its support with `v` against the event axis (-inf, silently)."""
    if not isinstance(fn, dist.Distribution):
        return fn
    rank = len(fn.batch_shape) + len(fn.event_shape)  # of one element (aux data: not batched)

    def align(x):
        short = rank - (jnp.ndim(x) - 1)
        if jnp.ndim(x) == 0 or short <= 0:
            return x
        return jnp.reshape(x, (jnp.shape(x)[0], *(1,) * short, *jnp.shape(x)[1:]))

    changed = {}
    for k, v in vars(fn).items():
        if isinstance(v, dist.constraints.Constraint) and jax.tree_util.tree_leaves(v):
            changed[k] = jax.tree.map(align, v)
        elif isinstance(v, dist.Distribution):
            inner = _aligned_constraints(v)
            if inner is not v:
                changed[k] = inner
    if not changed:
        return fn
    fn = copy.copy(fn)
    for k, v in changed.items():
        setattr(fn, k, v)
    return fn


def _per_element(value):
    """`value` batched along every `jax.vmap` of the model around it, if any: one value per
    element, so a deterministic site under a `vmap` is laid out as a sample site is (a leading
    batch axis per `vmap`), whether or not its value depends on the mapped data. Not across a
    derivative taken inside the `vmap`s (`jax.jacfwd`'s tangents are mapped, its primal is
    not)."""
    if _runtime.is_set("in_clause"):
        return value
    for index in internal.vmap_indices(across_derivatives=False):
        value = jnp.where(index >= 0, value, value)
    return value


def _deterministic_batch_rule(args, dims, *, in_tree, static):
    (value,) = _batch_message(args, dims, in_tree)
    return [deterministic_op(value, **dict(static))], [0]


sample_op.batch_rule = _sample_batch_rule
deterministic_op.batch_rule = _deterministic_batch_rule


# --------------------------------------------------------------------------------------------
# plate: lexical broadcasting, resolved while the model is traced

def _active_plates():
    return _runtime.state().plates


class _Subsample(dist.Distribution):
    """The random indices of a subsampled plate (NumPyro's `_subsample_fn`, so the same key
    gives NumPyro's indices); a density of 1."""

    pytree_aux_fields = ("size", "subsample_size")
    support = dist.constraints.nonnegative_integer  # pyright: ignore[reportAssignmentType]

    def __init__(self, size, subsample_size):
        self.size, self.subsample_size = size, subsample_size
        super().__init__(batch_shape=(), event_shape=(subsample_size,))

    def sample(self, key, sample_shape=()):
        return numpyro.primitives._subsample_fn(self.size, self.subsample_size, key)

    def log_prob(self, value):
        return jnp.zeros(())


class plate(contextlib.ContextDecorator):
    """Declare conditionally independent draws along a batch dimension, like `numpyro.plate`.

    Inside `with plate(name, size, subsample_size, dim)`, every `sample` site's distribution is
    expanded so its batch shape has `subsample_size` at `dim` (allocated right to left when `dim`
    is None), and, when subsampling, its log density is scaled by `size / subsample_size`.

    **Arguments:**
    - `name`: the plate's name (a non-empty str).
    - `size`: the number of independent draws (a static int >= 1, as NumPyro requires; take it
      from a shape, `y.shape[0]`, not from an array's value).
    - `subsample_size`: draw only this many (int, default `size`): the plate's indices are then
      a random subset of `range(size)` drawn with a key from `seed` (NumPyro's algorithm), a
      site of type `"plate"` named `name` that `substitute`/`replay` can set and `trace` records.
    - `dim`: a negative batch dimension, or None to allocate one.

    **Returns** (entering): the indices, int array of shape `(subsample_size,)`.

    **Raises:** `SiteError` for a name that is not a str, a size that is not a static int >= 1,
    a subsample size above it, a dim that is not negative or is used by an enclosing plate, and
    when a distribution's batch shape conflicts with the plate.

    **Example:** two observations under one latent mean; the trace records the plate too.

    >>> import jax.numpy as jnp
    >>> import effppl
    >>> from effppl import distributions as dist
    >>> from effppl.handlers import seed, trace
    >>> def model(y):
    ...     mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
    ...     with effppl.plate("data", y.shape[0]):
    ...         effppl.sample("y", dist.Normal(mu, 1.0), obs=y)
    >>> tr = trace(seed(model, rng_seed=0)).get_trace(jnp.array([0.5, 1.5]))
    >>> {name: (site["type"], jnp.shape(site["value"])) for name, site in tr.items()}
    {'mu': ('sample', ()), 'data': ('plate', (2,)), 'y': ('sample', (2,))}
    """

    def __init__(self, name: str, size: int, subsample_size: int | None = None,
                 dim: int | None = None):
        check_name("plate", name)
        if dim is not None and not (_is_int(dim) and dim < 0):
            raise SiteError(f"effppl.plate({name!r}, ..., dim={dim!r}) expected a negative int dim "
                            f"(or None to allocate one).")
        self.name, self.size, self.dim = name, _plate_size(name, size), dim
        # indices given by a handler around (NumPyro's `replay` of a subsampled plate's trace,
        # `substitute(data={name: indices})`): their number is the subsample size, as NumPyro's
        # (a full plate becomes subsampled; all `size` indices make a subsampled plate full)
        given = given_value("plate", name)
        if given is not None and len(jnp.shape(given)) == 1 and \
                0 < jnp.shape(given)[0] <= self.size and \
                (subsample_size is None or subsample_size < self.size):
            subsample_size = jnp.shape(given)[0]
        self.subsample_size = self.size if subsample_size is None else \
            _plate_size(name, subsample_size)
        if self.subsample_size > self.size:
            raise SiteError(f"effppl.plate({name!r}, {size}, subsample_size={subsample_size}) "
                            f"expected a subsample size no larger than the size {size}.")
        self.indices = jnp.arange(self.size)
        if self.subsample_size < self.size:  # drawn once, as NumPyro's: re-entering reuses them
            msg = SampleMsg(fn=_Subsample(self.size, self.subsample_size))
            self.indices = _perform(sample_op, msg, name=self.name, is_observed=False,
                                    infer=(), cond_indep_stack=_plate_frames(), site_type="plate")

    def __enter__(self):
        stack = _active_plates()
        clash = next((p for p in stack if p.dim == self.dim), None)
        if self.dim is not None and clash is not None:
            raise SiteError(f"effppl.plate({self.name!r}, {self.size}, dim={self.dim}): dim "
                            f"{self.dim} is already used by the enclosing plate {clash.name!r}. "
                            f"Nested plates need different dims.")
        if self.dim is None:
            used = {p.dim for p in stack}
            self.dim = next(d for d in range(-1, -100, -1) if d not in used)
            self._allocated = True
        stack.append(self)
        return self.indices

    def __exit__(self, *exc):
        _active_plates().remove(self)
        if getattr(self, "_allocated", False):
            self.dim, self._allocated = None, False
        return False


@contextlib.contextmanager
def plate_stack(prefix: str, sizes, rightmost_dim: int = -1):
    """Plates `f"{prefix}_{i}"` for each size in `sizes`, the last size at `rightmost_dim`
    (NumPyro's `plate_stack`)."""
    with contextlib.ExitStack() as stack:
        for i, size in enumerate(reversed(tuple(sizes))):
            stack.enter_context(plate(f"{prefix}_{i}", size, dim=rightmost_dim - i))
        yield


def subsample(data, event_dim: int, *, what: str | None = None):
    """`data` indexed by the enclosing subsampled plates' indices along their dims (counted
    left of `event_dim` trailing event dims), as NumPyro's `subsample`; unchanged outside them.

    **Raises:** `SiteError` when `data` has neither the plate's size nor 1 along its dim."""
    what = what or f"effppl.subsample(data, event_dim={event_dim})"
    if not isinstance(event_dim, int) or event_dim < 0:
        raise SiteError(f"effppl.subsample(data, event_dim={event_dim!r}) expected an int >= 0.")
    for p in _active_plates():
        if p.subsample_size == p.size:
            continue
        data = jnp.asarray(data)
        dim = p.dim - event_dim
        if data.ndim < -dim or data.shape[dim] == 1:
            continue
        if data.shape[dim] != p.size:
            raise SiteError(f"{what}: data has size {data.shape[dim]} at dim {dim}, but plate "
                            f"`{p.name}` has size {p.size}.")
        data = jnp.take(data, p.indices, axis=dim)
    return data


def _subsample_scale():
    """The product of `size / subsample_size` over the enclosing subsampled plates, or None."""
    scale = None
    for p in _active_plates():
        if p.subsample_size != p.size:
            ratio = p.size / p.subsample_size
            scale = ratio if scale is None else scale * ratio
    return scale


def _plate_size(name, size):
    if isinstance(size, jax.core.Tracer):
        raise SiteError(f"effppl.plate({name!r}, size) expected a static int size, but got a "
                        f"traced value ({size.aval}, e.g. computed from an array argument of the "
                        f"model): a plate's size is a shape. Pass it as a Python int, or take it "
                        f"from a shape (`y.shape[0]`).")
    if not _is_int(size) or size < 1:
        raise SiteError(f"effppl.plate({name!r}, size) expected an int size >= 1 (the number of "
                        f"independent draws), but got {type(size).__name__} {size!r}.")
    return operator.index(size)


def _is_int(x) -> bool:
    """Whether `x` is an integer (a Python or NumPy int, or a concrete 0-d integer array), not a
    bool, float or str."""
    if isinstance(x, bool):
        return False
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


def _broadcast_to_plates(name, fn):
    stack = _active_plates()
    if not stack:
        return fn
    batch = list(fn.batch_shape)
    width = max(len(batch), max(-p.dim for p in stack))
    batch = [1] * (width - len(batch)) + batch
    for p in stack:
        have = batch[p.dim]
        if have not in (1, p.subsample_size):
            raise SiteError(f"Site `{name}`: its distribution has batch shape {fn.batch_shape}, "
                            f"size {have} at dim {p.dim}, which conflicts with plate "
                            f"`{p.name}` of size {p.subsample_size}.")
        batch[p.dim] = p.subsample_size
    return fn if tuple(batch) == tuple(fn.batch_shape) else fn.expand(tuple(batch))


def _plate_frames():
    """The enclosing plates as NumPyro's `CondIndepStackFrame(name, dim, size)`, innermost first
    (NumPyro's order): a static parameter of each site, which traces record as `cond_indep_stack`
    (NumPyro's field) and `to_arviz` uses to name the site's dimensions."""
    return tuple(CondIndepStackFrame(p.name, p.dim, p.subsample_size)
                 for p in reversed(_active_plates()))


@contextlib.contextmanager
def in_clause():
    """`sample` called from a handler's clause (a reparameterizer's auxiliary sites)."""
    with _runtime.flag("in_clause"):
        yield


def message_contexts():
    """Message adjustments of the `with mask(...)`/`with scale(...)` blocks being traced."""
    return _runtime.state().message_adjusters


def _perform(op, *args, **static):
    """Perform `op`, through the eager `with` blocks' handlers when there are any and the code
    runs outside every handler's body (else the handlers around the body handle it, and
    `run_eager` put the blocks' handlers around it)."""
    if eager_blocks() and not _runtime.state().depth:
        name = static.get("name")
        check_eager_trace(f"Site `{name}`" if name else "`effppl.prng_key()`")
        return _runtime.run_eager(lambda: op(*args, **static))
    return op(*args, **static)


def site_contexts():
    """Site configurators of the `config_enumerate`/`enum` wrappers being traced, outermost
    first: each `configure(name, msg, infer, is_observed) -> (msg, infer)` sees a sample site
    (its message and its `infer` dict) before it is performed."""
    return _runtime.state().site_configurators


@contextlib.contextmanager
def configuring_sites(configure):
    """Within this block (this thread), `configure` sees every sample site performed (see
    `site_contexts`)."""
    site_contexts().append(configure)
    try:
        yield
    finally:
        site_contexts().remove(configure)


def masked_message(msg, mask):
    """`msg` with its log density masked by `mask` too (a bool array or bool), as the `mask`
    handler and `with mask(...)` blocks adjust each site's message."""
    m = jnp.asarray(mask, bool)
    return msg._replace(mask=m if msg.mask is None else jnp.logical_and(m, msg.mask))


@contextlib.contextmanager
def _masking(mask):
    """The sites sampled in the block have their log densities masked by `mask`, and
    `get_mask` sees it (what `with effppl.handlers.mask(mask=...)` does)."""
    def adjust(msg):
        return masked_message(msg, mask)
    message_contexts().append(adjust)
    mask_scopes().append(mask)
    try:
        yield
    finally:
        mask_scopes().pop()
        message_contexts().remove(adjust)


# --------------------------------------------------------------------------------------------
# The user-facing primitives


def sample(name: str, fn: dist.Distribution, obs: Any = None, infer: dict | None = None, *,
           sample_shape: tuple = (), obs_mask: Any = None):
    """Draw (or observe) the random variable `name` from the distribution `fn`.

    **Arguments:**
    - `name`: the site name (str); unique outside loops. Inside `lax.scan` the n-th occurrence
      is row n of the site's stacked value.
    - `fn`: a `numpyro.distributions.Distribution` (re-exported as `effppl.distributions`).
    - `obs`: observed value, array of shape `fn.shape()` (broadcastable), or None for a latent.
    - `infer`: optional dict of static inference hints (hashable values).
    - `sample_shape`: extra leading batch dimensions of independent draws; as in NumPyro, the
      enclosing plates broadcast against `sample_shape + fn.batch_shape`.
    - `obs_mask`: boolean array broadcasting to `fn.batch_shape`, with `obs` (NumPyro's
      imputation): events where it is true are observed (site `{name}_observed`), the others are
      imputed by the latent site `{name}_unobserved`; the value, the two interleaved, is recorded
      as the deterministic site `name`. (As in NumPyro, `obs` at the imputed events must still
      be finite numbers for gradients to be.)

    **Returns:** the site's value, shape `sample_shape + fn.batch_shape + fn.event_shape`.

    **Raises:** `SiteError` naming the site when `name` is not a non-empty str, `fn` is not a
    distribution, `obs` is not a real (or integer or bool) array of a compatible shape,
    `sample_shape` is not a tuple of ints >= 0, or `infer` is not a dict of hashable values;
    `UnhandledEffectError` when run outside any handler (use `handlers.seed`).

    **Example:** a latent random walk in a plain `lax.scan`: its site holds one row per step.

    >>> import jax
    >>> import effppl
    >>> from effppl import distributions as dist
    >>> from effppl.handlers import seed, trace
    >>> def walk(T):
    ...     def step(x, _):
    ...         x = effppl.sample("x", dist.Normal(x, 1.0))
    ...         return x, x
    ...     return jax.lax.scan(step, 0.0, None, length=T)[1]
    >>> trace(seed(walk, rng_seed=0)).get_trace(3)["x"]["value"].shape
    (3,)
    """
    check_name("sample", name)
    if not isinstance(fn, dist.Distribution):
        raise SiteError(f"effppl.sample({name!r}, fn=...) expected a numpyro Distribution, but got "
                        f"{type(fn).__name__}.")
    if obs_mask is not None:
        return _masked_observe(name, fn, obs, obs_mask, infer, sample_shape)
    if vars(fn).get("_validate_args", False) or (  # asked for explicitly, or validating
            _runtime.is_set("validating") and getattr(fn, "_validate_args", False)):
        _validate_at_run_time(name, fn)
    if not isinstance(sample_shape, (tuple, list)) or not all(
            _is_int(n) and n >= 0 for n in sample_shape):
        raise SiteError(f"effppl.sample({name!r}, ..., sample_shape=...) expected a tuple of ints "
                        f">= 0, but got {sample_shape!r}.")
    if tuple(sample_shape):  # part of the batch shape that plates broadcast against (NumPyro)
        fn = fn.expand(tuple(sample_shape) + tuple(fn.batch_shape))
    fn = _keep_validation(_broadcast_to_plates(name, fn))
    if obs is not None:
        obs = _numbers(f"effppl.sample({name!r}, ..., obs=...)", obs)
        try:
            jnp.broadcast_shapes(obs.shape, fn.shape())
        except ValueError:
            raise SiteError(f"effppl.sample({name!r}, ..., obs=...) expected an observation of shape "
                            f"{fn.shape()} (batch {fn.batch_shape} + event {fn.event_shape}), but "
                            f"got shape {obs.shape}.") from None
        if fn.event_shape and obs.shape[obs.ndim - len(fn.event_shape):] != fn.event_shape:
            raise SiteError(f"Site `{name}`: obs has shape {obs.shape}, whose trailing dims do not "
                            f"match the event shape {fn.event_shape}.")
        joint = jnp.broadcast_shapes(obs.shape, fn.shape())
        if joint != obs.shape and joint != fn.shape():
            raise SiteError(f"effppl.sample({name!r}, ..., obs=...) got an observation of shape "
                            f"{obs.shape} for a distribution of shape {fn.shape()} (batch "
                            f"{fn.batch_shape} + event {fn.event_shape}): the two broadcast to "
                            f"{joint}, larger than either, which would sum the log density over "
                            f"pairs of unrelated elements. Reshape the observation (e.g. drop a "
                            f"trailing axis of size 1) or the distribution's parameters.")
        fn, obs = _broadcast_observation(fn, obs)
    if site_rewriters():  # `reparam`: the site is drawn from auxiliary sites instead
        rewritten = _rewrite_site(name, fn, obs, infer)
        if not isinstance(rewritten, tuple):
            return rewritten
        fn, obs = rewritten
    msg = SampleMsg(fn=fn, value=obs, scale=_subsample_scale())
    for adjust in reversed(message_contexts()):
        msg = adjust(msg)
    hints = _infer_dict(name, infer)
    for configure in reversed(site_contexts()):
        msg, hints = configure(name, msg, hints, obs is not None)
    return _perform(sample_op, _with_vmap_index(msg), name=name, is_observed=obs is not None,
                    infer=_static_infer(name, hints), cond_indep_stack=_plate_frames())


def site_rewriters():
    """The site rewriters of the `reparam` handlers and blocks around the code, outermost
    first: `rewrite(name, fn, obs, infer) -> None` (leave the site) or `(new_fn, value)`
    (NumPyro's reparameterizer protocol)."""
    return _runtime.state().site_rewriters


@contextlib.contextmanager
def rewriting_sites(rewrite):
    """Within this block, `rewrite` sees every sample site before it is made (see
    `site_rewriters`); entered again while active (an eager block's handler around an entry
    point), it is not added twice."""
    rewriters = site_rewriters()
    if any(r is rewrite for r in rewriters):
        yield
        return
    rewriters.append(rewrite)
    try:
        yield
    finally:
        rewriters.remove(rewrite)


def _rewrite_site(name, fn, obs, infer):
    """Site `name` passed through the rewriters (`reparam`), innermost first, as NumPyro's
    reparam handlers process its message: `(fn, obs)` to sample it with, or the value of the
    deterministic site it became (`(None, value)` from a reparameterizer, whose auxiliary sites
    it drew, through every handler and rewriter, while it ran)."""
    for rewrite in reversed(list(site_rewriters())):
        out = rewrite(name, fn, obs, _infer_dict(name, infer))
        if out is None:
            continue
        new_fn, value = out
        if new_fn is None:  # (marked: enumeration refuses one that depends on enumerated sites)
            check_name("deterministic", name)
            value = _numbers(f"effppl.deterministic({name!r}, value)", value, real=False)
            return _perform(deterministic_op, value, name=name, cond_indep_stack=_plate_frames(),
                            reparametrized=True)
        fn, obs = new_fn, (None if value is None else jnp.asarray(value))
    return fn, obs


def _numbers(what, value, real=True):
    """`value` as an array, or a `SiteError` saying `what` (the call, naming the site and the
    argument) got a value that is not an array of (`real`) numbers."""
    problem = describe_non_array(value)
    if problem is None and real and jnp.iscomplexobj(value):
        problem = (f"a complex value (dtype {jnp.result_type(value)}; no distribution has a "
                   f"complex support)")
    if problem is not None:
        raise SiteError(f"{what} expected an array of numbers (real, integer or bool), but got "
                        f"{problem}.")
    return jnp.asarray(value)


def _infer_dict(name, infer):
    """The `infer` argument of site `name` as a (new) dict, or a `SiteError` if it is not one."""
    if infer is not None and not isinstance(infer, dict):
        raise SiteError(f"effppl.sample({name!r}, ..., infer=...) expected a dict of inference "
                        f"hints, but got {type(infer).__name__} {infer!r:.60}.")
    return dict(infer or {})


def _static_infer(name, infer):
    """The `infer` dict of site `name` as a sorted tuple of items (a static, hashable parameter)."""
    items = tuple(sorted(infer.items()))
    try:
        hash(items)
    except TypeError:
        raise SiteError(f"effppl.sample({name!r}, ..., infer=...) expected hashable values (they "
                        f"are static), but got {infer!r:.80}.") from None
    return items


def _masked_observe(name, fn, obs, obs_mask, infer, sample_shape):
    """`sample(..., obs_mask=...)`: NumPyro's two auxiliary sites, interleaved."""
    if obs is None:
        raise SiteError(f"effppl.sample({name!r}, ..., obs_mask=...) needs `obs` too: the mask "
                        f"says which events of `obs` are observed.")
    problem = describe_non_bool(obs_mask)
    if problem is not None:
        raise SiteError(f"effppl.sample({name!r}, ..., obs_mask=...) expected a bool array (True "
                        f"where `obs` is observed), but got {problem}.")
    obs_mask = jnp.asarray(obs_mask, bool)
    with _masking(obs_mask):
        observed = sample(f"{name}_observed", fn, obs=obs, infer=infer, sample_shape=sample_shape)
    with _masking(~obs_mask):
        unobserved = sample(f"{name}_unobserved", fn, infer=infer, sample_shape=sample_shape)
    batch_mask = jnp.reshape(obs_mask, jnp.shape(obs_mask) + (1,) * fn.event_dim)
    return deterministic(name, jnp.where(batch_mask, observed, unobserved))


def _broadcast_observation(fn, obs):
    """`fn` expanded and `obs` broadcast to their common shape, so that the site's value has its
    distribution's shape (NumPyro's `log_prob` broadcasts the two, with the same sum; under
    `jax.vmap` the batched axis would otherwise broadcast against the wrong one)."""
    shape = jnp.broadcast_shapes(obs.shape, fn.shape())
    if shape != fn.shape():
        fn = _keep_validation(fn.expand(shape[:len(shape) - len(fn.event_shape)]))
    if shape != obs.shape:
        obs = jnp.broadcast_to(obs, shape)
    return fn, obs


def _keep_validation(fn):
    """Pin NumPyro's default `validate_args` on `fn` and the distributions inside it.

    The default lives on the class, and a distribution flattened as a pytree (as every message is)
    keeps only its instance's setting, so it would come back unvalidated and `log_prob` of an
    out-of-support value would be a finite number instead of NumPyro's `-inf`.
    """
    if "_validate_args" not in vars(fn):
        fn._validate_args = type(fn)._validate_args
    for value in vars(fn).values():
        for inner in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(inner, dist.Distribution):
                _keep_validation(inner)
    return fn


@contextlib.contextmanager
def validating_parameters():
    """Within it, with NumPyro's validation on (`effppl.enable_validation()`), the models traced
    check their sites' traced distribution parameters when the compiled code runs, as explicit
    `validate_args=True` does (`_validate_at_run_time`), recording an `InvalidParameterError`
    that `callback_site_errors` raises after the run. The entry points called eagerly, on
    concrete values, trace in it (NumPyro validates there), and so does the eager check of
    MCMC and Predictive before their compiled runs; the compiled sampler never does, so it
    carries no check."""
    with _runtime.flag("validating"):
        yield


def _validate_at_run_time(name, fn):
    """Validation asked for (explicit `validate_args=True`, or `validating_parameters`) with
    traced parameters: NumPyro cannot check them while tracing, so check when the compiled code
    runs (a host callback, so only on request), raising an error that names the site, the
    parameter and its constraint (NumPyro's `validate_args`)."""
    names, valid = [], []
    for param, value in fn.get_args().items():  # as NumPyro's `validate_args`
        constraint = fn.arg_constraints.get(param)
        if (constraint is None or not isinstance(value, jax.core.Tracer)
                or dist.constraints.is_dependent(constraint)):
            continue
        names.append((param, str(constraint)))  # text: the closure below holds no tracer
        valid.append(jnp.all(constraint(value)))
    if not names:
        return

    stop = bool(vars(fn).get("_validate_args", False))  # explicit: stop; else raised after
    jax.debug.callback(_checker(name, type(fn).__name__, tuple(names), stop), *valid)


def _checker(name, family, names, stop):
    """The host check of `_validate_at_run_time` (its closure holds no tracer)."""
    def check(*flags):
        bad = [(param, constraint) for (param, constraint), ok in zip(names, flags) if not ok]
        if bad:
            what = "; ".join(f"{family} distribution got invalid {param} parameter "
                             f"(outside its constraint {constraint})" for param, constraint in bad)
            err = InvalidParameterError(
                f"Site `{name}`: {what}. (Validation is on: `effppl.enable_validation()` or "
                f"`validate_args=True`.)")
            _callback_errors.append(err)
            if stop:
                raise err  # XLA stops; `callback_site_errors` re-raises it
    return check


_callback_errors: list = []  # SiteErrors that `_validate_at_run_time` raised, newest last


@contextlib.contextmanager
def callback_site_errors():
    """Re-raise the `SiteError` that a run-time validation raised inside compiled code, which XLA
    reports as a `JaxRuntimeError` (holding it as text only), as itself: an inference entry point
    runs its compiled functions inside this context."""
    _callback_errors.clear()
    try:
        yield
    except jax.errors.JaxRuntimeError as err:
        if not _callback_errors:
            raise
        raise _callback_errors[-1] from err
    else:
        if _runtime.is_set("validating"):
            jax.effects_barrier()  # the checks recorded by `validating_parameters` have run
        if _callback_errors:
            raise _callback_errors[0]
    finally:
        _callback_errors.clear()


def deterministic(name: str, value):
    """Record `value` as the deterministic site `name` (in traces and posterior samples).

    **Returns:** `value` unchanged. **Raises:** `SiteError` when `name` is not a non-empty str or
    `value` is not an array of numbers.
    """
    check_name("deterministic", name)
    value = _numbers(f"effppl.deterministic({name!r}, value)", value, real=False)
    return _perform(deterministic_op, _per_element(value), name=name,
                    cond_indep_stack=_plate_frames())


def factor(name: str, log_factor):
    """Add `log_factor` (array; summed) to the log joint density, as the observed site `name`
    of a `Unit` distribution (as `numpyro.factor` does)."""
    check_name("factor", name)
    unit = dist.Unit(_numbers(f"effppl.factor({name!r}, log_factor)", log_factor))
    return sample(name, unit, obs=jnp.zeros(unit.shape()), infer={"is_auxiliary": True})


def prng_key():
    """A fresh typed PRNG key (`jax.random.key`'s kind, as NumPyro's) from the nearest enclosing
    `seed` handler, split off its key as a site's is (NumPyro's `numpyro.prng_key()`).

    Called outside any model and `seed` (at top level), it warns and returns None, as NumPyro's.

    **Raises:** `UnhandledEffectError` inside a model run by an entry point with no `seed` handler
    around it (None cannot be a value of the compiled model)."""
    try:
        raw = _perform(prng_key_op, name=None)
    except fx.UnhandledEffectError:
        if _runtime.state().depth:
            raise
        warnings.warn("`effppl.prng_key()` was called outside of `seed`: it returns None. Run "
                      "the code under `effppl.handlers.seed(rng_seed=...)` to get a key.",
                      UserWarning, stacklevel=2)
        return None
    return jax.random.wrap_key_data(raw)


def raw_key(name=None):
    """A fresh raw `uint32[2]` key from the nearest enclosing `seed` (the `prng_key` operation,
    through the eager `with` blocks when code runs under them outside any model); `name` names
    the site asking, for the error when no `seed` gives one."""
    return _perform(prng_key_op, name=name)


def mask_scopes():
    """The masks of the `mask` handlers and `with mask(...)` blocks being traced, outermost
    first (for `get_mask`)."""
    return _runtime.state().masks


def get_mask():
    """The mask of the enclosing `effppl.handlers.mask` handlers (NumPyro's `get_mask`): None
    when there is none, a Python bool when every mask is one (so `if get_mask() is not False:`
    skips work that only feeds a masked-out `factor`), else their conjunction (a bool array)."""
    masks = mask_scopes()
    if not masks:
        return None
    if all(isinstance(m, bool) for m in masks):
        return all(masks)
    out = jnp.asarray(masks[0], bool)
    for m in masks[1:]:
        out = jnp.logical_and(out, m)
    return out


# --------------------------------------------------------------------------------------------
# param: a learnable parameter (SVI), an effect operation like `sample`


def _param_type(msg, *, name, init_fn, **static):
    if msg.decided() is not None:
        return jax.ShapeDtypeStruct(msg.decided().shape, msg.decided().dtype)
    aval = init_fn.jaxpr.out_avals[0]  # a `TracedInit`
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype)


param_op = fx.Operation("param", out=_param_type, unhandled=_outside_handlers)


def _param_hint(name):
    """Zeros of the shape and dtype of the value a handler gives param site `name`, or None."""
    value = given_value("param", name)
    if value is None:
        return None
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        value = jnp.asarray(value)
    return jnp.zeros(value.shape, value.dtype)


@contextlib.contextmanager
def giving_values(hint):
    """Within this block, `hint(kind, name)` tells what value (or its shape and dtype) a handler
    gives a site (see `given_value`)."""
    hints = _runtime.state().value_hints
    hints.append(hint)
    try:
        yield
    finally:
        hints.remove(hint)


def param(name: str, init_value: Any = None, constraint=dist.constraints.real,
          event_dim: int | None = None):
    """A learnable parameter `name`, as `numpyro.param`: its value is `init_value` unless a
    handler gives another (`substitute`; `effppl.infer.SVI` substitutes the values it optimises).

    **Arguments:**
    - `name`: the site name (str). Inside a loop every iteration reads the same value.
    - `init_value`: the initial value (array), or a function `init_value(rng_key) -> array`,
      called with a key from the enclosing `effppl.handlers.seed` when nobody gives a value.
    - `constraint`: a `numpyro.distributions.constraints` object: the support of the value. SVI
      optimises `biject_to(constraint).inv(value)` (unconstrained space), as NumPyro does.
    - `event_dim`: the number of rightmost dimensions that form one event (NumPyro's meaning;
      recorded in traces). With it, inside a subsampled plate, the value is indexed by the
      plate's indices along the plate's dim, as `subsample` does (traces and SVI keep the
      whole value).

    **Returns:** the value, an array of `init_value`'s shape (subsampled as above).

    **Raises:** `SiteError` naming the site when `init_value` is None (effppl needs it to know the
    value's shape while tracing) and no handler around the model gives the param's value
    (`substitute`, `lift`: then its shape is that value's), or `constraint` is not a
    constraint.
    """
    check_name("param", name)
    if event_dim is not None and not (_is_int(event_dim) and event_dim >= 0):
        raise SiteError(f"effppl.param({name!r}, ..., event_dim={event_dim!r}) expected an int "
                        f">= 0, or None.")
    if init_value is not None and not callable(init_value):
        _numbers(f"effppl.param({name!r}, init_value)", init_value)
    if init_value is None:
        init_value = _param_hint(name)
    if init_value is None:
        raise SiteError(f"effppl.param({name!r}) expected an `init_value` (an array, or a function "
                        f"of a PRNG key giving one): effppl needs it to know the parameter's shape "
                        f"while tracing, unless a handler around the model gives its value "
                        f"(`substitute(model, data={{{name!r}: ...}})`, `lift`).")
    if not isinstance(constraint, dist.constraints.Constraint):
        raise SiteError(f"effppl.param({name!r}, ..., constraint=...) expected a "
                        f"numpyro.distributions.constraints object, but got {constraint!r}.")
    init_fn, init_args = TracedInit.of(init_value, name) if callable(init_value) else (None, ())
    init = None if init_fn is not None else jnp.asarray(init_value)
    msg = ParamMsg(value=None, constraint=constraint, init=init, init_args=init_args)
    value = _perform(param_op, msg, name=name, init_fn=init_fn, event_dim=event_dim)
    if event_dim is None:
        return value
    return subsample(value, event_dim, what=f"effppl.param({name!r}, ..., event_dim={event_dim})")


class TracedInit:
    """A param's `init_value` function, traced where the `param` statement runs: NumPyro calls
    it there (with a key from `seed`), so the Python values it reads (a loop variable, say) and
    the model's values it closes over are those of that moment, not of the later time a handler
    calls it. `TracedInit.of(fn, name)` gives `(init, args)`: `init(raw_key, *args)` is the
    initial value, `args` the closed-over values (`ParamMsg.init_args`, dynamic operands, not
    kept here). Its repr is the traced program, so a changed init function changes the model's
    program."""

    def __init__(self, jaxpr):
        self.jaxpr = jaxpr

    @classmethod
    def of(cls, fn, name):
        key = jax.ShapeDtypeStruct((2,), jnp.uint32)  # `prng_key_op`'s raw key
        jaxpr, consts, _ = internal.trace_to_jaxpr(lambda k: jnp.asarray(fn(k)), [key],
                                                   f"the init_value of param {name!r}")
        return cls(jaxpr), tuple(consts)

    def __call__(self, raw_key, *args):
        return internal.jaxpr_as_fun(self.jaxpr)(*args, raw_key)[0]

    def __repr__(self):
        return f"TracedInit({self.jaxpr})"


def module_param_names(name: str, nn_init, input_shape: tuple) -> tuple[list, Any]:
    """`([(param name, shape), ...], treedef)`: the params `module(name, (nn_init, ...),
    input_shape)` registers, one per leaf of the weight pytree `nn_init(key, input_shape)[1]`
    (in leaf order), and that pytree's structure. Computed from shapes only (no weights are
    made)."""
    shapes = jax.eval_shape(lambda key: nn_init(key, tuple(input_shape))[1],
                            jax.random.PRNGKey(0))
    paths, treedef = jax.tree_util.tree_flatten_with_path(shapes)
    return ([(f"{name}$params{jax.tree_util.keystr(path)}", tuple(leaf.shape))
             for path, leaf in paths], treedef)


def module(name: str, nn: tuple, input_shape: tuple | None = None):
    """A `jax.example_libraries.stax`-style network inside a model or guide, its weights
    learnable params (NumPyro's `numpyro.module`): returns `apply_fn` with the weights bound,
    `x -> nn_apply(weights, x)`.

    **Arguments:** `name` (str); `nn`: the `(init_fn, apply_fn)` pair of a stax constructor
    (`stax.serial(...)`, `numpyro.nn.AutoregressiveNN(...)`); `input_shape`: the shape of the
    network's input, e.g. `(D,)`.

    **Params.** effppl's params are arrays, so the weight pytree `init_fn(key, input_shape)[1]`
    is registered leaf by leaf: leaf `weights[i][j]` is the param `f"{name}$params[{i}][{j}]"`
    (the name NumPyro gives the whole pytree, followed by the leaf's index path,
    `jax.tree_util.keystr`). NumPyro's params convert by `{k + keystr(path): leaf for path,
    leaf in tree_flatten_with_path(v)[0]}`. Each leaf's initial value is that leaf of
    `init_fn(key, input_shape)`, with its own key from the enclosing `seed` (NumPyro draws one
    key for the whole pytree).

    **Raises:** `SiteError` naming the module when `nn` is not an `(init_fn, apply_fn)` pair,
    or `input_shape` is None (effppl needs it to know the weights' structure while tracing;
    NumPyro needs it only before the weights exist).

    **Example:**

    >>> import jax.numpy as jnp
    >>> from jax.example_libraries import stax
    >>> import effppl
    >>> from effppl.handlers import seed, trace
    >>> def guide(x):
    ...     return effppl.module("net", stax.Dense(2), (3,))(x)
    >>> tr = trace(seed(guide, 0)).get_trace(jnp.ones(3))
    >>> sorted(tr), tr["net$params[0]"]["value"].shape
    (['net$params[0]', 'net$params[1]'], (3, 2))
    """
    check_name("module", name)
    if not (isinstance(nn, tuple) and len(nn) == 2 and all(callable(f) for f in nn)):
        raise SiteError(f"effppl.module({name!r}, nn, ...) expected `nn` to be a stax "
                        f"`(init_fn, apply_fn)` pair, but got {type(nn).__name__} {nn!r:.60}.")
    if input_shape is None:
        raise SiteError(f"effppl.module({name!r}, nn, input_shape) expected `input_shape` (a "
                        f"tuple such as `(D,)`): effppl needs it to know the network's weights "
                        f"while tracing.")
    nn_init, nn_apply = nn
    input_shape = tuple(input_shape)

    def weights(key):
        return nn_init(key, input_shape)[1]

    names, treedef = module_param_names(name, nn_init, input_shape)
    leaves = []
    for i, (leaf_name, _) in enumerate(names):
        def init(key, i=i):
            return jax.tree_util.tree_leaves(weights(key))[i]
        leaves.append(param(leaf_name, init))
    bound = jax.tree_util.tree_unflatten(treedef, leaves)

    def apply(*args, **kwargs):
        return nn_apply(bound, *args, **kwargs)
    return apply
