"""Prior and posterior predictive draws, and pointwise log likelihoods."""

import functools
import math
import warnings
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import EffpplError
from .._keys import typed_key
from ..effects.internal import describe_non_array
from ..handlers import mask
from ..handlers.internal import SiteError
from ._compile._arguments import names_leaks
from ._compile._cache import cached
from ._compile._fns import model_fns, prepare
from ._model import site_errors
from ._sharding import check_mesh, place_data, readable, split_draws

__all__ = ["Predictive", "log_likelihood"]


class PredictiveError(EffpplError, ValueError):
    """Invalid arguments to `Predictive` or `log_likelihood`."""


def _unscored(model: Callable) -> Callable:
    """`model` inside `with mask(mask=False)`, as NumPyro's `Predictive` runs it (no draw needs a
    log density, and `get_mask()` is False, so a model may skip work that only feeds `factor`s).
    One wrapper per model (kept in the compiled-function store), so the compiled predictor of a
    model is found again by later `Predictive` objects."""
    def build():

        @functools.wraps(model)  # keeps the signature: errors name the model's arguments
        def unscored(*args, **kwargs):
            with mask(mask=False):
                return model(*args, **kwargs)
        return unscored
    return cached(("predictive-unscored", model), build)


def _batch_shape(api, samples: dict, batch_ndims: int):
    shape = None
    for name, value in samples.items():
        s = tuple(np.shape(value)[:batch_ndims])
        if len(s) < batch_ndims:
            raise PredictiveError(
                f"`{api}` expected site `{name}` to have {batch_ndims} batch dimension(s), but "
                f"got shape {np.shape(value)}."
            )
        if shape is not None and s != shape:
            raise PredictiveError(
                f"`{api}` expected every site to share the batch shape {shape}, but site `{name}` "
                f"has batch shape {s}."
            )
        shape = s
    return shape


def _check_batch_ndims(api, batch_ndims):
    if isinstance(batch_ndims, bool) or not isinstance(batch_ndims, (int, np.integer)) \
            or batch_ndims < 0:
        raise PredictiveError(f"`{api}(..., batch_ndims=...)` expected an int >= 0 (the leading "
                              f"batch axes of `posterior_samples`), but got {batch_ndims!r}.")
    return int(batch_ndims)


def _draws(api, posterior_samples, arg="posterior_samples", what="draws"):
    """`posterior_samples` as a dict of arrays (lists converted), or a `PredictiveError` naming
    the site whose draws (the `what` in argument `arg`) are not an array of numbers."""
    out = {}
    for name, value in posterior_samples.items():
        problem = describe_non_array(value)
        if problem is not None:
            raise PredictiveError(f"`{api}`: the {what} of `{name}` in `{arg}` must be an "
                                  f"array of numbers, but {'is' if what == 'value' else 'are'} "
                                  f"{problem}.")
        out[name] = value if hasattr(value, "shape") else np.asarray(value)
    return out


def _num_particles(api, params: dict, batch_ndims: int) -> int:
    """The number of particles of `params` (the length of every leaf's leading axis), for
    `Predictive(..., guide=..., params=..., batch_ndims=1)`."""
    if batch_ndims != 1:
        raise PredictiveError(f"`{api}(..., guide=..., params=...)` takes `batch_ndims` 0 (one "
                              f"set of params) or 1 (a leading axis of particles), not "
                              f"{batch_ndims} (as NumPyro).")
    sizes = {name: np.shape(v)[0] if np.ndim(v) else None
             for name, v in jax.tree_util.tree_leaves_with_path(params)}
    if len(set(sizes.values())) != 1 or None in sizes.values():
        shown = {jax.tree_util.keystr(k): np.shape(v)
                 for k, v in jax.tree_util.tree_leaves_with_path(params)}
        raise PredictiveError(f"`{api}(..., guide=..., params=..., batch_ndims=1)`: every param "
                              f"needs the same leading axis of particles, but their shapes are "
                              f"{shown}.")
    return int(next(iter(sizes.values())))


