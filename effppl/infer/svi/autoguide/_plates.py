"""The plates of an autoguide (NumPyro's `create_plates` and `_create_plates`): for a model whose
latent sites sit in a subsampled `effppl.plate(name, size, subsample_size=...)`, the guide's
params are full size along the plate's dim, the guide enters the same plate (drawing the indices
that the model then replays), reads its params' rows at those indices (`param(...,
event_dim=...)` inside the plate), and scales each site's log density by `size /
subsample_size`, as the model's plate scales the model's.
"""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

from numpyro.distributions.util import periodic_repeat

from ....handlers import internal as ppl
from ._errors import AutoGuideError, InconsistentPlateError

__all__ = ["Frame", "site_frames", "subsampled_plates", "check_frames", "create_plates",
           "entered", "full_size", "full_shape", "subsample_scale"]


class Frame(NamedTuple):
    """A plate around a latent site: its name, dim (negative, counted left of the site's event
    dims), full size and subsample size."""

    name: str
    dim: int
    size: int
    subsample_size: int

    @property
    def subsampled(self) -> bool:
        return self.subsample_size < self.size


def site_frames(site, full_sizes: dict) -> tuple:
    """The `Frame`s of the plates around `site` (a `handlers._sites.Site`), innermost first
    (NumPyro's `cond_indep_stack` order); `full_sizes`: `{plate: size}` of the model's
    subsampled plates (others are full size). Branches of a `cond` that sit in different
    plates: none (as traces)."""
    stacks = {dict(k.static).get("cond_indep_stack", ()) for k in site.keys or (site.key,)}
    if len(stacks) != 1:
        return ()
    return tuple(Frame(f.name, f.dim, full_sizes.get(f.name, f.size), f.size)
                 for f in stacks.pop())


def subsampled_plates(analysis: dict) -> dict:
    """`{plate: (full size, created inside a loop)}` of the subsampled plates in a model's site
    analysis."""
    return {name: (site.message.fn
                   .size, bool(site.loops))
            for name, site in analysis.items() if site.type == "plate"}


def check_frames(frames_by_site: dict, guide: str) -> dict:
    """`{plate: Frame}` over the latent sites' frames (`{site: frames}`).

    **Raises:** `InconsistentPlateError` (an `AutoGuideError` and an `AssertionError`, as
    NumPyro's assertion) when one plate has different dims or sizes at two sites."""
    plates = {}
    for site, frames in frames_by_site.items():
        for frame in frames:
            seen = plates.setdefault(frame.name, frame)
            if seen != frame:
                raise InconsistentPlateError(
                    f"effppl.infer.autoguide.{guide}: plate `{frame.name}` has inconsistent dim "
                    f"or size: dim {seen.dim} and sizes {seen.size}/{seen.subsample_size} at one "
                    f"latent site but dim {frame.dim} and sizes {frame.size}/"
                    f"{frame.subsample_size} at site `{site}`.")
    return plates


def create_plates(user_fn, frames: dict, args, kwargs, guide: str) -> dict:
    """`{name: effppl.plate}`: the plates the guide enters. Those `user_fn(*args, **kwargs)`
    returns (a plate, or a list or tuple of plates: NumPyro's `create_plates`) come first, in its
    order; a plate of `frames` (`check_frames`) it leaves out is made `plate(name, size,
    subsample_size, dim)`, in name order (NumPyro's). A user's plate without a `dim` takes the
    model's.

    **Raises:** `AutoGuideError` when `user_fn` returns something else than plates, or a plate
    whose size or subsample size differs from the model's plate of that name."""
    plates = {}
    if user_fn is not None:
        made = user_fn(*args, **kwargs)
        made = [made] if isinstance(made, ppl.plate) else \
            list(made) if isinstance(made, (list, tuple)) else [made]
        for p in made:
            if not isinstance(p, ppl.plate):
                raise AutoGuideError(f"effppl.infer.autoguide.{guide}(model, create_plates=...): "
                                     f"`create_plates(*args, **kwargs)` expected to return an "
                                     f"effppl.plate or a list or tuple of them, but returned "
                                     f"{type(p).__name__} {p!r:.60}.")
            frame = frames.get(p.name)
            if frame is not None and (p.size, p.subsample_size) != (frame.size,
                                                                    frame.subsample_size):
                raise AutoGuideError(
                    f"effppl.infer.autoguide.{guide}: `create_plates` returned plate "
                    f"`{p.name}` of size {p.size}, subsample size {p.subsample_size}, but the "
                    f"model's plate `{p.name}` has size {frame.size}, subsample size "
                    f"{frame.subsample_size}.")
            if frame is not None and p.dim is None:
                p.dim = frame.dim
            plates[p.name] = p
    for name, frame in sorted(frames.items()):
        if name not in plates:
            plates[name] = ppl.plate(name, frame.size, subsample_size=frame.subsample_size,
                                            dim=frame.dim)
    return plates


@contextlib.contextmanager
def entered(plates: dict, frames: tuple):
    """Inside the guide's plates of `frames` (a site's)."""
    with contextlib.ExitStack() as stack:
        for frame in frames:
            stack.enter_context(plates[frame.name])
        yield


def full_size(value, frames: tuple, event_ndim: int):
    """`value` (a site's, with subsample sizes along its plates' dims, `event_ndim` trailing
    event dims) repeated to full size along each subsampled plate's dim, as NumPyro's
    `periodic_repeat` makes the initial values of its params."""
    for frame in frames:
        if frame.subsampled:
            value = periodic_repeat(value, frame.size, frame.dim - event_ndim)
    return value


def full_shape(shape: tuple, frames: tuple, event_ndim: int) -> tuple:
    """The shape `full_size` gives a value of `shape`: each subsampled plate's dim at the plate's
    full size."""
    dims = list(shape)
    for frame in frames:
        if frame.subsampled:
            dims[frame.dim - event_ndim] = frame.size
    return tuple(dims)


def subsample_scale(frames: tuple) -> float | None:
    """The product of `size / subsample_size` over the subsampled `frames`, or None."""
    ratios = [frame.size / frame.subsample_size for frame in frames if frame.subsampled]
    return math.prod(ratios) if ratios else None
