"""`AutoGuideList`: a guide made of parts, each guiding some of the model's latent sites
(NumPyro's `AutoGuideList`), e.g. an `AutoNormal` of the model with a site hidden by `block`
beside a hand-written guide of that site."""

from __future__ import annotations

import jax

from ....handlers import internal as ppl
from ._base import AutoGuide
from ._dais import AutoDAIS, AutoSemiDAIS
from ._errors import AutoGuideError

__all__ = ["AutoGuideList"]


class AutoGuideList:
    """A guide whose parts (autoguides or hand-written guides, each a function of the model's
    arguments) together guide the model's latent sites: calling it runs every part and returns
    their sites' values together; `sample_posterior`, `median` and `quantiles` merge the parts'
    (NumPyro's `AutoGuideList`).

    **Arguments:** `model`: the model the parts guide (kept for NumPyro's signature; each part
    reads its own model, typically `block(model, hide=[...])`); `prefix`, `init_loc_fn`,
    `create_plates`: accepted as NumPyro's (its parts have their own).

    **Raises:** `AutoGuideError` when a part is not callable or is an `AutoDAIS` or
    `AutoSemiDAIS` (as NumPyro's), or when a method a part lacks
    (`median` of a hand-written guide) is asked.

    **Example:**

    >>> import effppl
    >>> from effppl import distributions as dist, handlers
    >>> from effppl.infer.autoguide import AutoDelta, AutoGuideList, AutoNormal
    >>> def model():
    ...     effppl.sample("a", dist.Normal(0.0, 1.0))
    ...     effppl.sample("b", dist.Normal(0.0, 1.0))
    >>> guide = AutoGuideList(model)
    >>> guide.append(AutoNormal(handlers.block(model, hide=["b"])))
    >>> guide.append(AutoDelta(handlers.block(model, expose=["b"])))
    >>> sorted(handlers.seed(guide, 0)())
    ['a', 'b']

    **References:** NumPyro's `numpyro.infer.autoguide.AutoGuideList`.
    """

    def __init__(self, model, *, prefix="auto", init_loc_fn=None, create_plates=None,
                 forward_mode_differentiation=False):
        if not callable(model):
            raise AutoGuideError(f"effppl.infer.autoguide.AutoGuideList(model) expected a "
                                 f"callable model, but got {type(model).__name__}.")
        self.model, self.prefix = model, prefix
        self.init_loc_fn, self.create_plates = init_loc_fn, create_plates
        self.forward_mode_differentiation = bool(forward_mode_differentiation)  # (NumPyro's)
        self._guides: list = []
        self.__name__ = "AutoGuideList"

    def append(self, part) -> None:
        """Add a part: an autoguide, or a function of the model's arguments with sample sites."""
        if not callable(part):
            raise AutoGuideError(f"effppl.infer.autoguide.AutoGuideList.append(part) expected a "
                                 f"guide (callable), but got {type(part).__name__}.")
        if isinstance(part, (AutoDAIS, AutoSemiDAIS)):
            raise AutoGuideError(f"effppl.infer.autoguide.AutoGuideList.append: "
                                 f"{type(part).__name__} cannot be a part (as in NumPyro: "
                                 f"AutoDAIS, AutoSemiDAIS, and AutoSurrogateLikelihoodDAIS are "
                                 f"not supported.). Use it as the whole guide, or AutoNormal "
                                 f"or AutoMultivariateNormal as the part.")
        self._guides.append(part)

    def __getitem__(self, index):
        return self._guides[index]

    def __len__(self):
        return len(self._guides)

    def __call__(self, *args, **kwargs) -> dict:
        self._check_parts(args, kwargs)
        result = {}
        for part in self._guides:
            out = part(*args, **kwargs)
            if isinstance(out, dict):
                result.update(out)
        return result

    def _check_parts(self, args, kwargs):
        """`AutoGuideError` for an autoguide part whose model exposes a deterministic site (as
        NumPyro's): the part would compute it from its own sites' draws alone."""
        for i, part in enumerate(self._guides):
            if not isinstance(part, AutoGuide):
                continue
            sites = ppl.analyze_model(part.model, args, kwargs)
            exposed = sorted(n for n, s in sites.items() if s.type == "deterministic")
            if exposed:
                raise AutoGuideError(
                    f"effppl.infer.autoguide.AutoGuideList: deterministic site "
                    f"{', '.join(f'`{n}`' for n in exposed)} of the model of the part at position "
                    f"{i} ({type(part).__name__}) should not be exposed (as in NumPyro): give the "
                    f"part `block(model, hide={exposed!r})`, and get it from "
                    f"`Predictive(model, guide=..., params=...)`.")

    def _setup_prototype(self, *args, **kwargs):
        """Set up each autoguide part at the model's arguments (`SVI.init` calls it)."""
        for part in self._guides:
            setup = getattr(part, "_setup_prototype", None)
            if setup is not None:
                setup(*args, **kwargs)

    def _each(self, api, *call):
        """`{site: value}` merged over the parts' `api(*call)`."""
        result = {}
        for part in self._guides:
            method = getattr(part, api, None)
            if method is None:
                raise AutoGuideError(f"effppl.infer.autoguide.AutoGuideList.{api}: part "
                                     f"{type(part).__name__} has no `{api}` (a hand-written "
                                     f"guide); use `Predictive(model, guide=...)` for draws.")
            result.update(method(*call))
        return result

    def sample_posterior(self, rng_key, params, *args, sample_shape=(), **kwargs) -> dict:
        """Draws of every part's latent sites (each part from its own key), as NumPyro's."""
        keys = jax.random.split(rng_key, max(len(self._guides), 1))
        result = {}
        for part, key in zip(self._guides, keys):
            method = getattr(part, "sample_posterior", None)
            if method is None:
                raise AutoGuideError(f"effppl.infer.autoguide.AutoGuideList.sample_posterior: "
                                     f"part {type(part).__name__} has no `sample_posterior` (a "
                                     f"hand-written guide); use `Predictive(model, guide=...)`.")
            result.update(method(key, params, *args, sample_shape=sample_shape, **kwargs))
        return result

    def median(self, params) -> dict:
        """Every part's posterior median (`median` of each part)."""
        return self._each("median", params)

    def quantiles(self, params, quantiles) -> dict:
        """Every part's marginal quantiles (`quantiles` of each part)."""
        return self._each("quantiles", params, quantiles)
