"""`trace`: record every site's value (stacked for sites inside loops) and distribution."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._mutable import mutable_op
from ..primitives import SiteError, deterministic_op, param_op, promote_batch_shape, sample_op
from ._handler import (
    Handler,
    _named_like,
    _nesting,
    forward,
    forward_param,
    masked_log_prob,
    run_outermost,
)
from ._sites import bijector, pad_row, unconstrained_type


def is_enumerated(infer) -> bool:
    """Whether a site whose `infer` (dict or sorted items) is this is marked for enumeration."""
    return dict(infer).get("enumerate") is not None


def _log_prob_type(value_aval, fn_avals):
    """The type of `fn.log_prob(value)` at one occurrence of a site; None for a distribution
    without one (NumPyro's `ProjectedNormal` beyond 3 dimensions): its trace entry then has no
    `log_prob`, as NumPyro computes a trace's log densities only when asked."""
    leaves, tree = jax.tree_util.tree_flatten(fn_avals)
    try:
        return _log_prob_type_cached(value_aval, tuple(leaves), tree)
    except NotImplementedError:
        return None


@functools.lru_cache(maxsize=4096)
def _log_prob_type_cached(value_aval, fn_leaves, fn_tree):
    """Cached per distribution type and value type (one `eval_shape` per kind of site, not per
    site and per trace)."""
    leaves, tree = fn_leaves, fn_tree
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in leaves]

    def log_prob(ls, value):
        return jax.tree_util.tree_unflatten(tree, ls).log_prob(value)

    return jax.eval_shape(log_prob, structs,
                          jax.ShapeDtypeStruct(value_aval.shape, value_aval.dtype))


def _mask_fits(mask_aval, shape) -> bool:
    """Whether a site's `mask` (its abstract value, or None) broadcasts to `shape` (its log
    density's): then the trace's `fn` is the masked distribution. (A mask wider than the site,
    e.g. a plate's mask over a global enumerated site, is applied to the log density only.)"""
    if mask_aval is None:
        return False
    try:
        return tuple(np.broadcast_shapes(tuple(getattr(mask_aval, "shape", ())), tuple(shape))) \
            == tuple(shape)
    except ValueError:
        return False


def recorded(sites: dict) -> dict:
    """The sites of an analysis (`_sites.analyze`) that `trace` records: all but the observed
    sites inside a `while_loop`. **Raises:** `SiteError` for a latent site inside one."""
    out = {}
    for name, site in sites.items():
        if not site.bounded:
            if site.type == "sample" and not site.is_observed:
                raise SiteError(f"The latent site `{name}` sits inside a `while_loop`: it has "
                                f"no static number of occurrences, so it cannot be traced or "
                                f"sampled by HMC. Use `lax.scan` with a fixed length.")
            continue
        out[name] = site
    return out


