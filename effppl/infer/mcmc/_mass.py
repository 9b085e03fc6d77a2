"""NumPyro's mass-matrix options on effppl's flat position vector: `dense_mass` as a list of site
groups (block-structured: a dense block per group, a diagonal for the other sites) and an
initial or fixed `inverse_mass_matrix` (one array over every latent site, or a dict site group
-> array).

The position vector is `ravel_pytree` of the dict of latent sites, so the sites sit in sorted
order, as in NumPyro. A block-structured matrix is estimated as a dense one with the entries
between different groups (and between ungrouped sites) set to zero after each slow window:
Stan's regularised covariance is elementwise, so each block equals the regularised covariance
of its group's coordinates alone, which is what NumPyro estimates per block.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from ..._errors import EffpplError

__all__ = ["MassSettingsError", "MassBlocks", "normalize_dense_mass", "normalize_inverse_mass_matrix",
           "structure", "numpyro_blocks", "block_views"]


class MassSettingsError(EffpplError, ValueError):
    """A `dense_mass` or `inverse_mass_matrix` that does not fit the model's latent sites."""


def normalize_dense_mass(api: str, dense_mass) -> bool | tuple:
    """`dense_mass` as a bool, or a tuple of tuples of site names (NumPyro's list of groups).

    **Raises:** `TypeError` naming the argument for anything else."""
    if isinstance(dense_mass, bool):
        return dense_mass
    if isinstance(dense_mass, (list, tuple)) and all(
            isinstance(g, (list, tuple)) and g and all(isinstance(n, str) for n in g)
            for g in dense_mass):
        return tuple(tuple(g) for g in dense_mass)
    raise TypeError(f"effppl.infer.{api}(dense_mass={dense_mass!r:.80}) expected a bool or a list "
                    f"of tuples of latent site names (NumPyro's block structure, e.g. "
                    f"[('x', 'y'), ('z',)]).")


def normalize_inverse_mass_matrix(api: str, imm) -> Any:
    """`inverse_mass_matrix` as None, a numpy array (every latent site, sorted by name), or a
    tuple of `(site group, numpy array)` pairs (hashable settings).

    **Raises:** `TypeError` naming the argument for anything else."""
    if imm is None:
        return None
    if isinstance(imm, dict):
        pairs = []
        for key, value in imm.items():
            group = (key,) if isinstance(key, str) else key
            if not (isinstance(group, tuple) and group and all(isinstance(n, str) for n in group)):
                raise TypeError(f"effppl.infer.{api}(inverse_mass_matrix=...): key {key!r} is "
                                f"not a tuple of latent site names.")
            pairs.append((group, np.asarray(value, dtype=float)))
        return tuple(sorted(pairs, key=lambda p: p[0]))
    array = np.asarray(imm, dtype=float)
    if array.ndim not in (1, 2):
        raise TypeError(f"effppl.infer.{api}(inverse_mass_matrix=...) expected a vector, a "
                        f"square matrix or a dict site group -> array, but got an array of "
                        f"shape {array.shape}.")
    return array


def settings_key(imm) -> Any:
    """A hashable form of a normalized `inverse_mass_matrix` (for the program cache's key)."""
    if imm is None:
        return None
    if isinstance(imm, np.ndarray):
        return (imm.shape, tuple(imm.ravel().tolist()))
    return tuple((g, a.shape, tuple(a.ravel().tolist())) for g, a in imm)


def _offsets(sizes: dict) -> dict:
    """{site: (start, stop)} in the flat position vector (sites sorted by name)."""
    out, start = {}, 0
    for name in sorted(sizes):
        out[name] = (start, start + sizes[name])
        start += sizes[name]
    return out


def _indices(api, group, offsets):
    unknown = [n for n in group if n not in offsets]
    if unknown:
        raise MassSettingsError(f"effppl.infer.{api}: the mass-matrix group {group} names "
                                f"{unknown}, which are not latent sites of the model; those are "
                                f"{sorted(offsets)}.")
    return np.concatenate([np.arange(*offsets[n]) for n in group])


