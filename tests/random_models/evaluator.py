"""The independent evaluator: runs a model description eagerly, loop by loop, in plain Python.

It never imports effppl. It encodes the semantics effppl documents (README, "How values of
sites inside control flow are laid out") and NumPyro's handler semantics, from the description
alone:

- a site inside scans of lengths `(T1, T2, ...)` has values of shape `(T1, T2, ..., *vmap
  sizes, *site_shape)`: its n-th occurrence fills row n, row-major over the scans, a reversed
  scan's axis mirrored (its first occurrence fills the last row); a site in a `cond` branch
  fills the next row each time its branch runs; rows never filled are zero;
- `jax.vmap` acts like a plate: its axis follows the loops' axes;
- handlers act innermost first (NumPyro's order): `mask` and `scale` weigh the log density (and
  the Jacobian of the unconstrained value, summed over the event dims first); `condition`
  observes, `substitute` gives a value, `do` continues the model with the intervention while
  the site keeps its own value; `block` hides. A handler's values are laid out like the trace,
  counting from where the handler is entered;
- the potential is `-(sum of log_prob + log|det J|)` with values `biject_to(support)(u)` from
  each occurrence's own distribution; unconstrained coordinates no occurrence reads (rows never
  filled, trailing coordinates of a branch whose family has fewer) add a standard normal log
  density (scaled by a scalar scale around them, for the trailing ones).

`run(model, inputs, mode=..., values=...)` returns the log density, the potential, the trace and
the pointwise log likelihood; `sample_inputs(model, seed)` draws the model's data, the values
its handlers give, and a point of its latent sites.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions.transforms import biject_to

from . import spec as S

# ---- static layout ------------------------------------------------------------------------------


@dataclass
class SiteInfo:
    name: str
    kind: str                 # sample | deterministic | factor
    families: list            # the families of its statements (sample sites)
    observed: bool
    path: tuple               # the loops around it, outermost first: (kind, name, size, reverse)
    plates: tuple             # (name, size, dim) around it, outermost first
    conditional: bool         # inside a cond branch
    shape: tuple = ()         # one element's value shape (plates' batch shape + event shape)
    handlers: tuple = ()      # the handlers around it, outermost first


def plates_batch_shape(frames):
    """NumPyro's batch shape of the plates `frames` ((name, size, dim), ...)."""
    if not frames:
        return ()
    n = max(-dim for _, _, dim in frames)
    shape = [1] * n
    for _, size, dim in frames:
        shape[dim] = size
    return tuple(shape)


def resolve_dim(dim, frames):
    """NumPyro's dim of a plate entered inside `frames`: `dim`, or the rightmost free one."""
    if dim is not None:
        return dim
    occupied, new = {d for _, _, d in frames}, -1
    while new in occupied:
        new -= 1
    return new


def analyze(model) -> tuple[dict, dict]:
    """`{name: SiteInfo}` of the model's sites, and the owner paths of its inputs."""
    sites, owners = {}, {}
    carries = {}  # scan name -> its carry's shape (its init's: the update keeps it)

    def walk(body, path, frames, conditional, handlers):
        for s in body:
            if isinstance(s, (S.Sample, S.Deterministic, S.Factor)):
                kind = {S.Sample: "sample", S.Deterministic: "deterministic",
                        S.Factor: "factor"}[type(s)]
                info = sites.get(s.name)
                if info is None:
                    info = sites[s.name] = SiteInfo(s.name, kind, [], getattr(s, "observed", False),
                                                    path, frames, conditional, handlers=handlers)
                info.conditional = info.conditional or conditional
                if isinstance(s, S.Sample):
                    info.families.append(s.family)
                    shape = plates_batch_shape(frames) + S.FAMILIES[s.family].event_shape
                    info.shape = shape
                    if s.observed:
                        owners[f"data:{s.name}"] = (path, s.name)
                elif isinstance(s, S.Deterministic):
                    info.shape = expr_shape(s.expr, {n: (size, dim) for n, size, dim in frames},
                                            carries)
            elif isinstance(s, S.Plate):
                dim = resolve_dim(s.dim, frames)
                walk(s.body, path, frames + ((s.name, s.size, dim),), conditional, handlers)
            elif isinstance(s, S.Scan):
                carries[s.name] = expr_shape(s.init, {n: (size, dim) for n, size, dim in frames},
                                             carries)
                walk(s.body, path + (("scan", s.name, s.length, s.reverse),), frames,
                     conditional, handlers)
            elif isinstance(s, S.Vmap):
                walk(s.body, path + (("vmap", s.name, s.size, False),), frames, conditional,
                     handlers)
            elif isinstance(s, S.Cond):
                for b in s.branches:
                    walk(b, path, frames, True, handlers)
            elif isinstance(s, S.Handle):
                if s.kind in ("condition", "substitute", "do"):
                    for name in s.payload:
                        owners[f"given:{s.name}:{name}"] = (path, name)
                walk(s.body, path, frames, conditional, handlers + ((s, path),))

    walk(model, (), (), False, ())
    return sites, owners


