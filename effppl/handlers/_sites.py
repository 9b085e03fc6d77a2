"""Static site analysis: which sample/deterministic sites a (traced) model has, their value types,
and the static lengths of the loops around them (a site in a loop of static length T holds one
row per occurrence: shape `(T, *site_shape)`, nested loops outermost first).

The analysis reads the model's effectful jaxpr through `effects.iter_performs`, which owns control
flow: a perform inside a nested handler is attributed to that handler's clause, whose own
re-performs then inherit the perform's loops and branches.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

from .._mutable import mutable_op
from ..effects import internal
from ..effects.internal import exclusive, iter_performs
from ..primitives import SiteError, deterministic_op, param_op, sample_op


class Site(NamedTuple):
    """One sample or deterministic site as seen from outside the model."""

    name: str
    type: str               # "sample" | "deterministic" | "param" | "plate" (a subsampled
    #                         plate's indices) | "mutable"
    aval: Any               # ShapedArray of one occurrence's value (a mutable site's: of its
    #                         first leaf; `key` holds its whole type)
    loops: tuple            # static lengths of the enclosing scans, outermost first; None = while
    is_observed: bool
    key: Any                # the SiteKey of the perform (its distribution treedef, ...)
    one_family: bool = True  # False when cond branches use different distributions
    reverse: tuple = ()     # per enclosing loop: a `scan(..., reverse=True)`
    keys: tuple = ()        # the SiteKey of each different perform (cond branches), `key` first
    conditional: bool = False  # some occurrence sits in a `cond` branch (may never run)

    @property
    def message(self):
        """The message of its perform `key` (`SampleMsg`, `ParamMsg`), abstract values at its
        leaves: the distribution's type and parameters' shapes, a param's constraint."""
        return message_avals(self.key)

    @property
    def in_loop(self):
        return bool(self.loops)

    @property
    def bounded(self):
        return None not in self.loops

    @property
    def count(self):
        return math.prod(self.loops) if self.bounded else None

    def row(self, occurrence):
        """The row of the site's loop-stacked value (flattened over its loops) that its
        `occurrence`-th occurrence (int32, from 0) reads or writes: row-major over the loops, in
        iteration order, so along a reversed `scan` the first occurrence is the last row."""
        if not any(self.reverse):
            return occurrence
        index, rest = [], occurrence
        for length in reversed(self.loops):
            index.append(rest % length)
            rest = rest // length
        row = 0
        for i, length, reverse in zip(reversed(index), self.loops, self.reverse):
            row = row * length + (length - 1 - i if reverse else i)
        return row


def message_avals(key):
    """The message of the perform `key` (a `SiteKey`), abstract values at its leaves."""
    return jax.tree_util.tree_unflatten(key.in_tree, key.in_avals)[0]


_SITE_OPS = (sample_op, deterministic_op, param_op, mutable_op)
_KIND = {sample_op: "sample", deterministic_op: "deterministic", param_op: "param",
         mutable_op: "mutable"}


def bijector(name, fn):
    """`biject_to(fn.support)`: unconstrained space -> the support of latent site `name`.

    **Raises:** `SiteError` naming the site when its support is discrete (no bijection), e.g. a
    `Bernoulli` in one `cond` branch of a site that HMC would have to move, or has no bijection
    from the reals (a `ProjectedNormal`'s sphere: the error names `ProjectedNormalReparam`)."""
    if getattr(fn.support, "is_discrete", False):
        raise SiteError(f"The latent site `{name}` has a discrete support ({type(fn).__name__}, "
                        f"{type(fn.support).__name__}), so it has no unconstrained space: HMC/NUTS "
                        f"and `potential_energy` need continuous latent sites. Marginalise it out "
                        f"of the model or observe it.")
    try:
        return biject_to(fn.support)
    except NotImplementedError:
        support = fn.support
        if isinstance(support, constraints.independent):
            support = support.base_constraint
        hint = (f" Reparametrize it: `effppl.handlers.reparam(model, config={{{name!r}: "
                f"effppl.infer.reparam.ProjectedNormalReparam()}})` (as NumPyro says)."
                if support is constraints.sphere else "")
        raise SiteError(f"The latent site `{name}` has a {type(fn).__name__} with support "
                        f"{type(support).__name__}, which has no bijection from unconstrained "
                        f"space: HMC/NUTS, autoguides and `potential_energy` cannot move it "
                        f"(continuous inference cannot handle it).{hint}") from None