def structure(api: str, sizes: dict, dense_mass, imm, dtype) -> tuple:
    """`(mask, initial)` for latent sites of flat sizes `sizes`: `mask` the 0/1 matrix of the
    entries a block-structured `dense_mass` estimates (None unless it is a list of groups),
    `initial` the initial inverse mass matrix (None: the identity), a vector when the matrix is
    diagonal, else a square matrix.

    **Raises:** `MassSettingsError` for a group naming no latent site, or an array whose shape
    does not fit its sites."""
    offsets = _offsets(sizes)
    total = sum(sizes.values())
    dense = dense_mass is True or isinstance(dense_mass, tuple)
    mask = None
    if isinstance(dense_mass, tuple):
        mask = np.eye(total, dtype=dtype)
        for group in dense_mass:
            idx = _indices(api, group, offsets)
            mask[np.ix_(idx, idx)] = 1.0
    if imm is None:
        return mask, None
    initial = np.eye(total, dtype=dtype) if dense else np.ones(total, dtype=dtype)
    blocks = [(tuple(sorted(offsets)), imm)] if isinstance(imm, np.ndarray) else imm
    for group, value in blocks:
        idx = _indices(api, group, offsets)
        n = len(idx)
        if value.shape == (n,):
            block = np.diag(value) if dense else value
        elif value.shape == (n, n) and dense:
            block = value
        else:
            want = f"({n},) or ({n}, {n})" if dense else f"({n},) (dense_mass is False)"
            raise MassSettingsError(f"effppl.infer.{api}(inverse_mass_matrix=...): the array for "
                                    f"{group} has shape {value.shape}, where {want} fits those "
                                    f"sites' {n} unconstrained coordinates.")
        if dense:
            initial[np.ix_(idx, idx)] = block
        else:
            initial[idx] = block
    return mask, initial


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class MassBlocks:
    """NumPyro's block structure of a mass matrix, a static pytree node (no leaves) that rides
    in `MCMCState`: `blocks`, a tuple of `(site group, dense)` in NumPyro's order: the
    `dense_mass` groups (dense), then the other groups of a given `inverse_mass_matrix` dict
    (diagonal), then the remaining sites, sorted (diagonal). `flat`: NumPyro shows the matrix
    over the flat position whole, not keyed by blocks (its `BarkerMH`)."""

    blocks: tuple
    flat: bool = False


def numpyro_blocks(sites, dense_mass, imm, flat: bool = False) -> MassBlocks:
    """The `MassBlocks` NumPyro's `_initialize_mass_matrix` builds for latent `sites` from a
    normalized `dense_mass` (bool or groups) and `inverse_mass_matrix` (None, an array, or
    `(group, array)` pairs); a bool `dense_mass` is NumPyro's `[sorted sites]` or `[]`. Where
    NumPyro refuses a given group that overlaps a dense one, effppl has written it into that
    dense block, and the view shows it there. `flat`: `MassBlocks.flat`."""
    every = tuple(sorted(sites))
    groups = [every] if dense_mass is True else list(dense_mass or ())
    given = [] if imm is None else [every] if isinstance(imm, np.ndarray) else [g for g, _ in imm]
    blocks = [(tuple(g), True) for g in groups]
    covered = {name for group in groups for name in group}
    for group in given:  # (a given group inside a dense one is a part of that block)
        if not covered & set(group):
            blocks.append((tuple(group), False))
            covered |= set(group)
    rest = tuple(n for n in every if n not in covered)
    if rest:
        blocks.append((rest, False))
    return MassBlocks(tuple(blocks), flat)


def block_views(blocks: MassBlocks, sizes: dict, imm, lead: int) -> dict:
    """NumPyro's dict `group -> block` of a flat inverse mass matrix `imm` after `lead` leading
    (chain) axes (`[..., d]`: diagonal, `[..., d, d]`: dense; leading axes kept) over sites of
    flat sizes `sizes`: a dense group's square block in the group's own site order, a diagonal
    group's vector."""
    import jax.numpy as jnp

    offsets = _offsets(sizes)
    is_dense = jnp.ndim(imm) - lead == 2
    out = {}
    for group, dense in blocks.blocks:
        idx = _indices("MCMC.last_state.adapt_state", group, offsets)
        if is_dense:
            block = imm[..., idx[:, None], idx[None, :]]
            out[group] = block if dense else jnp.diagonal(block, axis1=-2, axis2=-1)
        else:
            vec = imm[..., idx]
            out[group] = vec[..., :, None] * jnp.eye(len(idx), dtype=vec.dtype) if dense else vec
    return out
