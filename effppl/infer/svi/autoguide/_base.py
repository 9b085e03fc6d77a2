"""The base of the automatic guides (`effppl.infer.autoguide`): the model's latent sites, and the map from
unconstrained values to the model's supports.

The guide draws each site's unconstrained value `u` and maps it to the support with the model's
own `biject_to(fn.support)`, built from the site's *current* distribution: the guide runs the
model (hidden by `block`) with `u` substituted in unconstrained space, exactly as HMC's potential
does, so supports that depend on other latent sites are right for every draw. Each latent site
of the model is then a `Delta` site of the guide whose log density is the guide's density of the
constrained value (`log q(u) - log|det J(u)|`), as NumPyro's `AutoContinuous` emits them.
When every support is a constraint without parameters (`real`, `positive`, `simplex`, ...) and
no site sits in a `cond` branch, nothing can depend on other sites, and the values are mapped
directly, with no model run inside the guide (`fixed_supports`).

Which sites are latent is `_sites.py`; the first run and initial values,
`_prototype.py`; what the guide gives after fitting, `_postprocess.py`.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions.transforms import biject_to

from .... import handlers
from ....handlers import internal as ppl
from ....handlers.internal import Unconstrain, analyze_model, concrete_arguments, substitute_exactly
from ..._init import init_to_uniform
from . import _plates as plates_
from ._errors import AutoGuideError
from ._postprocess import GuidePostprocess
from ._prototype import in_first_run, init_strategy, initial_locs
from ._sites import fixed_supports, latent_sites

__all__ = ["AutoGuide", "GuideDelta"]


class GuideDelta(dist.Delta):
    """An autoguide's site: a `Delta` at the drawn value, with the guide's log density of it,
    which also keeps the distribution `base` the value was drawn from where the map to the
    support is the identity (else None). `TraceMeanField_ELBO` reads `base` for the analytic KL,
    as NumPyro's `AutoNormal` emits its `Normal` for such sites."""

    pytree_data_fields = ("base",)

    def __init__(self, v=0.0, log_density=0.0, event_dim=0, *, base=None, validate_args=None):
        self.base = base
        super().__init__(v, log_density, event_dim, validate_args=validate_args)


