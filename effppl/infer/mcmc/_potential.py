"""NumPyro's `NUTS(potential_fn=...)` / `HMC(potential_fn=...)`: sampling a user's potential
energy (minus an unnormalised log density of unconstrained values) from `init_params`, with no
model.

effppl's sampler runs models, so the potential becomes one: a model with one improper flat site
per array of `init_params` (real support, the array's shape) and a `factor` of minus the
potential. Its log density is minus the potential exactly (no Jacobian: the sites are real), so
the adaptation and the draws are those of the potential. The draws come back in the structure
of `init_params`, as NumPyro's: a dict of arrays keyed as it was, else the same pytree.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from ...distributions import ImproperUniform, constraints
from ...handlers.internal import factor, sample
from ._results import MCMCError

__all__ = ["PotentialProgram", "potential_program"]


class PotentialProgram:
    """The model of a potential for one structure of `init_params`, and the maps between that
    structure and the model's site dict (`sites_of`, `tree_of`)."""

    def __init__(self, potential_fn: Callable, treedef, names: tuple, shapes: tuple):
        self.treedef, self.names = treedef, names

        def potential(*_):
            values = [sample(name, ImproperUniform(constraints.real, (), shape))
                      for name, shape in zip(names, shapes)]
            factor("_potential_fn", -potential_fn(jax.tree.unflatten(treedef, values)))

        potential.__name__ = getattr(potential_fn, "__name__", "potential_fn")
        self.model = potential

    def sites_of(self, tree) -> dict:
        return dict(zip(self.names, jax.tree.leaves(tree)))

    def tree_of(self, sites: dict):
        return jax.tree.unflatten(self.treedef, [sites[n] for n in self.names])


def potential_program(kernel, init_params, num_chains: int, args, kwargs,
                      api: str) -> PotentialProgram:
    """The `PotentialProgram` of `kernel.potential_fn` for `init_params` (one per potential and
    structure: a later run with the same shapes re-uses its compiled sampler).

    **Raises:** `MCMCError` without `init_params`, with model arguments (a potential takes
    none), or when `init_params` has no leading `num_chains` axis with several chains (as in
    NumPyro)."""
    if init_params is None:
        raise MCMCError(f"`{api}`: a kernel built with `potential_fn` needs `init_params` (the "
                        f"starting point, a pytree of unconstrained arrays), as in NumPyro.")
    if args or kwargs:
        raise MCMCError(f"`{api}`: a kernel built with `potential_fn` takes no model arguments, "
                        f"but got {len(args)} positional and {sorted(kwargs)} keyword ones; "
                        f"close over the data in the potential instead.")
    leaves, treedef = jax.tree.flatten(init_params)
    if not leaves:
        raise MCMCError(f"`{api}`: `init_params` of a `potential_fn` holds no array.")
    shapes = []
    for i, leaf in enumerate(leaves):
        shape = np.shape(leaf)
        if num_chains > 1 and shape[:1] != (num_chains,):
            raise MCMCError(f"`{api}`: with num_chains={num_chains}, each array of `init_params` "
                            f"needs a leading axis of {num_chains} (one start per chain), but "
                            f"array {i} has shape {shape}.")
        shapes.append(shape[1:] if num_chains > 1 else shape)
    flat_dict = isinstance(init_params, dict) and all(
        isinstance(k, str) and not isinstance(v, dict) for k, v in init_params.items())
    names = (tuple(sorted(init_params)) if flat_dict  # (a dict's leaves come sorted)
             else tuple(f"Param:{i}" for i in range(len(leaves))))
    key = (treedef, names, tuple(shapes))
    programs = kernel.__dict__.setdefault("_potential_programs", {})
    if key not in programs:
        programs[key] = PotentialProgram(kernel.potential_fn, treedef, names, tuple(shapes))
    return programs[key]
