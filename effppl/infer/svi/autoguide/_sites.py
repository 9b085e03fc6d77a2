"""The model's latent sites as an autoguide sees them: which sites it guides, their unconstrained
stacked shapes, the plates around them, and whether their supports are fixed.

An autoguide reads the model's *site analysis* (the one MCMC uses, `effppl.handlers._sites`):
each latent site with its loops, so a site inside a plain `lax.scan` (nested scans, `cond`
branches, `jax.vmap`) gets stacked guide parameters of shape `(T, ...)` with no special case.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ....handlers.internal import SiteError, is_enumerated, unconstrained_type
from . import _plates as plates_
from ._errors import AutoGuideError

__all__ = ["Latent", "fixed_supports", "latent_sites"]


class Latent(NamedTuple):
    """A latent site of the model as an autoguide sees it."""

    site: object         # handlers._sites.Site
    shape: tuple         # unconstrained shape, stacked over the loops around the site
    dtype: object
    frames: tuple        # the plates around it (`_plates.Frame`), innermost first
    batch_ndim: int      # leading dims that are not event dims: loops, then the batch shape

    @property
    def subsampled(self) -> bool:
        return any(frame.subsampled for frame in self.frames)


def latent_sites(guide: str, analysis: dict, keep=None) -> dict:
    """`{name: Latent}`: the latent sites of the model whose site analysis is `analysis`, each
    with its unconstrained stacked shape and the plates around it. `guide`: the guide's class
    name, for messages; `keep`: None, or the names of the sites to guide (the guide's prototype's
    latent sites: `y=None` for predictions leaves `y`, observed when SVI ran, to the model).

    **Raises:** `AutoGuideError` when there is no latent site; for a discrete latent site, one
    in a `while_loop`, one in a subsampled plate that is created inside a loop, or whose `cond`
    branches have unconstrained values of different shapes; for a plate with two dims or sizes."""
    subsampled = plates_.subsampled_plates(analysis)
    out = {}
    for name, site in analysis.items():
        if site.type != "sample" or site.is_observed:
            continue
        if is_enumerated(dict(site.key.static).get("infer", ())):
            continue  # summed out of the model by `TraceEnum_ELBO`: nothing to guide
        if keep is not None and name not in keep:
            continue
        out[name] = _latent(guide, name, site, subsampled)
    if not out:
        raise AutoGuideError(f"effppl.infer.autoguide.{guide}: the model has no latent sample "
                             f"site to guide.")
    return out


def _latent(guide: str, name, site, subsampled: dict) -> Latent:
    """Latent site `name` (`subsampled`: `plates_.subsampled_plates` of the model)."""
    guide = f"effppl.infer.autoguide.{guide}"
    if not site.bounded:
        raise AutoGuideError(
            f"{guide}: latent site `{name}` sits inside a `while_loop` (no static number of "
            f"occurrences to give guide parameters for). Use `lax.scan`/`fori_loop` with a "
            f"static length.")
    try:
        shape, dtype = unconstrained_type(site)
    except SiteError as err:
        fn = getattr(site.message, "fn", None)
        if getattr(getattr(fn, "support", None), "is_discrete", False):  # NumPyro's words
            raise AutoGuideError(f"{guide}: continuous inference cannot handle discrete sample "
                                 f"site `{name}`. {err}") from None
        raise AutoGuideError(f"{guide} covers continuous latent sites only: {err}") from None
    fn = site.message.fn
    base = fn
    while isinstance(base, (dist.Independent, dist.ExpandedDistribution, dist.MaskedDistribution)):
        base = base.base_dist
    if isinstance(base, dist.Delta):
        raise AutoGuideError(
            f"{guide}: latent site `{name}` has a delta distribution (a point mass): its log "
            f"density is minus infinity off its point, so a guide's continuous draws have none. "
            f"Make it "
            f"`effppl.deterministic({name!r}, value)`, or observe it (`obs=`).")
    shape = tuple(site.loops) + tuple(shape)
    frames = plates_.site_frames(site, {p: size for p, (size, _) in subsampled.items()})
    batch = tuple(site.loops) + tuple(fn.batch_shape)
    latent = Latent(site, shape, dtype, frames, len(batch))
    if not latent.subsampled:
        return latent
    looped = [f.name for f in frames if subsampled.get(f.name, (0, False))[1]]
    if looped:
        raise AutoGuideError(
            f"{guide}: latent site `{name}` sits in the subsampled plate `{looped[0]}`, "
            f"which is created inside a loop, so it draws new indices at every iteration. "
            f"Create the plate once, outside the loop (entering it inside is fine).")
    if shape[:len(batch)] != batch:
        raise AutoGuideError(
            f"{guide}: latent site `{name}` sits in a subsampled plate, and its `cond` "
            f"branches have unconstrained values of different shapes, so its params have no "
            f"plate dim to subsample along. Give it one distribution family.")
    return latent


def fixed_supports(sites) -> dict | None:
    """`{name: support}` when every site's support is a constraint without parameters (so it
    cannot depend on other sites or data), and the site has one distribution and sits in no
    `cond` branch (whose rows may go unread, see `Unconstrain`); else None."""
    out = {}
    for name, latent in sites.items():
        site = latent.site
        if len(site.keys) > 1 or site.conditional:
            return None
        fn = site.message.fn
        try:
            support = fn.support
        except Exception:  # noqa: BLE001 (a support computed from the parameters' values)
            return None
        if not isinstance(support, constraints.Constraint) or jax.tree_util.tree_leaves(support):
            return None
        out[name] = support
    return out