class AutoGuide(GuidePostprocess):
    """Base class of the autoguides: the model's latent sites, their initial values, and the map
    from unconstrained values to the model's supports.

    **Arguments:** `model`; `prefix` (str, names of the params: `{site}_{prefix}_loc`, ...);
    `init_loc_fn`: an init strategy (`effppl.infer.init_to_uniform()`, ...), giving the initial
    unconstrained locations; `forward_mode_differentiation`: accepted, as NumPyro's (the
    guides' set-up takes no gradient; `SVI.run(..., forward_mode_differentiation=True)` sets
    the ELBO's); `create_plates`: None, or a function of the model's arguments
    returning the `effppl.plate` (or a list of plates) the guide enters for the model's plate of
    that name, e.g. one whose indices the caller substitutes (NumPyro's). The guides that read
    plates (`AutoNormal`, `AutoDelta`) make the others from the model's plates.

    **Subsampling.** A latent site inside a subsampled `effppl.plate(name, size,
    subsample_size=n)` has params of full size `size` along the plate's dim; the guide enters the
    plate, so it draws the indices (which the model then replays), reads its params at them, and
    scales the site's log density by `size / n`, as NumPyro's guides do.
    """

    def __init__(self, model, *, prefix: str = "auto", init_loc_fn=init_to_uniform,
                 create_plates=None, forward_mode_differentiation=False):
        if create_plates is not None and not callable(create_plates):
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}(model, "
                                 f"create_plates=...) expected a function of the model's "
                                 f"arguments returning plates, or None, but got "
                                 f"{create_plates!r:.60}.")
        if not callable(model):
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}(model, ...) "
                                 f"expected a callable model, but got {type(model).__name__} "
                                 f"{model!r:.60}.")
        if not isinstance(forward_mode_differentiation, (bool, np.bool_)):
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}(model, "
                                 f"forward_mode_differentiation=...) expected a bool, but got "
                                 f"{forward_mode_differentiation!r:.60}.")
        self.model = model
        self.prefix = prefix
        self.create_plates = create_plates
        # NumPyro's setting for its initialisation's gradient; the guides' set-up takes none
        # (`SVI.run(..., forward_mode_differentiation=True)` sets the ELBO's)
        self.forward_mode_differentiation = bool(forward_mode_differentiation)
        self.init_loc_fn = init_strategy(init_loc_fn, type(self).__name__)
        self._prototype_args = None
        self._latent_names = None  # the latent sites when the guide was set up (NumPyro)
        self.__name__ = type(self).__name__

    def _positive(self, name, value):
        """`value` as a float; an `AutoGuideError` naming the setting `name` unless it is a
        positive real number."""
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        if not ok:
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}({name}="
                                 f"{value!r}) expected a positive number.")
        return float(value)

    def _key(self):
        settings = {k: v for k, v in vars(self).items() if k not in ("_prototype_args", "model")}
        if jax.tree_util.tree_leaves(self.init_loc_fn.dynamic()):  # values baked into its code
            settings["init_loc_fn"] = id(self.init_loc_fn)
        return type(self), self.model, tuple(sorted(settings.items()))

    def __eq__(self, other):
        """Equal guides (same type, model, settings and latent sites) share compiled functions,
        so a new `SVI(model, AutoNormal(model), ...)` on new data compiles nothing."""
        return isinstance(other, AutoGuide) and self._key() == other._key()

    def __hash__(self):
        return hash((type(self), self.model, self.prefix))

    # -- the model's sites and the guide's prototype --------------------------------------------

    def _setup_prototype(self, *args, **kwargs):
        """Keep the model's (concrete) arguments for `median`, `quantiles`, `get_posterior` and
        `sample_posterior`, and which sites are latent: later calls (`Predictive(model,
        guide=...)` with `y=None`) guide those sites only, as NumPyro's prototype trace does.
        Called by `SVI.init`, and when the guide first runs (`_init_key`)."""
        self._prototype_args = None
        self._latent_names = tuple(self._latent_sites(args, kwargs))
        self._prototype_args = (args, kwargs)

    def _latent_sites(self, args, kwargs, analysis=None) -> dict:
        """`{name: Latent}`: the model's latent sites (`_sites.latent_sites`), those of the
        guide's prototype once it has one.

        **Raises:** `AutoGuideError` as `latent_sites`."""
        if analysis is None:
            analysis = analyze_model(self.model, args, kwargs)
        keep = None if self._prototype_args is None else self._latent_names
        return latent_sites(type(self).__name__, analysis, keep)

    def _args(self, api, args=(), kwargs=None):
        """The model's arguments for `api`: those of the guide's prototype (as NumPyro's guides,
        whose `sample_posterior` does not use new ones); with none yet, `args`/`kwargs` set it up
        (as the guide's first run would).

        **Raises:** `AutoGuideError` when there is neither."""
        if self._prototype_args is None and (args or kwargs):
            self._setup_prototype(*args, **(kwargs or {}))
        if self._prototype_args is not None:
            return self._prototype_args
        raise AutoGuideError(f"`{type(self).__name__}.{api}` needs the model's arguments, which "
                             f"the guide learns when it first runs (`SVI.init`/`SVI.run`, or "
                             f"`trace(seed(guide, key)).get_trace(*args)`): run it once first.")

    def _init_key(self, args, kwargs, sites):
        """The raw key of the initial values when this run is the guide's first (it has no
        prototype yet, or it runs in `first_run()`, as `SVI.init` runs it), drawn from `seed`
        then, before anything else, as NumPyro's guide draws it when it sets up its prototype;
        None otherwise. A first run at arguments the outermost handler was called with (e.g.
        `trace(seed(guide, key)).get_trace(*args)`) sets up the prototype (`latent` sites
        `sites`), as NumPyro's guides do."""
        first = self._prototype_args is None or in_first_run()
        if self._prototype_args is None:
            concrete = concrete_arguments(args, kwargs)
            if concrete is not None:
                self._latent_names = tuple(sites)
                self._prototype_args = concrete
        return ppl.raw_key(f"_{self.prefix}_init") if first else None

    def _init_locs(self, args, kwargs, sites, key=None) -> dict:
        """Initial unconstrained values of `sites` (`_prototype.initial_locs`)."""
        return initial_locs(self.model, self.init_loc_fn, args, kwargs, sites, key)

    # -- the guide's body: its plates, the map to the supports, its sites ----------------------

    def _plates(self, args, kwargs, sites) -> dict:
        """`{name: effppl.plate}`: the guide's plates for the plates around `sites`
        (`_plates.create_plates`); made before anything else the guide draws, so their
        indices take the first keys of `seed`, as NumPyro's."""
        frames = plates_.check_frames({n: latent.frames for n, latent in sites.items()},
                                      type(self).__name__)
        return plates_.create_plates(self.create_plates, frames, args, kwargs,
                                     type(self).__name__)

    def _constrain(self, args, kwargs, unconstrained: dict, sites: dict | None = None,
                   plates: dict | None = None):
        """`(values, log_dets, fns)`: the model's latent values at the unconstrained values
        `unconstrained` (each site mapped with the support of its current distribution), each
        site's `sum log|det J|`, and its (stacked) distribution. The model runs hidden by
        `block`, its subsampled plates given the indices of the guide's `plates`; when `sites`
        (`_latent_sites`) show that no support depends on anything (a parameter-free
        constraint such as `real`, `positive`, `simplex`, one distribution per site), the values
        are mapped directly instead, and `fns` is None."""
        supports = fixed_supports(sites) if sites is not None else None
        if supports is not None:
            values, log_dets = {}, {}
            for name, u in unconstrained.items():
                t = biject_to(supports[name])
                values[name] = t(u)
                log_dets[name] = jnp.sum(t.log_abs_det_jacobian(u, values[name]))
            return values, log_dets, None

        model = self.model
        indices = {n: p.indices for n, p in (plates or {}).items() if p.subsample_size < p.size}
        if indices:
            model = substitute_exactly(model, data=indices)

        def run():
            tracer = handlers.trace(Unconstrain(model, unconstrained, "autoguide", per_site=True))
            (_, _, log_dets), tr = tracer._run(*args, **kwargs)
            return ({n: tr[n]["value"] for n in unconstrained}, log_dets,
                    {n: tr[n]["fn"] for n in unconstrained})

        return handlers.block(run)()

    def _emit(self, values, sites, log_densities=None, bases=None):
        """The guide's sample sites: one `Delta` per latent site of the model, carrying the
        guide's log density of that value (none: 0), scaled like the site's subsampled plates
        scale the model's. `bases`: `{name: distribution}` the value was drawn from, for sites
        whose support is `real` (`GuideDelta`, for `TraceMeanField_ELBO`'s analytic KL)."""
        out = {}
        for name, value in values.items():
            fn = GuideDelta(value, log_density=0.0 if log_densities is None
                            else log_densities[name], event_dim=jnp.ndim(value),
                            base=(bases or {}).get(name))
            scale = plates_.subsample_scale(sites[name].frames)
            with handlers.scale(scale=scale) if scale is not None else contextlib.nullcontext():
                out[name] = ppl.sample(name, fn)
        return out
