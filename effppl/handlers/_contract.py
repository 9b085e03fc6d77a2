"""Sum out enumerated sites: the log joint of an enumerated trace by tensor variable elimination
(Obermeyer et al., "Tensor Variable Elimination for Plated Factor Graphs", ICML 2019), with
funsor's `sum_product` (the contraction library NumPyro's enumeration uses)."""

from __future__ import annotations

from collections import OrderedDict

import jax.numpy as jnp


def _funsor():
    import funsor

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


def log_joint(tr, loops) -> jnp.ndarray:
    """The log joint of the enumerated trace `tr` (`effppl.handlers.trace`'s dict, with scaled
    `log_prob`s) with its enumerated sites summed out, in log space.

    **Arguments:** `tr`: the trace; `loops`: dict site -> number of leading loop axes of its
    stacked `log_prob` (summed first: no enumerated site sits in such a loop here).

    **Returns:** a scalar.
    """
    enum_dims = {}
    for name, site in tr.items():
        dim = site.get("infer", {}).get("_enumerate_dim")
        if site["type"] == "sample" and dim is not None:
            enum_dims[dim] = f"_enum_{name}"
    total, factors, plates = 0.0, [], set()
    for name, site in tr.items():
        if site["type"] != "sample":
            continue
        lp = site["log_prob"]
        if loops.get(name):
            lp = jnp.sum(lp, axis=tuple(range(loops[name])))
        lp, names = _named(lp, enum_dims, site["cond_indep_stack"])
        if not any(n in enum_dims.values() for n in names):
            total = total + jnp.sum(lp)  # no enumerated site in it: a plain sum over its plates
            continue
        funsor = _funsor()
        inputs = OrderedDict((n, funsor.Bint[size]) for n, size in zip(names, lp.shape))
        factors.append(funsor.Tensor(lp, inputs))
        plates |= set(names) - set(enum_dims.values())
    if not factors:
        return total
    funsor = _funsor()
    eliminate = frozenset(enum_dims.values()) | frozenset(plates)
    marginal = funsor.sum_product.sum_product(funsor.ops.logaddexp, funsor.ops.add, factors,
                                              eliminate=eliminate, plates=frozenset(plates))
    return total + marginal.data