def _flatten(tree, batch_ndims):
    def flat(x):
        x = x if hasattr(x, "reshape") else np.asarray(x)
        return x.reshape((math.prod(x.shape[:batch_ndims]),) + tuple(x.shape[batch_ndims:]))

    return jax.tree.map(flat, tree)


def _unflatten(tree, batch_shape):
    return jax.tree.map(lambda x: x.reshape(batch_shape + x.shape[1:]), tree)


class Predictive:
    """Draw from the prior predictive, or the posterior predictive given posterior draws.

    Each draw runs the model with the latent sites fixed to one posterior draw (posterior
    predictive) or drawn from the prior (prior predictive, `posterior_samples=None`); sites
    inside loops come back stacked along their loop axes. Observed sites are redrawn only when
    their observation is not passed, so call it with `y=None`.

    **Arguments:**

    - `model`: the model.
    - `posterior_samples`: dict site -> array `[*batch, ...]` (e.g. `mcmc.get_samples()`), or `None`.
    - `num_samples`: number of prior draws (required without `posterior_samples`).
    - `return_sites`: names to return; by default the sample sites not in `posterior_samples`, and
      the deterministic sites.
    - `parallel`: accepted for NumPyro's signature; effppl always draws in parallel (`jax.vmap`
      over the draws, in one compiled function).
    - `batch_ndims`: leading batch dimensions of `posterior_samples` (2 for
      `get_samples(group_by_chain=True)`). By default 1, or 0 with a `guide` (NumPyro's
      defaults). With a `guide`, `batch_ndims=1` means that every array of `params` has a
      leading axis of particles (e.g. the parameters of several SVI runs): the draws are made
      for each particle and the results are `[num_samples, num_particles, ...]`, as NumPyro's.
    - `condition_deterministic`: also fix the deterministic sites found in `posterior_samples`
      (by default they are recomputed). `exclude_deterministic` is NumPyro's deprecated alias
      (`exclude_deterministic=True` is `condition_deterministic=False`).
    - `guide`: draw the latent sites from this guide (e.g. an autoguide after `SVI`) instead of
      `posterior_samples`: `num_samples` draws, each running the guide with `params`.
    - `params`: dict param name -> constrained value (`SVI.get_params`, `SVIRunResult.params`),
      substituted into the guide and the model (and into `model` alone without a guide:
      `Predictive(guide, params=params, num_samples=n)` draws from a guide, as in NumPyro).
    - `infer_discrete`: draw the sites marked for enumeration from their conditional given each
      posterior draw (`effppl.infer.infer_discrete`, temperature 1), as NumPyro's; by default
      they are drawn from their prior, like every latent site not in `posterior_samples`.
    - `mesh`: a mesh from `effppl.distributed.make_mesh`: the draws are split over its chain
      axis (when their number divides evenly), data sharded over its data axis
      (`effppl.distributed.shard`) stay so, other data are replicated. Results that span
      processes are gathered to every process. Without it, sharded data work too.

    **Returns:** calling `predictive(rng_key, *args, **kwargs)` returns dict site -> array
    `[*batch, ...]`.

    **Raises:** `PredictiveError` (a `ValueError`) for inconsistent batch shapes or unknown sites.

    Example: prior draws, then predictions from given draws of the latent site (here made up;
    usually `mcmc.get_samples()`): `y` is drawn because it is not passed.

        >>> import jax, jax.numpy as jnp
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import Predictive
        >>> def model(x, y=None):
        ...     w = effppl.sample("w", dist.Normal(0.0, 1.0))
        ...     with effppl.plate("data", x.shape[0]):
        ...         effppl.sample("y", dist.Normal(w * x, 0.1), obs=y)
        >>> x = jnp.arange(3.0)
        >>> prior = Predictive(model, num_samples=100)(jax.random.key(0), x)
        >>> prior["w"].shape, prior["y"].shape
        ((100,), (100, 3))
        >>> draws = {"w": jnp.array([1.0, 2.0])}
        >>> post = Predictive(model, draws)(jax.random.key(1), x)
        >>> list(post), jnp.round(post["y"]).astype(int).tolist()
        (['y'], [[0, 1, 2], [0, 2, 4]])
    """

    def __init__(self, model: Callable, posterior_samples: dict | None = None, *,
                 num_samples: int | None = None, return_sites: Sequence[str] | None = None,
                 parallel: bool = False, batch_ndims: int | None = None,
                 condition_deterministic: bool | None = None,
                 exclude_deterministic: bool | None = None, guide: Callable | None = None,
                 params: dict | None = None, infer_discrete: bool = False, mesh=None):
        api = "effppl.infer.Predictive"
        if not callable(model):
            raise PredictiveError(f"`{api}(model, ...)` expected a callable model, but got "
                                  f"{type(model).__name__} {model!r:.60}.")
        if exclude_deterministic is not None:  # NumPyro's deprecated alias
            if condition_deterministic is not None:
                raise PredictiveError(f"`{api}` takes `condition_deterministic` or its deprecated "
                                      f"alias `exclude_deterministic`, not both.")
            warnings.warn("`exclude_deterministic` is deprecated, use `condition_deterministic` "
                          "(`exclude_deterministic=True` is `condition_deterministic=False`).",
                          FutureWarning, stacklevel=2)
            condition_deterministic = not exclude_deterministic
        if guide is not None and posterior_samples is not None:
            raise PredictiveError(f"`{api}` got both `posterior_samples` and `guide`: the latent "
                                  f"draws come from one of them; pass only one.")
        if guide is not None and num_samples is None:
            raise PredictiveError(f"`{api}(model, guide=...)` needs `num_samples`, the number of "
                                  f"draws from the guide.")
        if params is not None and not isinstance(params, Mapping):
            raise PredictiveError(f"`{api}(..., params=...)` expected a dict param name -> "
                                  f"value, but got {type(params).__name__}.")
        if guide is not None and not callable(guide):
            raise PredictiveError(f"`{api}(..., guide=...)` expected a callable guide, but got "
                                  f"{type(guide).__name__} {guide!r:.60}.")
        self.guide, self.params = guide, _draws(api, params or {}, "params", "value")
        if posterior_samples is None and num_samples is None:
            raise PredictiveError(f"`{api}` expected `posterior_samples` or `num_samples`, but got neither.")
        if return_sites is not None and (isinstance(return_sites, str) or not all(
                isinstance(s, str) for s in return_sites)):
            raise PredictiveError(f"`{api}(..., return_sites=...)` expected a sequence of site names, but got {return_sites!r}.")
        if posterior_samples is not None and not isinstance(posterior_samples, Mapping):
            raise PredictiveError(f"`{api}(model, posterior_samples)` expected a dict site name -> "
                                  f"draws, but got {type(posterior_samples).__name__}.")
        if num_samples is not None and (not isinstance(num_samples, (int, np.integer))
                                        or num_samples < 1):
            raise PredictiveError(f"`{api}(..., num_samples={num_samples!r})` expected a positive "
                                  f"int.")
        self.model = model
        self.posterior_samples = _draws(api, posterior_samples or {})
        self.return_sites = None if return_sites is None else tuple(return_sites)
        if batch_ndims is None:  # NumPyro's default: 1, or 0 with a guide
            batch_ndims = 1 if guide is None else 0
        self.batch_ndims = _check_batch_ndims(api, batch_ndims)
        self._particles = None
        if guide is not None and self.params and self.batch_ndims > 0:
            self._particles = _num_particles(api, self.params, self.batch_ndims)
        self.condition_deterministic = bool(condition_deterministic)
        self.parallel = bool(parallel)
        self.infer_discrete = bool(infer_discrete)
        self.mesh = check_mesh(mesh, api)
        batch_shape = _batch_shape(api, self.posterior_samples, self.batch_ndims)
        if batch_shape is None and num_samples is None:
            raise PredictiveError(
                f"`{api}(model, posterior_samples)` found no site in `posterior_samples` to take "
                "the number of draws from; pass `num_samples` (for prior draws, leave "
                "`posterior_samples` out).")
        if batch_shape is None:
            batch_shape = (1,) * (self.batch_ndims - 1) + (int(num_samples),)
        elif num_samples is not None and num_samples != int(np.prod(batch_shape)):
            warnings.warn(
                f"{api}: num_samples={num_samples} differs from the {int(np.prod(batch_shape))} "
                "posterior draws; using the posterior draws.", UserWarning, stacklevel=2,
            )
        self._batch_shape = batch_shape
        self.num_samples = int(np.prod(batch_shape))

    @names_leaks("effppl.infer.Predictive")
    def __call__(self, rng_key, *args, **kwargs) -> dict:
        """Draw predictive samples; `args`/`kwargs` are the model's (see `MCMC.run`)."""
        api = "effppl.infer.Predictive"
        key = typed_key(rng_key, f"`{api}`", PredictiveError)
        if self._particles is None:
            return self._call(key, self.params, args, kwargs)
        # one set of draws per particle of `params`, stacked on axis 1 (NumPyro's `out_axes=1`)
        keys = jax.random.split(key, self._particles)
        outs = [self._call(keys[i], jax.tree.map(lambda v, i=i: v[i], self.params), args, kwargs)
                for i in range(self._particles)]
        return jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *outs)

    def _call(self, key, params, args, kwargs) -> dict:
        """The draws of one set of `params` (see `__call__`)."""
        api = "effppl.infer.Predictive"
        model = self.model if self.infer_discrete else _unscored(self.model)  # as NumPyro's
        fns, dynamic = prepare(api, model, args, kwargs)
        info = fns.site_info(dynamic)
        sample_sites = set(info.latent) | set(info.observed) | set(info.enumerated)
        fixable = sample_sites | (set(info.deterministic) if self.condition_deterministic else set())
        unknown = [n for n in self.posterior_samples if n not in sample_sites | set(info.deterministic)]
        if unknown:
            raise PredictiveError(
                f"`{api}`: `posterior_samples` has sites {unknown} that model `{fns.name}` does not "
                f"have; its sites are {sorted(sample_sites | set(info.deterministic))}.")
        samples = {n: v for n, v in self.posterior_samples.items() if n in fixable}
        if self.return_sites is None:
            sites = {n for n in sample_sites if n not in self.posterior_samples}
            sites |= set(info.deterministic)
        else:
            unknown = [n for n in self.return_sites if n not in sample_sites | set(info.deterministic)]
            if unknown:
                raise PredictiveError(
                    f"`{api}(..., return_sites=...)` names sites {unknown} that model "
                    f"`{fns.name}` does not have; its sites are {sorted(sample_sites | set(info.deterministic))}."
                )
            sites = set(self.return_sites)
        keys = jax.random.split(key, self.num_samples)
        samples = _flatten(samples, self.batch_ndims)
        if self.guide is not None:
            guide_key, key = jax.random.split(key)
            samples = self._guide_draws(guide_key, fns.structure, dynamic, sample_sites, params)
            keys = jax.random.split(key, self.num_samples)
            if self.return_sites is None:
                sites -= set(samples)
        if self.mesh is not None:
            dynamic = place_data(dynamic, self.mesh)
            keys, samples = split_draws((keys, samples), self.mesh)
        try:
            with site_errors():
                out = readable(jax.block_until_ready(fns.predictor(
                    tuple(sorted(sites)), self.infer_discrete)(
                    keys, samples, params, dynamic)))
        except SiteError as err:
            if "shape" not in str(err):
                raise
            raise PredictiveError(
                f"`{api}`: {err} (after taking {self.batch_ndims} leading batch axis(es) off "
                "`posterior_samples`; draws grouped by chain, from "
                "`get_samples(group_by_chain=True)`, need `batch_ndims=2`).") from err
        return _unflatten(out, self._batch_shape)

    def _guide_draws(self, key, structure, dynamic, model_sites, params):
        """`num_samples` draws of the guide's sample sites that are sample sites of the model."""
        guide_fns = model_fns(_unscored(self.guide), structure, dynamic)
        info = guide_fns.site_info(dynamic)
        names = tuple(sorted(n for n in info.latent if n in model_sites))
        draw = guide_fns.predictor(names)
        keys = jax.random.split(key, self.num_samples)
        if self.mesh is not None:
            keys, dynamic = split_draws(keys, self.mesh), place_data(dynamic, self.mesh)
        return draw(keys, {}, params, dynamic)


