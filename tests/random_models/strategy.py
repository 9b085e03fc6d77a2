"""A hypothesis strategy of model descriptions (`spec`): latent and observed sample sites,
deterministic and factor sites, in plates (nested, with and without `dim`), plain scans (nested,
reversed, with `xs` and carries that depend on sites), `cond`/`switch` branches with different
families and supports under one name, `vmap`, and handlers (mask, scale, condition, substitute,
block, do), with constrained supports (positive, unit interval, simplex, ordered, correlation
Cholesky factors, intervals whose bounds depend on other sites).

The rules that keep a description a valid model: site names are unique but for sites sharing a
name across `cond` branches (same value shape; observed ones of one support class); a
handler gives values (condition, substitute, do) only to free latent sites inside it, and hides
(block) only sites that need no value from outside; no `vmap` inside a plate; a `cond` inside a
`vmap` branches on values from outside the `vmap`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hypothesis import strategies as st

from . import spec as S

LATENT = [f.name for f in S.FAMILIES.values() if f.latent]
OBSERVED = [f.name for f in S.FAMILIES.values() if f.observable]
# one family per support class, for a site sharing its name across branches
MAX_ITERATIONS = 24  # the product of the loop lengths around any site


@dataclass
class Ctx:
    refs: tuple = ()          # names readable here
    scans: tuple = ()         # enclosing scans (names)
    vmaps: tuple = ()         # enclosing vmaps
    plates: tuple = ()        # enclosing plates: (name, dim) with dim resolved
    in_vmap_refs: tuple = ()  # refs defined inside the innermost vmap (batched)
    iterations: int = 1       # product of the enclosing loop lengths
    depth: int = 0
    top_size: int = 5         # at most this many statements at the top level,
    inner_size: int = 3       # and in each nested body
    max_depth: int = 3        # nesting of plates, scans, conds, vmaps and handlers

    def with_(self, **changes):
        return dataclasses.replace(self, **changes)


class _Names:
    def __init__(self):
        self.n = 0

    def __call__(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"


@st.composite
def exprs(draw, ctx: Ctx, unbatched=False, depth=0, scalar=False):
    """An expression of the values in `ctx`: without those batched along a vmap (`unbatched`),
    and without plate vectors (`scalar`: a `Cond`'s predicate)."""
    def var(kind, names):
        return st.builds(S.Var, st.just(kind), st.sampled_from(names))

    atoms = [st.builds(S.Const, st.sampled_from([-1.0, -0.5, 0.0, 0.3, 1.0]))]
    refs = [r for r in ctx.refs if not (unbatched and r in ctx.in_vmap_refs)]
    if refs:
        atoms.append(var("ref", refs))
    if ctx.scans and not unbatched:
        atoms += [var("carry", ctx.scans), var("xs", ctx.scans)]
    if ctx.vmaps and not unbatched:
        atoms.append(var("vmapx", ctx.vmaps))
    if ctx.plates and not unbatched and not scalar:
        atoms.append(var("plate", [p for p, _ in ctx.plates]))
    e = draw(st.one_of(atoms))
    if depth < 1 and draw(st.integers(0, 2)) == 0:
        kind = draw(st.sampled_from(["add", "mul", "tanh"]))
        if kind == "add":
            e = S.Add(e, draw(exprs(ctx, unbatched, depth + 1, scalar)))
        elif kind == "mul":
            e = S.Mul(draw(st.sampled_from([-1.5, 0.5, 2.0])), e)
        else:
            e = S.Tanh(e)
    return e


@dataclass
class Body:
    stmts: tuple
    visible: tuple    # names readable after the body (a plate's or handler's body: its own)
    status: dict      # site -> free | observed | given | hidden | det | factor (for handlers)


def _sample(draw, ctx, names, name=None, family=None, observed=None):
    if observed is None:
        observed = draw(st.integers(0, 3)) == 0
    if family is None:
        family = draw(st.sampled_from(OBSERVED if observed else LATENT))
    params = tuple(draw(exprs(ctx)) for _ in range(S.FAMILIES[family].num_params))
    return S.Sample(name or names("o" if observed else "x"), family, params, observed)


@st.composite
def bodies(draw, ctx: Ctx, names: _Names, size=None, top=False):
    """A list of statements for the context `ctx`."""
    most = ctx.inner_size if ctx.depth else ctx.top_size
    n = size if size is not None else draw(st.integers(1, most))
    stmts, status, refs, visible = [], {}, list(ctx.refs), []
    for _ in range(n):
        here = ctx.with_(refs=tuple(refs))
        kinds = ["sample", "sample", "sample", "deterministic", "factor"]
        if ctx.depth < ctx.max_depth:
            kinds += ["plate", "scan", "cond"]
            if not ctx.vmaps:  # a handler under `jax.vmap`: effppl raises (not supported)
                kinds += ["handle", "handle"]
            if not ctx.plates:
                kinds.append("vmap")
        kind = draw(st.sampled_from(kinds))
        new_status, new_visible = {}, []
        if kind == "sample":
            s = _sample(draw, here, names)
            new_status[s.name] = "observed" if s.observed else "free"
            new_visible.append(s.name)
        elif kind == "deterministic":
            s = S.Deterministic(names("d"), draw(exprs(here)))
            new_status[s.name] = "det"
            new_visible.append(s.name)
        elif kind == "factor":
            s = S.Factor(names("f"), draw(exprs(here)))
            new_status[s.name] = "factor"
        elif kind == "plate":
            s, b = draw(plates(here, names))
            new_status, new_visible = b.status, list(b.visible)
        elif kind == "scan":
            s, b = draw(scans(here, names))
            if s is None:
                continue
            new_status = b.status
            new_visible.append(s.name)
        elif kind == "cond":
            s, new_status = draw(conds(here, names))
            new_visible.append(s.name)
        elif kind == "vmap":
            s, b = draw(vmaps(here, names))
            new_status = b.status
            new_visible.append(s.name)
        else:
            s, b = draw(handles(here, names))
            new_status, new_visible = b.status, list(b.visible)
        stmts.append(s)
        status.update(new_status)
        refs += new_visible
        visible += new_visible
        if ctx.vmaps:  # names defined inside a vmap are batched
            ctx = ctx.with_(in_vmap_refs=ctx.in_vmap_refs + tuple(new_visible))
    return Body(tuple(stmts), tuple(visible), status)


@st.composite
def plates(draw, ctx, names):
    name = names("p")
    used = {d for _, d in ctx.plates}
    explicit = draw(st.booleans())
    free = [d for d in (-1, -2, -3) if d not in used]
    if explicit and free:
        dim = draw(st.sampled_from(free))
    else:
        dim, explicit = -1, False
        while dim in used:
            dim -= 1
    size = draw(st.integers(1, 4))
    inner = ctx.with_(plates=ctx.plates + ((name, dim),), depth=ctx.depth + 1)
    b = draw(bodies(inner, names))
    return S.Plate(name, size, dim if explicit else None, b.stmts), b


@st.composite
def scans(draw, ctx, names):
    length = draw(st.sampled_from([0, 1, 2, 3, 3, 4]))
    if ctx.iterations * max(length, 1) > MAX_ITERATIONS:
        return None, None
    name = names("s")
    init = draw(exprs(ctx))
    inner = ctx.with_(scans=ctx.scans + (name,), depth=ctx.depth + 1,
                      iterations=ctx.iterations * max(length, 1))
    b = draw(bodies(inner, names))
    tops = [s.name for s in b.stmts if isinstance(s, (S.Sample, S.Deterministic))]
    carry_from = draw(st.sampled_from([None] + tops)) if tops else None
    return S.Scan(name, length, draw(st.booleans()), init, carry_from, b.stmts), b


@st.composite
def conds(draw, ctx, names):
    name = names("c")
    pred = draw(exprs(ctx, unbatched=bool(ctx.vmaps), scalar=True))
    num = draw(st.sampled_from([2, 2, 3]))
    inner = ctx.with_(depth=ctx.depth + 1)
    branches, status, shared = [], {}, []
    for i in range(num):
        stmts = list(draw(bodies(inner, names)).stmts) if draw(st.integers(0, 4)) else []
        # a site sharing its name with one of an earlier branch (same shape, other family)
        for s in shared if i else []:
            if draw(st.booleans()):
                if s.observed:
                    group = S.OBSERVED_SUPPORT[S.support_class(s.family)]
                else:
                    group = [f for f in S.SHAPE_GROUPS[S.FAMILIES[s.family].event_shape]
                             if S.FAMILIES[f].latent]
                stmts.insert(draw(st.integers(0, len(stmts))), _sample(
                    draw, inner.with_(refs=ctx.refs), names, s.name,
                    draw(st.sampled_from(group)), s.observed))
        for s in stmts:
            if isinstance(s, S.Sample) and i == 0:
                shared.append(s)
        branches.append(tuple(stmts))
        for s in stmts:
            _statuses(s, status)
    return S.Cond(name, pred, tuple(branches)), status


def _statuses(stmt, out):
    """The statuses of the sites in `stmt` (for a handler around it)."""
    if isinstance(stmt, S.Sample):
        out[stmt.name] = "observed" if stmt.observed else "free"
    elif isinstance(stmt, S.Deterministic):
        out[stmt.name] = "det"
    elif isinstance(stmt, S.Factor):
        out[stmt.name] = "factor"
    elif isinstance(stmt, (S.Plate, S.Scan, S.Vmap)):
        for s in stmt.body:
            _statuses(s, out)
    elif isinstance(stmt, S.Cond):
        for b in stmt.branches:
            for s in b:
                _statuses(s, out)
    elif isinstance(stmt, S.Handle):
        inner = {}
        for s in stmt.body:
            _statuses(s, inner)
        for name in stmt.payload if stmt.kind in ("condition", "substitute") else ():
            inner[name] = "given"
        for name in stmt.payload if stmt.kind == "block" else ():
            inner[name] = "hidden"
        for name in stmt.payload if stmt.kind == "do" else ():
            inner[name] = "free (done)"
        out.update(inner)


@st.composite
def vmaps(draw, ctx, names):
    size = draw(st.integers(1, 3))
    if ctx.iterations * size > MAX_ITERATIONS:
        size = 1
    name = names("v")
    inner = ctx.with_(vmaps=ctx.vmaps + (name,), depth=ctx.depth + 1, in_vmap_refs=(),
                      iterations=ctx.iterations * size)
    b = draw(bodies(inner, names))
    return S.Vmap(name, size, b.stmts), b


@st.composite
def handles(draw, ctx, names):
    name = names("h")
    inner = ctx.with_(depth=ctx.depth + 1)
    b = draw(bodies(inner, names))
    status = dict(b.status)
    kinds = ["mask", "scale"]
    free = sorted(n for n, v in status.items() if v == "free")
    quiet = sorted(n for n, v in status.items() if v in ("observed", "given", "det", "factor"))
    if free:
        kinds += ["condition", "substitute", "do"]
    if quiet:
        kinds.append("block")
    kind = draw(st.sampled_from(kinds))
    if kind == "mask":
        payload = draw(st.sampled_from([True, False] + [p for p, _ in ctx.plates]))
    elif kind == "scale":
        payload = draw(st.sampled_from([0.5, 2.0, 3.0] + [p for p, _ in ctx.plates]))
    elif kind == "block":
        payload = tuple(draw(st.lists(st.sampled_from(quiet), min_size=1, max_size=2,
                                      unique=True)))
        status.update({n: "hidden" for n in payload})
    else:
        payload = tuple(draw(st.lists(st.sampled_from(free), min_size=1, max_size=2,
                                      unique=True)))
        if kind != "do":
            status.update({n: "given" for n in payload})
        else:
            status.update({n: "free (done)" for n in payload})
    return S.Handle(name, kind, b.stmts, payload), Body(b.stmts, b.visible, status)


@st.composite
def models(draw, top_size=5, inner_size=3, max_depth=3):
    """A model description: a tuple of statements (at most `top_size` at the top level and
    `inner_size` in each nested body, nested at most `max_depth` deep)."""
    ctx = Ctx(top_size=top_size, inner_size=inner_size, max_depth=max_depth)
    b = draw(bodies(ctx, _Names(), top=True))
    return b.stmts
