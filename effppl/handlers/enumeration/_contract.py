"""Sum out enumerated sites: the log joint of an enumerated trace by tensor variable elimination
(Obermeyer et al., "Tensor Variable Elimination for Plated Factor Graphs", ICML 2019), with
funsor's `sum_product` (the contraction library NumPyro's enumeration uses)."""

from __future__ import annotations

from collections import OrderedDict

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ...primitives import SiteError


def _funsor():
    """funsor on JAX, imported when first needed (its backend is set then)."""
    import funsor
    import funsor.optimizer  # noqa: F401  (`funsor.optimizer.apply_optimizer` below)

    if funsor.get_backend() != "jax":
        funsor.set_backend("jax")
    return funsor


def _named(lp, enum_dims, frames):
    """`(array, inputs)`: `lp` with its dims named (enumerated sites' and plates'), the
    others summed out (batch dims no plate declares, independent) or squeezed (size 1)."""
    plates = {frame.dim: frame.name for frame in frames}
    keep, names, drop = [], [], []
    for axis in range(lp.ndim):
        dim = axis - lp.ndim
        if lp.shape[axis] == 1:
            drop.append(axis)
        elif dim in enum_dims:
            keep.append(axis)
            names.append(enum_dims[dim])
        elif dim in plates:
            keep.append(axis)
            names.append(plates[dim])
        else:
            drop.append(axis)
    lp = jnp.sum(lp, axis=tuple(drop)) if drop else lp
    return lp, names


def _site_dims(tr):
    """`{site: {dim: variable}}`: the enumerated sites' variables each site's `log_prob` may
    hold by dim. A dim given out at the model's top level holds one site everywhere; a dim given
    out inside `markov` frames holds, at each site there, the site its `_markov_dims` names."""
    top, recycled = {}, {}
    for name, site in tr.items():
        infer = site.get("infer", {})
        dim = infer.get("_enumerate_dim")
        if site["type"] == "sample" and dim is not None:
            if (dim, name) in infer.get("_markov_dims", ()):
                recycled[dim] = name
            else:
                top[dim] = f"_enum_{name}"
    out = {}
    for name, site in tr.items():
        if site["type"] == "sample":
            local = {dim: f"_enum_{n}" for dim, n in site.get("infer", {}).get("_markov_dims", ())}
            out[name] = {**top, **local}
            stale = {dim: n for dim, n in recycled.items() if dim not in out[name]}
            out[name].update((dim, ("stale", n)) for dim, n in stale.items())
    return out


def _no_stale(name, lp, dims):
    """Raise if the `log_prob` of site `name` holds a recycled dim whose site it cannot see."""
    for axis, size in enumerate(lp.shape):
        held = dims.get(axis - lp.ndim)
        if size != 1 and isinstance(held, tuple):
            raise SiteError(
                f"Site `{name}` depends on an enumerated value (dim {axis - lp.ndim}, given "
                f"inside `markov` to sites such as `{held[1]}`) from a `markov` frame it cannot "
                f"see: the value of a step is usable in that step and the `history` steps after "
                f"it only, not after the loop. Use the value inside the loop, or raise "
                f"`history`.")


def _factors(tr, loops, scale_outside=False):
    """`(total, factors, variables, plates, own, scale)`: the sum of the factors without
    enumerated dims, the others as funsor Tensors, the enumerated sites' variable names, the
    plates' names, each enumerated site's own factor, and (with `scale_outside`) the scale of
    the factors with enumerated dims, left out of them (else None: every factor is scaled)."""
    site_dims = _site_dims(tr)
    total, factors, plates, own, scale, variables = 0.0, [], set(), {}, None, set()
    scaled: dict = {}  # site with enumerated dims -> its scale
    for name, site in tr.items():
        if site["type"] != "sample":
            continue
        enum_dims = site_dims[name]
        lp, site_scale = site["log_prob"], site.get("scale")
        _no_stale(name, lp, enum_dims)
        if scale_outside and any(
                size != 1 and axis - lp.ndim in enum_dims for axis, size in enumerate(lp.shape)):
            scaled[name] = site_scale
            if site_scale is not None:
                scale = jnp.ravel(jnp.asarray(site_scale))[0] if scale is None else scale
        elif site_scale is not None:
            lp = lp * site_scale
        if loops.get(name):
            lp = jnp.sum(lp, axis=tuple(range(loops[name])))
        lp, names = _named(lp, enum_dims, site["cond_indep_stack"])
        enumerated = {n for n in names if n in enum_dims.values()}
        if not enumerated:
            total = total + jnp.sum(lp)  # no enumerated site in it: a plain sum over its plates
            continue
        funsor = _funsor()
        inputs = OrderedDict((n, funsor.Bint[size]) for n, size in zip(names, lp.shape))
        factors.append(funsor.Tensor(lp, inputs))
        variables |= enumerated
        plates |= set(names) - enumerated
        if f"_enum_{name}" in enumerated:
            own[name] = factors[-1]
    check_common_scale(scaled)
    return total, factors, variables, plates, own, scale