def expr_shape(expr, plates, carries=None):
    """The shape of `expr`'s value: plates' vectors broadcast; a scan's carry has its init's
    shape (`carries`); every other variable is a scalar."""
    if isinstance(expr, S.Var) and expr.kind == "plate":
        size, dim = plates[expr.name]
        return (size,) + (1,) * (-dim - 1)
    if isinstance(expr, S.Var) and expr.kind == "carry" and carries:
        return carries.get(expr.name, ())
    if isinstance(expr, S.Add):
        return jnp.broadcast_shapes(expr_shape(expr.a, plates, carries),
                                    expr_shape(expr.b, plates, carries))
    if isinstance(expr, (S.Mul, S.Tanh)):
        return expr_shape(expr.a, plates, carries)
    return ()


def layout(info: SiteInfo, inner_of=()):
    """`(scans, vmaps)`: the scans ((length, reverse), ...) and vmap sizes around site `info`
    inside the loops `inner_of` (the path of the point it is counted from)."""
    rel = info.path[len(inner_of):]
    return ([(size, rev) for kind, _, size, rev in rel if kind == "scan"],
            [size for kind, _, size, _ in rel if kind == "vmap"])


def full_shape(info: SiteInfo, inner_of=(), row_shape=None):
    scans, vmaps = layout(info, inner_of)
    return (*[n for n, _ in scans], *vmaps, *(info.shape if row_shape is None else row_shape))


def row_of(n, scans):
    """The row (an index tuple over the scans' axes) that occurrence `n` fills: row-major over
    the scans, a reversed scan's axis mirrored."""
    digits = []
    for length, _ in reversed(scans):
        digits.append(n % length)
        n //= length
    digits.reverse()
    return tuple(length - 1 - d if rev else d for d, (length, rev) in zip(digits, scans))


def unconstrained_row_shape(info: SiteInfo):
    """`(shape, flat)`: one occurrence's unconstrained shape, and whether its families differ in
    it (then the leading axes all their shapes share, e.g. a plate's, and one flat axis as long as
    the longest rest, each family reading from the front of that axis)."""
    shapes = set()
    for family in info.families:
        fn = _dummy(family, info.shape)
        shapes.add(tuple(biject_to(fn.support).inverse_shape(info.shape)))
    if len(shapes) == 1:
        return shapes.pop(), False
    first = next(iter(shapes))
    shared = 0
    while all(len(s) > shared + 1 and s[shared] == first[shared] for s in shapes):
        shared += 1
    return (*first[:shared], max(math.prod(s[shared:]) for s in shapes)), True


def _dummy(family, shape):
    f = S.FAMILIES[family]
    batch = shape[:len(shape) - len(f.event_shape)]
    params = [jnp.zeros(batch) for _ in range(f.num_params)]
    return S.make_dist(family, params)


# ---- running ------------------------------------------------------------------------------------


class BlockedDraw(Exception):
    """A hidden latent site without a value (the generator avoids these)."""


@dataclass
class _Frame:
    """An entered handler: its statement, the loop path where it was entered, its counters."""
    stmt: S.Handle
    path: tuple
    counts: dict = dataclasses.field(default_factory=dict)


@dataclass
class Result:
    log_density: object = 0.0
    log_det: object = 0.0
    trace: dict = dataclasses.field(default_factory=dict)
    log_lik: dict = dataclasses.field(default_factory=dict)
    counts: dict = dataclasses.field(default_factory=dict)   # (site, vpath) -> occurrences
    drawn: dict = dataclasses.field(default_factory=dict)    # sample mode: what it drew