def log_likelihood(model: Callable, posterior_samples: dict, *args, batch_ndims: int = 1,
                   mesh=None, **kwargs) -> dict:
    """Pointwise log likelihood `log p(y | theta)` of every observed site, per posterior draw.

    **Arguments:**

    - `model`: the model.
    - `posterior_samples`: dict site -> array `[*batch, ...]` with every latent site (extra
      entries, such as deterministic sites, are ignored).
    - `*args`, `**kwargs`: the model's arguments, with the observations.
    - `batch_ndims`: leading batch dimensions of `posterior_samples` (0, 1 or 2).
    - `mesh`: a mesh from `effppl.distributed.make_mesh` (a model keyword named `mesh` cannot
      pass through): the draws are split over its chain axis when their number divides evenly;
      data sharded over its data axis stay so, the others are replicated. Results spanning
      processes are gathered to every process (also without `mesh`, for sharded data).

    **Returns:** dict observed site -> `log_prob` array `[*batch, *site_shape]` (elementwise,
    not summed; sites in loops stacked along their loop axes).

    **Raises:** `PredictiveError` when a latent site is missing from `posterior_samples`.

    **References:** Vehtari, Gelman & Gabry (2017), "Practical Bayesian model evaluation using
    leave-one-out cross-validation and WAIC" (the input of `arviz.loo` / `arviz.waic`).
    """
    api = "effppl.infer.log_likelihood"
    if not isinstance(posterior_samples, Mapping):
        raise PredictiveError(f"`{api}(model, posterior_samples, ...)` expected a dict site name "
                              f"-> draws, but got {type(posterior_samples).__name__}.")
    batch_ndims = _check_batch_ndims(api, batch_ndims)
    posterior_samples = _draws(api, posterior_samples)
    fns, dynamic = prepare(api, model, args, kwargs)
    info = fns.site_info(dynamic)
    if info.enumerated:
        raise PredictiveError(
            f"`{api}`: model `{fns.name}` has sites marked for enumeration "
            f"({list(info.enumerated)}), whose pointwise log likelihood effppl does not define. "
            "Draw them first (`effppl.infer.infer_discrete` or `Predictive`) and pass them in "
            "`posterior_samples` of the model without the enumeration marks.")
    missing = [n for n in info.latent if n not in posterior_samples and n not in info.valued]
    if missing:
        raise PredictiveError(
            f"`{api}` expected posterior draws of every latent site of model `{fns.name}`, but "
            f"sites {missing} are missing from `posterior_samples`. (A site is latent when its "
            "observation is not passed: pass the model's observed data as arguments.)"
        )
    if info.unrecorded:
        warnings.warn(
            f"{api}: observed sites {list(info.unrecorded)} of model `{fns.name}` sit inside a "
            "`while_loop` (no static number of occurrences), so they have no pointwise log "
            "likelihood here; use `lax.scan`/`fori_loop` with static bounds to include them.",
            UserWarning, stacklevel=2)
    samples = {n: posterior_samples[n] for n in info.latent if n in posterior_samples}
    if batch_ndims == 0:
        samples = jax.tree.map(lambda x: x[None] if hasattr(x, 'shape') else np.asarray(x)[None], samples)
        batch_shape = ()
    else:
        batch_shape = _batch_shape(api, samples, batch_ndims)
    if batch_shape is None:  # no latent site: one evaluation, batch axes of size 1 (NumPyro's)
        batch_shape = (1,) * batch_ndims
    flat = _flatten(samples, max(batch_ndims, 1))
    if check_mesh(mesh, api) is not None:
        dynamic, flat = place_data(dynamic, mesh), split_draws(flat, mesh)
    with site_errors():
        out = readable(jax.block_until_ready(fns.log_likelihood(flat, dynamic,
                                                                math.prod(batch_shape))))
    return jax.tree.map(lambda x: x.reshape(tuple(batch_shape) + x.shape[1:]), out)