def check_common_scale(scales: dict) -> None:
    """`SiteError` when the sites with enumerated dims, `{name: scale or None}`, have scales
    known while tracing (not traced values) that differ (None counts as 1): their contraction is
    scaled once, by a common scale (NumPyro's `TraceEnum_ELBO` raises the same way). Scales that
    are traced values are not checked."""
    values = {}
    for name, value in scales.items():
        if isinstance(value, jax.core.Tracer):
            return
        values[name] = np.unique(np.asarray(1.0 if value is None else value, dtype=float))
    distinct = {float(v) for vs in values.values() for v in vs}
    if len(distinct) > 1:
        shown = ", ".join(f"`{n}`: {', '.join(f'{float(v):g}' for v in vs)}"
                          for n, vs in values.items())
        raise SiteError(f"Expected all enumerated sample sites to share a common scale: "
                        f"enumerated sites and the sites depending on them must share one scale "
                        f"(`handlers.scale`, a subsampled plate's N / B), but found "
                        f"{len(distinct)} different scales ({shown}): their sum over the "
                        f"enumerated values is scaled once. Apply the same scale to all of them "
                        f"(as NumPyro requires).")


def log_joint(tr, loops, scale_outside=False) -> ArrayLike:
    """The log joint of the enumerated trace `tr` (`effppl.handlers.trace`'s dict: `log_prob`
    times `scale`) with its enumerated sites summed out, in log space.

    **Arguments:** `tr`: the trace; `loops`: dict site -> number of leading loop axes of its
    stacked `log_prob` (summed first: no enumerated site sits in such a loop here).

    `scale_outside`: the sites with enumerated dims share one scale (a subsampled plate's
    `size / subsample_size`, the first such site's), which multiplies their sum-product (as
    NumPyro's `TraceEnum_ELBO`); else each factor is scaled before the sum (as NumPyro's
    `log_density`).

    **Returns:** a scalar.
    """
    total, factors, variables, plates, _, scale = _factors(tr, loops, scale_outside)
    if not factors:
        return total
    funsor = _funsor()
    eliminate = frozenset(variables) | frozenset(plates)
    with funsor.interpretations.normalize:  # then contracted by opt_einsum, as NumPyro's
        marginal = funsor.sum_product.sum_product(funsor.ops.logaddexp, funsor.ops.add, factors,
                                                  eliminate=eliminate, plates=frozenset(plates))
    marginal = funsor.optimizer.apply_optimizer(marginal)
    data = marginal.data  # pyright: ignore[reportAttributeAccessIssue]  (a funsor Tensor)
    return total + (data if scale is None else scale * data)


def sample(tr, loops, temperature, rng_key) -> dict:
    """Values of the enumerated sites of the trace `tr` drawn from their exact conditional given
    the rest (temperature 1) or their most likely joint assignment (temperature 0), by funsor's
    adjoint of the sum-product (as NumPyro's `infer_discrete`).

    **Returns:** dict site -> value, its enumerated dim gone and its plate dims where the site's
    batch shape has them (a site in a plate at dim -1 of size N: shape `(N,)`).
    """
    funsor = _funsor()
    _, factors, variables, plates, own, _ = _factors(tr, loops)
    if not factors:
        return {}
    if temperature == 0:
        sum_op, approx = funsor.ops.max, funsor.approximations.argmax_approximate
    else:
        sum_op, approx = funsor.ops.logaddexp, funsor.montecarlo.MonteCarlo(rng_key=rng_key)
    eliminate = frozenset(variables) | frozenset(plates)
    with funsor.interpretations.lazy:
        log_z = funsor.sum_product.sum_product(sum_op, funsor.ops.add, factors,
                                               eliminate=eliminate, plates=frozenset(plates))
    with approx:
        marginals = funsor.adjoint.adjoint(sum_op, funsor.ops.add, log_z)
    out = {}
    for name, factor in own.items():
        value = _delta_value(funsor, marginals[factor], f"_enum_{name}")
        frames = {frame.name: frame.dim for frame in tr[name]["cond_indep_stack"]}
        out[name] = funsor.to_data(value, name_to_dim=frames)
    return out


def _delta_value(funsor, term, name):
    """The point a (lazy) funsor term of Deltas puts on the variable `name`."""
    if isinstance(term, funsor.delta.Delta):
        return dict(term.terms)[name][0]
    deltas = [t for t in term.terms if isinstance(t, funsor.delta.Delta) and name in t.fresh]
    return _delta_value(funsor, deltas[0], name)