class _Run:
    def __init__(self, model, inputs, mode, values, key):
        self.model = model
        self.sites, self.owners = analyze(model)
        self.inputs, self.mode, self.values = inputs, mode, values or {}
        self.key = key
        self.out = Result()
        self.rows_shape = {}  # site -> unconstrained row shape, flat

    def next_key(self):
        self.key, sub = jax.random.split(self.key)
        return sub

    # inputs are indexed by the iteration indices of the loops above their owner
    def input(self, key, ipath):
        value = self.inputs[key]
        for index in ipath[:len(self.owners[key][0])]:
            value = value[index]
        return value

    def record(self, store, name, index, value, shape):
        if name not in store:
            store[name] = {}
        store[name][index] = (value, shape)

    def run(self):
        self.block(self.model, S.Scope(), ipath=(), vpath=(), frames=(), handlers=())
        return self.out

    def block(self, body, scope, ipath, vpath, frames, handlers):
        """Run statements; returns the name of the last sample/deterministic value (cond)."""
        for s in body:
            if isinstance(s, S.Sample):
                scope.refs[s.name] = self.sample(s, scope, ipath, vpath, frames, handlers)
            elif isinstance(s, S.Deterministic):
                value = S.evaluate(s.expr, scope)
                scope.refs[s.name] = value
                if not self.hidden(s.name, handlers):
                    self.put_trace(s.name, value, vpath)
            elif isinstance(s, S.Factor):
                lp = S.evaluate(s.expr, scope)  # NumPyro: a `Unit` site, expanded by the plates
                lp = jnp.broadcast_to(lp, jnp.broadcast_shapes(jnp.shape(lp),
                                                               plates_batch_shape(frames)))
                if not self.hidden(s.name, handlers):
                    mask, scale = self.weights(s.name, handlers, scope)
                    self.out.log_density = self.out.log_density + jnp.sum(
                        _weigh(lp, mask, scale))
            elif isinstance(s, S.Plate):
                dim = resolve_dim(s.dim, frames)
                inner = scope.child(plates={s.name: (s.size, dim)})
                self.block(s.body, inner, ipath, vpath, frames + ((s.name, s.size, dim),),
                           handlers)
                scope.refs.update(inner.refs)  # a plate is a `with` block: its names stay
            elif isinstance(s, S.Scan):
                carry = S.evaluate(s.init, scope)
                xs = S.xs_feature(s.length)
                steps = range(s.length - 1, -1, -1) if s.reverse else range(s.length)
                for t in steps:
                    inner = scope.child(carries={s.name: carry}, xs={s.name: xs[t]})
                    self.block(s.body, inner, ipath + (t,), vpath, frames, handlers)
                    if s.carry_from is not None:
                        carry = 0.5 * carry + 0.5 * S.summary(inner.refs[s.carry_from])
                    else:
                        carry = 0.8 * carry + 0.2 * xs[t]
                scope.refs[s.name] = carry
            elif isinstance(s, S.Cond):
                index = int(S.branch_index(S.evaluate(s.pred, scope), len(s.branches)))
                inner = scope.child()
                last = self.block(s.branches[index], inner, ipath, vpath, frames, handlers)
                scope.refs[s.name] = (S.summary(inner.refs[last]) if last is not None
                                      else jnp.asarray(0.0))
            elif isinstance(s, S.Vmap):
                results = []
                feature = S.vmap_feature(s.size)
                for b in range(s.size):
                    inner = scope.child(vmapx={s.name: feature[b]})
                    last = self.block(s.body, inner, ipath + (b,), vpath + (b,), frames,
                                      handlers)
                    results.append(S.summary(inner.refs[last]) if last is not None
                                   else jnp.asarray(0.0))
                scope.refs[s.name] = jnp.mean(jnp.stack(results))
            elif isinstance(s, S.Handle):
                frame = _Frame(s, tuple(ipath))
                self.block(s.body, scope, ipath, vpath, frames, handlers + ((frame, vpath),))
        return S.last_value_name(body)

    def hidden(self, name, handlers):
        return any(f.stmt.kind == "block" and name in f.stmt.payload for f, _ in handlers)

    def weights(self, name, handlers, scope):
        """The mask and scale the handlers outside the site's `block` (if any) put on it."""
        mask, scale = None, None
        for frame, _ in reversed(handlers):  # innermost first
            s = frame.stmt
            if s.kind == "block" and name in s.payload:
                break
            if s.kind == "mask":
                m = S.mask_of(s.payload, scope)
                mask = m if mask is None else jnp.logical_and(mask, m)
            elif s.kind == "scale":
                c = S.scale_of(s.payload, scope)
                scale = c if scale is None else scale * c
        return mask, scale

    def given(self, frame, vpath_at, name, vpath, ipath, fn):
        """The value handler `frame` gives this occurrence of site `name` (and advance its
        counter): row `count` of its values, laid out from where it was entered (in sample
        mode: a draw of `fn`, stored there)."""
        info = self.sites[name]
        scans, _ = layout(info, info.path[:len(frame.path)])
        rel_vpath = vpath[len(vpath_at):]
        n = frame.counts.get((name, rel_vpath), 0)
        frame.counts[(name, rel_vpath)] = n + 1
        key, index = f"given:{frame.stmt.name}:{name}", row_of(n, scans) + rel_vpath
        if self.mode == "sample":
            value = fn.sample(self.next_key())
            self.out.drawn.setdefault(key, {})[tuple(frame.path) + index] = value
            return value
        value = self.input(key, ipath)
        for i in index:
            value = value[i]
        return value

    def sample(self, s, scope, ipath, vpath, frames, handlers):
        params = [S.evaluate(p, scope) for p in s.params]
        fn = S.make_dist(s.family, params)
        batch = jnp.broadcast_shapes(fn.batch_shape, plates_batch_shape(frames))
        if fn.batch_shape != batch:
            fn = fn.expand(batch)
        observed, value, continue_with = s.observed, None, None
        if s.observed:
            value = self.input(f"data:{s.name}", ipath) if self.mode != "sample" else None
            if self.mode == "sample":
                value = fn.sample(self.next_key())
                self.out.drawn.setdefault(f"data:{s.name}", {})[tuple(ipath)] = value
        hidden = False
        for frame, vpath_at in reversed(handlers):  # innermost first
            h = frame.stmt
            if h.kind == "block" and s.name in h.payload:
                hidden = True
                break
            if h.kind in ("condition", "substitute", "do") and s.name in h.payload:
                row = self.given(frame, vpath_at, s.name, vpath, ipath, fn)
                if h.kind == "do":
                    continue_with = row if continue_with is None else continue_with
                else:
                    value = row
                    observed = observed or h.kind == "condition"
        if hidden:
            if value is None:
                raise BlockedDraw(s.name)
            return value if continue_with is None else continue_with
        mask, scale = self.weights(s.name, handlers, scope)
        info = self.sites[s.name]
        n = self.out.counts.get((s.name, vpath), 0)
        self.out.counts[(s.name, vpath)] = n + 1
        row = row_of(n, layout(info)[0]) + vpath
        if value is None:  # a free latent site: its value from the entry point
            value = self.latent_value(s.name, fn, row, mask, scale)
        lp = fn.log_prob(value)
        self.out.log_density = self.out.log_density + jnp.sum(_weigh(lp, mask, scale))
        self.put_trace(s.name, value, vpath, row)
        if observed:
            self.put(self.out.log_lik, s.name, row, _weigh(lp, mask, None))
        return value if continue_with is None else continue_with

    def latent_value(self, name, fn, row, mask, scale):
        if self.mode == "sample":
            value = fn.sample(self.next_key())
            self.put(self.out.drawn, name, row, value)
            return value
        if self.mode == "density":
            value = jnp.asarray(self.values[name])
            for i in row:
                value = value[i]
            return value
        # potential: the row of unconstrained values, read from the front
        info = self.sites[name]
        t = biject_to(fn.support)
        u_shape = tuple(t.inverse_shape(info.shape))
        row_shape, flat = unconstrained_row_shape(info)
        u_row = jnp.asarray(self.values[name])
        for i in row:
            u_row = u_row[i]
        if flat:
            shared = len(row_shape) - 1
            size = math.prod(u_shape[shared:])
            u, rest = u_row[..., :size].reshape(u_shape), u_row[..., size:]
        else:
            u, rest = u_row, None
        value = t(u)
        log_det = t.log_abs_det_jacobian(u, value)
        # NumPyro: summed over the event dims, then weighed per batch element
        event_dims = jnp.ndim(log_det) - (len(info.shape) - len(fn.event_shape))
        log_det = jnp.sum(log_det, axis=tuple(range(jnp.ndim(log_det) - event_dims,
                                                     jnp.ndim(log_det))))
        total = jnp.sum(_weigh(log_det, mask, scale))
        if rest is not None and rest.size:
            aux = jnp.sum(_std_normal(rest))
            scalar = scale is not None and jnp.ndim(scale) == 0
            total = total + (aux * scale if scalar else aux)
        self.out.log_det = self.out.log_det + total
        return value

    def put_trace(self, name, value, vpath, row=None):
        if row is None:
            info = self.sites[name]
            n = self.out.counts.get((name, vpath), 0)
            self.out.counts[(name, vpath)] = n + 1
            row = row_of(n, layout(info)[0]) + vpath
        self.put(self.out.trace, name, row, value)

    @staticmethod
    def put(store, name, row, value):
        store.setdefault(name, {})[row] = value



