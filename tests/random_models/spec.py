"""The description of a random model: statements, expressions and distribution families.

A model is a tuple of statements run in order. Sites (`Sample`, `Deterministic`, `Factor`) sit
in `Plate`s, plain `lax.scan`s (`Scan`), `lax.cond`/`lax.switch` branches (`Cond`), `jax.vmap`s
(`Vmap`) and handlers (`Handle`: mask, scale, condition, substitute, block, do), nested any way
the generator allows. Distribution parameters are small expressions (`Expr`) of the values
computed before them (`Var`): earlier sites (`tanh(mean(value))`), a scan's carry and its `xs`,
a vmap's mapped feature, a plate's position vector.

Nothing here imports effppl: the description is read by two interpreters, `build` (the effppl
model, and the NumPyro model where NumPyro can express it) and `evaluator` (the independent
eager evaluator).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import distributions as dist
from numpyro.distributions.transforms import OrderedTransform

# ---- expressions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Var:
    """A value computed before the expression, by `kind` (`VARS`): `ref`, `tanh(mean(v))` of the
    latest value `v` of the site, deterministic, scan (its final carry), cond (its branch's
    result) or vmap (the mean of its elements' results) named `name`; `carry`/`xs`, scan
    `name`'s carry/`xs` element; `vmapx`, vmap `name`'s feature; `plate`, `linspace(-1, 1,
    size)` along plate `name`'s dim."""
    kind: str
    name: str


@dataclass(frozen=True)
class Add:
    a: object
    b: object


@dataclass(frozen=True)
class Mul:
    c: float
    a: object


@dataclass(frozen=True)
class Tanh:
    a: object


# ---- statements ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    name: str
    family: str
    params: tuple
    observed: bool = False


@dataclass(frozen=True)
class Deterministic:
    name: str
    expr: object


@dataclass(frozen=True)
class Factor:
    name: str
    expr: object


@dataclass(frozen=True)
class Plate:
    name: str
    size: int
    dim: int | None
    body: tuple


@dataclass(frozen=True)
class Scan:
    """`lax.scan` of `length` steps; the carry starts at `init` and moves to `0.5 * c + 0.5 *
    tanh(mean(v))`, `v` the value of `carry_from` (a site of the body's top level), or to `0.8 *
    c + 0.2 * x_t` without one."""
    name: str
    length: int
    reverse: bool
    init: object
    carry_from: str | None
    body: tuple


@dataclass(frozen=True)
class Cond:
    """`lax.cond` (two branches: the second when `pred > 0`) or `lax.switch` (three: branch
    `clip(floor(1.5 * pred + 1.5), 0, 2)`); the cond's value is its branch's result,
    `tanh(mean(v))` of its last site `v` (0 without one)."""
    name: str
    pred: object
    branches: tuple


@dataclass(frozen=True)
class Vmap:
    """`jax.vmap` over `size` elements, each with its feature (`Var("vmapx", name)`: `0.3 * b -
    0.2`) and its slices of the data and handler values inside."""
    name: str
    size: int
    body: tuple


@dataclass(frozen=True)
class Handle:
    """A handler around `body`: `mask` (payload: True/False, or a plate name: mask `v > -0.3`,
    `v` the plate's `Var("plate", name)`), `scale` (a float, or a plate name: `0.5 + v ** 2`),
    `condition`/`substitute`/`do` (payload: the names of latent sites inside whose values it
    gives), `block` (the names it hides)."""
    name: str
    kind: str
    body: tuple
    payload: Any


MODEL_KINDS = (Sample, Deterministic, Factor, Plate, Scan, Cond, Vmap, Handle)


# ---- families -----------------------------------------------------------------------------------


def _sp(x):
    return jax.nn.softplus(x)


def _vec(p, offsets):
    p = jnp.asarray(p)
    return p[..., None] + jnp.asarray(offsets, p.dtype)


def _low(p):
    """A bound for an event axis: `p` itself when a scalar (under `vmap`, one element's), so a
    scalar bound meets a vector one; a column of a plate's vector."""
    return p if jnp.ndim(p) == 0 else jnp.asarray(p)[..., None]


@dataclass(frozen=True)
class Family:
    name: str
    num_params: int
    support: str          # support class: real, positive, unit, interval, simplex, ordered, ...
    event_shape: tuple
    make: Callable        # params (arrays) -> numpyro distribution
    latent: bool = True   # may be a latent site (continuous support)
    observable: bool = True
    default: object = 0.5  # a value in the support whatever the parameters (unvisited data)


FAMILIES = {f.name: f for f in [
    Family("Normal", 2, "real", (), lambda a, b: dist.Normal(a, _sp(b) + 0.3)),
    Family("StudentT", 2, "real", (), lambda a, b: dist.StudentT(4.0, a, _sp(b) + 0.3)),
    Family("HalfNormal", 1, "positive", (), lambda a: dist.HalfNormal(_sp(a) + 0.3)),
    Family("LogNormal", 2, "positive", (), lambda a, b: dist.LogNormal(0.5 * a, 0.5 * _sp(b) + 0.2)),
    Family("Gamma", 2, "positive", (), lambda a, b: dist.Gamma(_sp(a) + 1.0, _sp(b) + 0.3)),
    Family("Exponential", 1, "positive", (), lambda a: dist.Exponential(_sp(a) + 0.3)),
    Family("Beta", 2, "unit", (), lambda a, b: dist.Beta(_sp(a) + 0.5, _sp(b) + 0.5)),
    Family("Uniform", 2, "interval", (),
           lambda a, b: dist.Uniform(a, a + _sp(b) + 0.5), observable=False),
    Family("Dirichlet3", 1, "simplex", (3,),
           lambda a: dist.Dirichlet(_vec(_sp(a) + 0.5, [0.0, 0.5, 1.0])),
           default=np.array([0.2, 0.3, 0.5])),
    Family("Ordered3", 2, "ordered", (3,),
           lambda a, b: dist.TransformedDistribution(
               dist.Normal(_vec(a, [-1.0, 0.0, 1.0]), _vec(_sp(b) + 0.3, [0.0, 0.0, 0.0]))
               .to_event(1), OrderedTransform()),
           default=np.array([-1.0, 0.0, 1.0])),
    Family("NormalVec3", 2, "real", (3,),
           lambda a, b: dist.Normal(_vec(a, [0.0, 0.5, -0.5]),
                                    _vec(_sp(b) + 0.3, [0.0, 0.1, 0.2])).to_event(1),
           default=np.array([0.5, 0.5, 0.5])),
    Family("LogNormalVec2", 2, "positive", (2,),
           lambda a, b: dist.LogNormal(_vec(0.5 * a, [0.0, 0.3]),
                                       _vec(0.5 * _sp(b) + 0.2, [0.0, 0.1])).to_event(1),
           default=np.array([0.5, 0.5])),
    Family("UniformVec2", 2, "interval", (2,),  # a scalar low beside a vector high
           lambda a, b: dist.Uniform(_low(a), _vec(a + _sp(b) + 0.5, [0.0, 0.5])).to_event(1),
           observable=False),
    Family("LKJ2", 1, "corr_cholesky", (2, 2),
           lambda a: dist.LKJCholesky(2, _sp(a) + 0.5), observable=False),
    Family("Poisson", 1, "count", (), lambda a: dist.Poisson(_sp(a) + 0.2), latent=False,
           default=1),
    Family("Bernoulli", 1, "boolean", (), lambda a: dist.Bernoulli(probs=jax.nn.sigmoid(a)),
           latent=False, default=1),
]}

# families whose values have the same shape, so that `cond` branches may share a site name
SHAPE_GROUPS = {}
for _f in FAMILIES.values():
    SHAPE_GROUPS.setdefault(_f.event_shape, []).append(_f.name)

# observed sites in different branches share a support class (their data must fit both)
OBSERVED_SUPPORT = {"real": ("Normal", "StudentT"),
                    "positive": ("HalfNormal", "LogNormal", "Gamma", "Exponential"),
                    "unit": ("Beta",), "simplex": ("Dirichlet3",), "ordered": ("Ordered3",),
                    "real3": ("NormalVec3",), "positive2": ("LogNormalVec2",),
                    "count": ("Poisson",), "boolean": ("Bernoulli",)}


def support_class(family: str) -> str:
    """The key of `OBSERVED_SUPPORT` holding `family`."""
    for key, names in OBSERVED_SUPPORT.items():
        if family in names:
            return key
    raise KeyError(family)


def make_dist(family: str, params):
    return FAMILIES[family].make(*params)


# ---- evaluating expressions ---------------------------------------------------------------------


@dataclass
class Scope:
    """What expressions read: `refs` (name -> value), `carries`/`xs` (scan -> scalar),
    `vmapx` (vmap -> scalar), `plates` (name -> (size, dim)); `frames`: the plates around."""
    refs: dict = dataclasses.field(default_factory=dict)
    carries: dict = dataclasses.field(default_factory=dict)
    xs: dict = dataclasses.field(default_factory=dict)
    vmapx: dict = dataclasses.field(default_factory=dict)
    plates: dict = dataclasses.field(default_factory=dict)

    def child(self, **changes):
        new = Scope(dict(self.refs), dict(self.carries), dict(self.xs), dict(self.vmapx),
                    dict(self.plates))
        for key, value in changes.items():
            getattr(new, key).update(value)
        return new


def summary(value):
    return jnp.tanh(jnp.mean(jnp.asarray(value, jnp.float64)))


def plate_vector(size, dim):
    return jnp.linspace(-1.0, 1.0, size).reshape((size,) + (1,) * (-dim - 1))


# what a `Var` of each kind reads in a `Scope`
VARS = {
    "ref": lambda scope, name: summary(scope.refs[name]),
    "carry": lambda scope, name: scope.carries[name],
    "xs": lambda scope, name: scope.xs[name],
    "vmapx": lambda scope, name: scope.vmapx[name],
    "plate": lambda scope, name: plate_vector(*scope.plates[name]),
}


def evaluate(expr, scope: Scope):
    """The value of `expr` in `scope` (an array)."""
    if isinstance(expr, Const):
        return jnp.asarray(expr.value, jnp.float64)
    if isinstance(expr, Var):
        return VARS[expr.kind](scope, expr.name)
    if isinstance(expr, Add):
        return evaluate(expr.a, scope) + evaluate(expr.b, scope)
    if isinstance(expr, Mul):
        return expr.c * evaluate(expr.a, scope)
    if isinstance(expr, Tanh):
        return jnp.tanh(evaluate(expr.a, scope))
    raise TypeError(expr)


def branch_index(pred, num_branches):
    """The branch a `Cond` takes at predicate value `pred`: a scalar, or the sum of a plate
    vector's elements (a predicate may read a carry or a site that holds a plate vector)."""
    pred = jnp.sum(pred)
    if num_branches == 2:
        return (pred > 0).astype(jnp.int32)
    return jnp.clip(jnp.floor(1.5 * pred + 1.5), 0, num_branches - 1).astype(jnp.int32)


def xs_feature(length):
    return jnp.sin(0.7 * jnp.arange(length) + 0.3 * length)


def vmap_feature(size):
    return 0.3 * jnp.arange(size) - 0.2


def mask_of(payload, scope: Scope):
    if isinstance(payload, bool):
        return jnp.asarray(payload)
    return plate_vector(*scope.plates[payload]) > -0.3


def scale_of(payload, scope: Scope):
    if isinstance(payload, float):
        return jnp.asarray(payload, jnp.float64)
    return 0.5 + plate_vector(*scope.plates[payload]) ** 2


def last_value_name(body):
    """The name whose value a cond branch returns (its last top-level sample or deterministic
    site), or None."""
    for stmt in reversed(body):
        if isinstance(stmt, (Sample, Deterministic)):
            return stmt.name
    return None


# ---- printing -----------------------------------------------------------------------------------


def show_expr(e) -> str:
    if isinstance(e, Const):
        return f"{e.value:g}"
    if isinstance(e, Var):
        return f"{e.kind}({e.name})"
    if isinstance(e, Add):
        return f"({show_expr(e.a)} + {show_expr(e.b)})"
    if isinstance(e, Mul):
        return f"{e.c:g}*{show_expr(e.a)}"
    if isinstance(e, Tanh):
        return f"tanh({show_expr(e.a)})"
    return repr(e)


def show(body, indent=0) -> str:
    """The description as indented text (for failure reports)."""
    pad, lines = "  " * indent, []
    for s in body:
        if isinstance(s, Sample):
            ps = ", ".join(show_expr(p) for p in s.params)
            lines.append(f"{pad}{s.name} ~ {s.family}({ps}){' [obs]' if s.observed else ''}")
        elif isinstance(s, Deterministic):
            lines.append(f"{pad}{s.name} = det({show_expr(s.expr)})")
        elif isinstance(s, Factor):
            lines.append(f"{pad}factor {s.name}({show_expr(s.expr)})")
        elif isinstance(s, Plate):
            lines.append(f"{pad}plate {s.name}(size={s.size}, dim={s.dim}):")
            lines.append(show(s.body, indent + 1))
        elif isinstance(s, Scan):
            lines.append(f"{pad}scan {s.name}(T={s.length}, reverse={s.reverse}, init="
                         f"{show_expr(s.init)}, carry_from={s.carry_from}):")
            lines.append(show(s.body, indent + 1))
        elif isinstance(s, Cond):
            lines.append(f"{pad}cond {s.name}(pred={show_expr(s.pred)}):")
            for i, b in enumerate(s.branches):
                lines.append(f"{pad}  branch {i}:")
                lines.append(show(b, indent + 2) if b else f"{pad}    pass")
        elif isinstance(s, Vmap):
            lines.append(f"{pad}vmap {s.name}(size={s.size}):")
            lines.append(show(s.body, indent + 1))
        elif isinstance(s, Handle):
            lines.append(f"{pad}{s.kind} {s.name}({s.payload!r}):")
            lines.append(show(s.body, indent + 1))
    return "\n".join(line for line in lines if line)