def analyze(jaxpr) -> dict:
    """`{name: Site}` for every site of the model whose effectful jaxpr is `jaxpr`.

    **Raises:** `SiteError` for a name used twice (outside mutually exclusive `cond` branches),
    or at two different loop depths.
    """
    sites, seen = {}, {}
    for perform in iter_performs(jaxpr, _SITE_OPS):
        eqn, branch = perform.eqn, perform.branch
        kind = _KIND[eqn.params["op"]]
        if kind == "sample":  # a subsampled plate's indices: "plate"
            kind = dict(eqn.params["static"]).get("site_type", "sample")
        # a param or mutable site has one value, however often it is read (created, then final)
        around = () if kind in ("param", "mutable") else perform.loops
        loops = tuple(loop.length for loop in around)
        reverse = tuple(loop.reverse for loop in around)
        name = eqn.params["static"] and dict(eqn.params["static"])["name"]
        where = perform.source
        if name in sites and (sites[name].type == "param") != (kind == "param"):
            raise SiteError(f"Site name `{name}` is used by a param site and by a {kind} or "
                            f"sample site (at {where}); names must be unique.")
        once = kind == "param" or (kind == "mutable" and name in sites
                                   and sites[name].type == "mutable")
        for other, other_where in ([] if once else seen.get(name, [])):
            if not exclusive(perform, other) and kind == "plate":
                raise SiteError(f"The subsampled plate `{name}` is created twice (at {other_where} "
                                f"and at {where}), which would draw its indices twice: create it "
                                f"once and enter it again (`data = effppl.plate(...)`, then "
                                f"`with data:` for each block).")
            if not exclusive(perform, other):
                raise SiteError(f"Duplicate site name `{name}`: sampled at {other_where} and again "
                                f"at {where}. Site names must be unique (inside a loop, one "
                                f"statement per name; each iteration is a row of its value).")
        seen.setdefault(name, []).append((perform, where))
        static = dict(eqn.params["static"])
        site = Site(name, kind, internal.abstractify(eqn.outvars[0].aval), loops,
                    bool(static.get("is_observed", False)), perform.key, reverse=reverse)
        if name in sites and sites[name].loops != loops:
            raise SiteError(f"Site `{name}` occurs inside loops of lengths {sites[name].loops} "
                            f"and {loops}; one name must always sit in the same loops.")
        if name in sites and (sites[name].aval.shape != site.aval.shape):
            raise SiteError(f"Site `{name}` has values of shape {sites[name].aval.shape} in one "
                            f"branch and {site.aval.shape} in another.")
        if name in sites and sites[name].key.in_tree != site.key.in_tree:
            sites[name] = sites[name]._replace(one_family=False)
        if name in sites and site.key not in sites[name].keys:
            sites[name] = sites[name]._replace(keys=sites[name].keys + (site.key,))
        if branch and name in sites:
            sites[name] = sites[name]._replace(conditional=True)
        sites.setdefault(name, site._replace(keys=(site.key,), conditional=bool(branch)))
    return sites


def _unconstrained_type(site, key):
    """`(shape, dtype)` of `biject_to(fn.support).inv(value)` for the perform `key` of `site`."""
    fn_avals = message_avals(key).fn
    leaves, tree = jax.tree_util.tree_flatten(fn_avals)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in leaves]

    def inv(ls, value):
        return bijector(site.name, jax.tree_util.tree_unflatten(tree, ls)).inv(value)

    out = jax.eval_shape(inv, structs, jax.ShapeDtypeStruct(site.aval.shape, site.aval.dtype))
    return out.shape, out.dtype


@functools.lru_cache(maxsize=1024)
def unconstrained_type(site):
    """`(shape, dtype)` of one occurrence's unconstrained value: that of `biject_to(fn.support)
    .inv(value)` (a simplex of K has K - 1 coordinates). When `cond` branches give the site
    distributions whose unconstrained values differ in shape, the leading axes their shapes share
    (a `plate`'s or a `jax.vmap`'s, whether the branch is chosen per element or for the whole
    batch) followed by one flat axis as long as the longest rest: each branch reads its
    coordinates from the front of that axis (`split_row`). Cached per site (a static
    description), as each trace of a model asks for every site's."""
    types = {_unconstrained_type(site, key) for key in site.keys or (site.key,)}
    if len(types) == 1:
        return types.pop()
    shapes = [shape for shape, _ in types]
    lead = 0
    while all(len(s) > lead + 1 and s[lead] == shapes[0][lead] for s in shapes):
        lead += 1
    prefix = shapes[0][:lead]
    return ((*prefix, max(math.prod(s[lead:]) for s in shapes)),
            jnp.result_type(*[dtype for _, dtype in types]))


def pad_row(u, shape):
    """An occurrence's unconstrained value `u` as a row of the site's `shape` (`unconstrained_type`):
    `u` itself, or `u` flattened after the leading axes it shares with `shape` and padded with
    zeros along that last axis."""
    if u.shape == tuple(shape):
        return u
    prefix = tuple(shape[:-1])
    flat = jnp.reshape(u, (*prefix, -1))
    return jnp.pad(flat, [(0, 0)] * len(prefix) + [(0, shape[-1] - flat.shape[-1])])


def split_row(row, shape):
    """`(u, rest)`: the coordinates of shape `shape` one occurrence reads from `row` (`pad_row`'s
    inverse: along `row`'s last axis, after its leading axes), and the coordinates it leaves
    unread (`None` when it reads the whole row)."""
    if row.shape == tuple(shape):
        return row, None
    prefix = row.shape[:-1]
    size = math.prod(shape[len(prefix):])
    return row[..., :size].reshape(shape), row[..., size:]