def _weigh(lp, mask, scale):
    if mask is not None:
        lp = jnp.where(mask, lp, 0.0)
    if scale is not None:
        lp = lp * scale
    return lp


def _std_normal(u):
    return -0.5 * (jnp.square(u) + jnp.log(2 * jnp.pi))


def _assemble(rows: dict, shape, dtype=jnp.float64, fill=None):
    """An array of `shape` with `rows` (index tuple -> value) written in (zeros elsewhere)."""
    out = jnp.zeros(shape, dtype) if fill is None else jnp.broadcast_to(
        jnp.asarray(fill, dtype), shape)
    for index, value in rows.items():
        out = out.at[index].set(jnp.asarray(value, dtype))
    return out


# ---- entry points ---------------------------------------------------------------------------------


class Evaluation(NamedTuple):
    log_density: object
    potential: object
    trace: dict         # site -> value (stacked, zeros where never filled)
    log_lik: dict       # observed site -> log_prob (stacked), masked, not scaled


def run(model, inputs, mode, values) -> Evaluation:
    """Evaluate `model` with `inputs` at `values`: constrained latent values (`mode="density"`)
    or unconstrained ones (`mode="potential"`)."""
    r = _Run(model, inputs, mode, values, jax.random.PRNGKey(0))
    out = r.run()
    sites = r.sites
    log_det = out.log_det
    if mode == "potential":
        for name, info in sites.items():
            if name not in values or not info.conditional:
                continue
            scans, vmaps = layout(info)
            row_shape, _ = unconstrained_row_shape(info)
            filled = set()
            for (site, _vpath), n in out.counts.items():
                if site == name:
                    filled |= {row_of(k, scans) for k in range(n)}
            u = jnp.asarray(values[name])
            for row in np.ndindex(*[length for length, _ in scans]):
                if row not in filled:
                    log_det = log_det + jnp.sum(_std_normal(u[row]))
    trace = {}
    for name, info in sites.items():  # every site the handlers leave visible, run or not
        if info.kind == "factor" or any(h.kind == "block" and name in h.payload
                                        for h, _ in info.handlers):
            continue
        rows = out.trace.get(name, {})
        dtype = jnp.result_type(*[jnp.asarray(v).dtype for v in rows.values()]) if rows \
            else jnp.float64
        trace[name] = _assemble(rows, full_shape(info), dtype)
    log_lik = {}
    for name, rows in out.log_lik.items():  # log_prob: the batch shape, no event dims
        info = sites[name]
        event = len(S.FAMILIES[info.families[0]].event_shape)
        log_lik[name] = _assemble(rows, full_shape(info, row_shape=info.shape[:len(info.shape)
                                                                             - event]))
    return Evaluation(out.log_density, -(out.log_density + log_det), trace, log_lik)