class trace(Handler):
    """Record the sites of `fn`: `trace(fn).get_trace(*args, **kwargs)` returns
    `{name: {"type", "name", "value", "is_observed", "fn", "log_prob", "scale", "infer",
    "cond_indep_stack", "intermediates"}}` (`intermediates`: NumPyro's field, always empty);
    `log_prob` is the elementwise log density of each occurrence's value under that occurrence's
    distribution, zero where an enclosing `mask` is false (NumPyro's masked `fn`), not scaled;
    `scale` the factor an enclosing `scale` handler puts on it (broadcast to `log_prob`'s shape;
    None outside any); a `param` site (`type: "param"`) records its value and `kwargs`
    `{"constraint", "event_dim"}`, as NumPyro's; `cond_indep_stack` lists the enclosing `plate`s
    as NumPyro's
    `CondIndepStackFrame(name, dim, size)`, innermost first (as NumPyro lists them; empty for a
    site that different `cond` branches put in different plates).

    A site inside `lax.scan` has its values stacked: shape `(T, *site_shape)`, nested scans
    `(T_outer, T_inner, *site_shape)`; its `"fn"` is the distribution with the same leading axes in
    its batch shape (`None` when the site uses different distribution families in different `cond`
    branches). A site in a branch never taken holds zeros.

    **Raises:** `SiteError` for a latent site inside a `while_loop` (no static number of
    occurrences), and for duplicate site names. Observed sites in a `while_loop` are not recorded.

    **Example:** `trace(seed(model, 0)).get_trace(x)["mu"]["value"]`
    """

    record_unconstrained = False
    # record sites' values only (no `fn`, `log_prob`, `scale`): for `constrain_fn` and
    # `unconstrain_fn`, which a sampler runs at every draw; the fields they do not read would still
    # be computed into the packed buffers, which XLA cannot prune
    values_only = False
    keep: Callable | None = None  # `keep(name, site) -> bool`: record only these (None: all)
    # record sample sites' `log_prob` and `scale` only (no `value`, `fn`): for a contraction,
    # whose gradient would otherwise pass through the packed buffers of the unread fields
    scores_only = False

    def __init__(self, fn=None):
        super().__init__(fn)
        self.trace = {}

    def __enter__(self):
        if self.fn is None and _nesting():
            raise TypeError("`with effppl.handlers.trace() as tr:` inside a model is not "
                            "supported (a block's values cannot leave the compiled model); "
                            "trace the model instead: `trace(model).get_trace(*args)`.")
        super().__enter__()
        return self.trace

    def absorb(self, handled, params):
        self.trace.update(handled._assemble(handled._layout.read_all(params)))

    def _sites(self, *args, **kwargs):
        return recorded(self.analysis())

    def params(self, *args, **kwargs):
        self._recorded = self._sites(*args, **kwargs)
        self._layout = _Layout()
        for name, site in self._recorded.items():
            if self.keep is not None and not self.keep(name, site):
                continue
            lead = site.count if site.in_loop else None
            msg_avals = site.message
            if site.type == "mutable":  # a pytree: one field per leaf
                self._layout.fields[name] = {"value": [
                    self._layout.add(a.shape, a.dtype, None) for a in site.key.in_avals]}
                continue
            fields = {}
            if not (self.scores_only and site.type == "sample"):
                fields["value"] = self._layout.add(site.aval.shape, site.aval.dtype, lead)
            if site.type == "param":
                fields["constraint"] = [self._layout.add(a.shape, a.dtype, None) for a in
                                        jax.tree_util.tree_leaves(msg_avals.constraint)]
            if site.type == "sample" and not self.values_only:
                if site.one_family and not self.scores_only:
                    fields["fn"] = [self._layout.add(a.shape, a.dtype, lead)
                                    for a in jax.tree_util.tree_leaves(msg_avals.fn)]
                lp = _log_prob_type(site.aval, msg_avals.fn)
                if lp is not None:
                    fields["log_prob"] = self._layout.add(lp.shape, lp.dtype, lead)
                    if msg_avals.scale is not None:
                        fields["scale"] = self._layout.add(lp.shape, lp.dtype, lead)
                    if "fn" in fields and _mask_fits(getattr(msg_avals, "mask", None), lp.shape):
                        fields["mask"] = self._layout.add(lp.shape, jnp.bool_, lead)
            if site.type == "sample" and getattr(msg_avals, "obs", None) is not None:
                fields["obs"] = self._layout.add(msg_avals.obs.shape, msg_avals.obs.dtype, lead)
            if site.type == "sample":
                if self.record_unconstrained and not site.is_observed and not is_enumerated(
                        dict(site.key.static).get("infer", ())):
                    shape, dtype = unconstrained_type(site)
                    fields["unconstrained"] = self._layout.add(shape, dtype, lead)
            if site.in_loop:
                fields["count"] = self._layout.add((), jnp.int32, None, buffer="counts")
            self._layout.fields[name] = fields
        return self._layout.buffers()

    def clauses(self):
        def record(bufs, name, value, fn=None, mask=None, scale=None, constraint=None,
                   obs=None):
            if name not in self._layout.fields:
                return bufs
            fields, site = self._layout.fields[name], self._recorded[name]
            if site.in_loop and site.count == 0:
                return bufs  # inside a loop of length 0 (or an empty vmap): no row to fill
            updates = [(fields["value"], value)] if "value" in fields else []
            if obs is not None and "obs" in fields:
                updates.append((fields["obs"], obs))
            if constraint is not None and "constraint" in fields:
                updates += list(zip(fields["constraint"], jax.tree_util.tree_leaves(constraint)))
            if fn is not None and "fn" in fields:
                leaves, tree = jax.tree_util.tree_flatten(fn)
                same = [jnp.shape(x) for x in leaves] == [f.shape for f in fields["fn"]]
                if same and tree == self._fn_tree(site):
                    updates += list(zip(fields["fn"], leaves))
            if fn is not None and "log_prob" in fields:
                lp = masked_log_prob(fn, value, mask)  # not scaled: the scale is recorded beside it
                if jnp.shape(lp) == fields["log_prob"].shape:
                    updates.append((fields["log_prob"], lp))
                if "mask" in fields:
                    updates.append((fields["mask"], jnp.broadcast_to(
                        jnp.asarray(True if mask is None else mask, bool), fields["mask"].shape)))
                if "scale" in fields:
                    updates.append((fields["scale"], scale))
            if fn is not None:
                if "unconstrained" in fields:
                    shape = fields["unconstrained"].shape
                    updates.append((fields["unconstrained"],
                                    pad_row(bijector(name, fn).inv(value), shape)))
            row = None
            if site.in_loop:
                count = self._layout.read(bufs, fields["count"])
                row = site.row(count)
                bufs = self._layout.write(bufs, fields["count"], count + 1)
            for field, new in updates:
                bufs = self._layout.write(bufs, field, new, row)
            return bufs

        def sample(bufs, msg, *, resume, name, **static):
            value = forward(msg, name=name, **static)
            return resume(record(bufs, name, value, msg.fn, msg.mask, msg.scale, obs=msg.obs),
                          value)

        def param(bufs, msg, *, resume, name, **static):
            value = forward_param(msg, name=name, **static)
            return resume(record(bufs, name, value, constraint=msg.constraint), value)

        def deterministic(bufs, value, *, resume, name, **static):
            value = deterministic_op(value, name=name, **static)
            return resume(record(bufs, name, value), value)

        def mutable(bufs, value, *, resume, name, **static):
            value = mutable_op(value, name=name, **static)
            if name in self._layout.fields:  # its final value overwrites the first
                for field, leaf in zip(self._layout.fields[name]["value"],
                                       jax.tree_util.tree_leaves(value)):
                    bufs = self._layout.write(bufs, field, leaf)
            return resume(bufs, value)

        return {sample_op: sample, deterministic_op: deterministic, param_op: param,
                mutable_op: mutable}

    @staticmethod
    def _fn_tree(site):
        return jax.tree_util.tree_structure(site.message.fn)

    def ret(self, bufs, result):
        return result, bufs

    def __call__(self, *args, **kwargs) -> Any:
        if self.fn is None:
            return self.decorate(*args, **kwargs)
        return self._run(*args, **kwargs)[0]

    def handled(self, *args, **kwargs):
        return super().handled(*args, **kwargs)[0]

    def _run(self, *args, **kwargs):
        handled = super().handled

        @_named_like(handled)
        def run_and_read(*a, **kw):  # the record read out where it is written (see `_Layout`)
            result, bufs = handled(*a, **kw)
            return result, self._layout.read_all(bufs)

        result, values = run_outermost(run_and_read, *args, **kwargs)
        return result, self._assemble(values)

    def get_trace(self, *args, **kwargs):
        """Run the model and return its trace (dict site name -> site dict)."""
        return self._run(*args, **kwargs)[1]

    def _assemble(self, values):
        """The trace from `values`, `_Layout.read_all`'s list of every recorded field."""
        values = dict(zip(self._layout.all_fields(), values))
        out = {}
        for name, fields in self._layout.fields.items():
            site = self._recorded[name]

            def read(field, site=site):
                x = values[field]
                return x.reshape(site.loops + x.shape[1:]) if site.in_loop else x

            msg_static = dict(site.key.static)
            if site.type == "mutable":
                value = jax.tree_util.tree_unflatten(
                    jax.tree_util.tree_structure(jax.tree_util.tree_unflatten(
                        site.key.in_tree, site.key.in_avals)[0]),
                    [values[f] for f in fields["value"]])
                out[name] = {"type": "mutable", "name": name, "value": value, "is_observed": False}
                continue
            # `cond` branches that put the site in different plates: no plates are recorded
            stacks = {dict(k.static).get("cond_indep_stack", ()) for k in site.keys or (site.key,)}
            rec = {"type": site.type, "name": name,
                   "value": read(fields["value"]) if "value" in fields else None,
                   "is_observed": site.is_observed, "infer": dict(msg_static.get("infer", ())),
                   "cond_indep_stack": list(stacks.pop()) if len(stacks) == 1 else []}
            if site.type == "sample":
                rec["fn"] = rec["log_prob"] = rec["scale"] = None
                rec["intermediates"] = []  # NumPyro's field: effppl's sites keep none
                if "fn" in fields:
                    fn = jax.tree_util.tree_unflatten(self._fn_tree(site),
                                                      [read(f) for f in fields["fn"]])
                    rec["fn"] = promote_batch_shape(fn) if site.in_loop else fn
                    if "mask" in fields:  # NumPyro's trace holds the masked distribution
                        rec["fn"] = rec["fn"].mask(read(fields["mask"]))
                if "log_prob" in fields:
                    rec["log_prob"] = read(fields["log_prob"])
                if "scale" in fields:
                    rec["scale"] = read(fields["scale"])
            if site.type == "param":
                msg = site.message
                constraint = jax.tree_util.tree_unflatten(
                    jax.tree_util.tree_structure(msg.constraint),
                    [values[f] for f in fields["constraint"]])
                rec["kwargs"] = {"constraint": constraint, "event_dim": msg_static["event_dim"]}
            if "unconstrained" in fields:
                rec["unconstrained"] = read(fields["unconstrained"])
            if "obs" in fields:  # taken away by `uncondition` (NumPyro's `infer["obs"]`)
                rec["infer"]["obs"] = read(fields["obs"])
            # a plate's entry goes before its sites; a subsampled plate is a site itself, and a
            # `block` inside may have hidden the plate
            skip = set(out) | set(self._layout.fields) | set(msg_static.get("hidden_plates", ()))
            for frame in reversed(rec["cond_indep_stack"]):
                if frame.name not in skip:
                    out[frame.name] = _plate_entry(frame.name, frame.size, frame.size,
                                                   jnp.arange(frame.size))
            if site.type == "plate":
                fn = site.message.fn
                rec = {**rec, **_plate_entry(name, fn.size, fn.subsample_size, rec["value"]),
                       "cond_indep_stack": rec["cond_indep_stack"]}
            out[name] = rec
        return out


