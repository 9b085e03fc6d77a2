"""Independent chains in an enumerated scan: the plates of the scan's enumerated sites.

An enumerated site inside a `lax.scan` may sit in plates (inside the body, or around the scan):
its batch shape then holds one independent chain per element (a batch of HMMs). The forward
algorithm runs for every chain at once: the body is evaluated with *every* element of the
enumerated sites at the same state, and each site's `log_prob` is reduced onto the *chain shape*
(its dims of the enumerated sites' plates kept, the others summed), so entry `n` holds chain n's
terms alone (plates declare that elements do not interact). A site that depends on the
enumerated sites must therefore sit in all their plates.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from ...primitives import SiteError


@dataclasses.dataclass(frozen=True)
class Chains:
    """The chain shape of an enumerated scan (the plates' sizes at their dims, right-aligned, 1
    elsewhere) and its plates, dim (negative) -> plate name."""

    shape: tuple
    plates: dict

    @property
    def size(self):
        return math.prod(self.shape)


def _site(eqn):
    """`(name, fn, {plate name: dim})` of a perform equation, from its avals."""
    static = dict(eqn.params["static"])
    msg = jax.tree_util.tree_unflatten(eqn.params["in_tree"],
                                       [getattr(v, "aval", None) for v in eqn.invars])[0]
    frames = {frame.name: frame.dim for frame in static.get("cond_indep_stack", ())}
    return static.get("name"), msg.fn, frames


def chains_of(body, enum_eqns) -> Chains:
    """The chain shape shared by the enumerated sites `enum_eqns` of the scan body `body`.

    **Raises:** `SiteError` naming the site when a batch dim of an enumerated site is declared by
    no plate, or when two enumerated sites of one scan sit in different plates."""
    found = None
    for index in enum_eqns:
        name, fn, frames = _site(body.eqns[index])
        batch = tuple(fn.batch_shape)
        by_dim = {dim: plate for plate, dim in frames.items()}
        loose = [d for d in range(-len(batch), 0) if batch[d] > 1 and d not in by_dim]
        if loose:
            raise SiteError(
                f"effppl.handlers.enum: site `{name}` is enumerated inside a `lax.scan` with batch "
                f"shape {batch}, whose dim {loose[0]} is declared by no `plate`: declare it with "
                f"`effppl.plate(..., dim={loose[0]})` so that its chains are independent (a "
                f"`jax.vmap` around the scan does not declare it: use a plate).")
        plates = {d: by_dim[d] for d in range(-len(batch), 0) if batch[d] > 1}
        width = max((-d for d in plates), default=0)
        chains = Chains(batch[len(batch) - width:], plates)
        if found is not None and chains != found[1]:
            raise SiteError(
                f"effppl.handlers.enum: sites `{found[0]}` and `{name}` are enumerated in one "
                f"`lax.scan` with different batch shapes ({found[1].shape} and {chains.shape}); "
                f"enumerated sites of one scan must sit in the same plates.")
        found = (name, chains)
    if found is None:
        raise SiteError("effppl.handlers.enum: a scan rewritten by the forward algorithm has no "
                        "enumerated site (an internal error: please report it).")
    return found[1]


def reducer(eqn, chains: Chains, enumerated: str):
    """A function taking the `log_prob` of the site performed by `eqn` (which depends on the
    enumerated site `enumerated`) to the chain shape: its dims of the chains' plates kept, the
    others summed.

    **Raises:** `SiteError` naming the site when it is outside one of the chains' plates (it
    would couple the chains)."""
    name, fn, frames = _site(eqn)
    missing = [plate for dim, plate in chains.plates.items() if frames.get(plate) != dim]
    if missing:
        raise SiteError(
            f"effppl.handlers.enum: site `{name}` depends on the enumerated site `{enumerated}` "
            f"inside a `lax.scan`, but is not inside plate `{missing[0]}` as `{enumerated}` is: "
            f"the independent chains would interact. Put `{name}` inside it.")
    batch = tuple(fn.batch_shape)
    width = len(chains.shape)

    def reduce(lp):
        lp = jnp.broadcast_to(lp, jnp.broadcast_shapes(jnp.shape(lp), batch))
        drop = tuple(axis for axis in range(lp.ndim) if axis - lp.ndim not in chains.plates)
        kept = jnp.sum(lp, axis=drop, keepdims=True)
        return kept.reshape(kept.shape[kept.ndim - width:]) if width else jnp.sum(kept)

    return reduce