def factor_names(model):
    sites, _ = analyze(model)
    return {name for name, info in sites.items() if info.kind == "factor"}


def free_latent(model):
    """The names of the latent sites the entry points give values to (not observed, not given or
    hidden by a handler inside)."""
    sites, _ = analyze(model)
    out = []
    for name, info in sites.items():
        if info.kind != "sample" or info.observed:
            continue
        if any(h.kind in ("condition", "substitute", "block") and name in h.payload
               for h, _ in info.handlers):
            continue
        out.append(name)
    return out


def sample_inputs(model, seed):
    """`(inputs, point)`: data of the observed sites (laid out by iteration, family defaults
    where a branch never ran), the values the handlers give, and the latent values of one draw
    (laid out as the trace: the point to evaluate at)."""
    r = _Run(model, {}, "sample", None, jax.random.PRNGKey(seed))
    out = r.run()
    inputs = {}
    for key, (path, name) in r.owners.items():
        info = r.sites[name]
        rows = out.drawn.get(key, {})
        family = S.FAMILIES[info.families[0]]
        if key.startswith("data:"):
            shape = tuple(size for _, _, size, _ in path) + info.shape
            dtype = jnp.int32 if not family.latent else jnp.float64
            inputs[key] = _assemble(rows, shape, dtype, fill=family.default)
        else:
            shape = tuple(size for _, _, size, _ in path) + full_shape(info, path)
            inputs[key] = _assemble(rows, shape, fill=None)
    point = {}
    for name in free_latent(model):
        info = r.sites[name]
        point[name] = _assemble(out.drawn.get(name, {}), full_shape(info))
    return inputs, point


def unconstrained_point(model, seed):
    """Standard normal unconstrained values of the free latent sites (their layout)."""
    sites, _ = analyze(model)
    rng = np.random.default_rng(seed)
    out = {}
    for name in free_latent(model):
        info = sites[name]
        row_shape, _ = unconstrained_row_shape(info)
        out[name] = jnp.asarray(rng.standard_normal(full_shape(info, row_shape=row_shape)))
    return out