class _Field(NamedTuple):
    """Where one recorded quantity lives in the packed buffers: `rows` occurrences (`None`: a
    site outside loops, one value) of `shape`, from `offset` of the buffer named `buffer` (its
    dtype's name, or `"counts"`: the occurrence counters, int32)."""

    buffer: str
    offset: int
    shape: tuple
    rows: int | None

    @property
    def size(self):
        return math.prod(self.shape)


class _Layout:
    """`trace`'s record packed into one flat buffer per dtype, so the handler's parameters have a
    few leaves whatever the number of sites: each clause passes every parameter along, and one
    leaf per site made tracing quadratic in the number of sites. A write is one
    `dynamic_update_slice` (or `scatter_add`, see `write`); `_assemble` slices the sites out at
    the end. The occurrence counters, the only fields read while the program runs, have a
    buffer of their own: a loop that reads a buffer it also writes makes XLA copy that buffer
    at each step (a cost quadratic in the loop's length, where the rows of its sites are)."""

    def __init__(self):
        self.fields: dict = {}  # site name -> {"value": _Field, "fn": [_Field], ...}
        self.sizes: dict = {}   # buffer name -> length so far
        self.dtypes: dict = {}  # buffer name -> dtype

    def add(self, shape, dtype, rows, buffer=None):
        dtype = jnp.dtype(dtype).name
        buffer = buffer or dtype
        self.dtypes[buffer] = dtype
        field = _Field(buffer, self.sizes.get(buffer, 0), tuple(shape), rows)
        self.sizes[buffer] = field.offset + field.size * (1 if rows is None else rows)
        return field

    def all_fields(self) -> list:
        """Every field, in the order of `fields` (a site's own fields in their order)."""
        return jax.tree_util.tree_leaves(list(self.fields.values()),
                                         is_leaf=lambda x: isinstance(x, _Field))

    def read_all(self, bufs) -> list:
        """Every field's value (all rows), as `all_fields` orders them. Read inside the program
        that wrote them, so that the translator forwards each read to its write
        (`effects` forwards reads of buffers before anything differentiates the program)."""
        return [self.read(bufs, f, all_rows=True) for f in self.all_fields()]

    def buffers(self):
        return {name: jnp.zeros((n,), self.dtypes[name]) for name, n in self.sizes.items()}

    def read(self, bufs, field, all_rows=False):
        rows = field.rows if all_rows and field.rows is not None else None
        n = field.size * (1 if rows is None else rows)
        x = bufs[field.buffer][field.offset:field.offset + n]
        return x.reshape(field.shape if rows is None else (rows, *field.shape))

    def write(self, bufs, field, value, row=None):
        """`bufs` with `value` written at `field` (at its row `row` for a site inside loops).

        A row is written by adding into the zeros it holds (each row is written once): the
        gradient of an add passes the buffer's cotangent through unchanged, where that of an
        overwrite (`dynamic_update_slice`) zeroes a slice of it, which XLA does by copying the
        whole buffer, once per step of the loop that writes it: a gradient quadratic in the loop's
        length. Outside loops (a constant offset) a write stays a `dynamic_update_slice`, which
        `effects` forwards to the reads after the program."""
        if field.size == 0:
            return bufs
        dtype = self.dtypes[field.buffer]
        flat = jnp.ravel(jnp.broadcast_to(jnp.asarray(value, dtype), field.shape))
        start = field.offset if row is None else field.offset + row * field.size
        if row is not None and jnp.issubdtype(dtype, jnp.inexact):
            buf = _add_at(bufs[field.buffer], flat, start)
        else:
            buf = jax.lax.dynamic_update_slice(bufs[field.buffer], flat, (start,))
        return dict(bufs, **{field.buffer: buf})


def _add_at(buf, flat, start):
    """`buf` with `flat` added to `buf[start:start + flat.size]` (one windowed `scatter_add`;
    an index out of range is dropped, where a row never is)."""
    numbers = jax.lax.ScatterDimensionNumbers(update_window_dims=(0,), inserted_window_dims=(),
                                              scatter_dims_to_operand_dims=(0,))
    index = jnp.reshape(jnp.asarray(start, jnp.int32), (1,))
    return jax.lax.scatter_add(buf, index, flat, numbers, indices_are_sorted=True,
                               unique_indices=True, mode=jax.lax.GatherScatterMode.FILL_OR_DROP)


def _plate_entry(name, size, subsample_size, indices):
    """NumPyro's trace entry of a plate: `type` "plate", its indices as `value`, `args`
    `(size, subsample_size)`."""
    return {"type": "plate", "name": name, "value": indices, "args": (size, subsample_size),
            "is_observed": False, "infer": {}, "scale": 1.0, "cond_indep_stack": []}
