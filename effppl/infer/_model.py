"""Every call from `effppl.infer` into the PPL layer (`effppl.handlers`) lives here.

The functions below are traceable (they run inside `jax.jit`/`jax.vmap`); none of them compiles
anything by itself. They use only NumPyro-compatible entry points of `effppl.handlers`:
`potential_energy`, `constrain_fn`, `unconstrain_fn`, `seed`, `substitute`, `trace`.
"""

import contextlib
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
from numpyro.distributions import ImproperUniform
from numpyro.distributions.transforms import biject_to

from .. import handlers
from .._errors import EffpplError
from ..handlers import internal as ppl
from ..handlers.internal import (
    InvalidParameterError,
    analyze_model,
    call_unhandled,
    callback_site_errors,
    recorded,
    unconstrained_type,
)

__all__ = ["TracedSite", "potential_energy", "constrain", "unconstrain", "get_trace", "initialising"]

_REQUIRED = ("potential_energy", "constrain_fn", "unconstrain_fn", "seed", "substitute", "trace")


class PPLUnavailableError(EffpplError, ImportError):
    """`effppl.handlers` does not (yet) provide an entry point that inference needs."""


# Test seam: `tests/inference` may point this at another namespace with the same entry points
# (NumPyro's), to check the inference code against NumPyro's handlers on the same models. `None`
# (always, outside those tests) means `effppl.handlers`.
_backend = None


def _handlers():
    if _backend is not None:
        return _backend

    missing = [name for name in _REQUIRED if not hasattr(handlers, name)]
    if missing:
        raise PPLUnavailableError(
            f"`effppl.infer` needs `effppl.handlers.{missing[0]}`, but `effppl.handlers` does "
            f"not define {missing}. Install a complete effppl build."
        )
    return handlers


def _substitute(h, fn, data=None, substitute_fn=None):
    """`h.substitute`; effppl's exact one (no per-draw run for values with extra leading axes)."""
    exact = ppl.substitute_exactly if h is handlers else h.substitute
    return exact(fn, data=data, substitute_fn=substitute_fn)


class TracedSite(NamedTuple):
    """One site of a model trace, as inference sees it: its values (the static description of a
    site, before any value, is `handlers._sites.Site`).

    `kind` is `"sample"`, `"deterministic"`, ...; `value` the (possibly loop-stacked) value;
    `fn` the distribution (`None` for non-sample sites).
    """

    kind: str
    value: Any
    is_observed: bool
    fn: Any
    log_prob: Any = None  # elementwise log density, when the trace records it
    plates: tuple = ()    # the enclosing plates' CondIndepStackFrame(name, dim, size), innermost first
    enumerated: bool = False  # marked `infer={"enumerate": ...}`: summed out, never sampled by HMC


def model_name(model: Callable) -> str:
    """The model's name for messages."""
    return ppl.model_name(model)


def run_unhandled(model: Callable, args: tuple, kwargs: dict) -> Any:
    """Run `model` under no handler, only to trace its own program (its sites stay effect
    operations, never evaluated)."""
    if _backend is not None:  # a NumPyro model cannot run without handlers
        return _backend.seed(model, rng_seed=0)(*args, **kwargs)

    return call_unhandled(model, *args, **kwargs)


def analyze_sites(model: Callable, args: tuple, kwargs: dict) -> dict:
    """The model's sites found by static analysis, without running it: `{name: site}` with
    `effppl.handlers`' site description (`type`, `is_observed`, `loops`: the lengths of the
    enclosing loops, `None` for a `while_loop`; `bounded`); `{}` for a NumPyro model (no sites
    inside loops)."""
    if _backend is not None:
        return {}

    return analyze_model(model, args, kwargs)


def recorded_sites(model: Callable, args: tuple, kwargs: dict) -> tuple[dict, dict]:
    """`(sites, analysis)`: the sites a trace of `model` records, as `get_trace` gives them but
    from the static site analysis alone (the model's own program, no handler compiled away):
    values are `jax.ShapeDtypeStruct`s, a sample site's `fn` is its distribution rebuilt on
    abstract parameters (for `event_shape` and `support`; `None` when `cond` branches use
    different families); `analysis` is `analyze_sites`' result. Not for a NumPyro backend.

    **Raises:** `SiteError` for a latent site inside a `while_loop`, as `get_trace` does."""
    analysis = analyze_sites(model, args, kwargs)
    sites = {}
    for name, site in recorded(analysis).items():
        if site.type not in ("sample", "deterministic"):
            continue
        fn = None
        if site.type == "sample" and site.one_family:
            msg = site.message
            leaves, tree = jax.tree_util.tree_flatten(msg.fn)
            fn = jax.tree_util.tree_unflatten(
                tree, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in leaves])
        stacks = {dict(k.static).get("cond_indep_stack", ()) for k in site.keys or (site.key,)}
        sites[name] = TracedSite(
            kind=site.type,
            value=jax.ShapeDtypeStruct(site.loops + site.aval.shape, site.aval.dtype),
            is_observed=site.is_observed, fn=fn,
            plates=tuple(stacks.pop()) if len(stacks) == 1 else (),
            enumerated=site.type == "sample"
            and dict(dict(site.key.static).get("infer", ())).get("enumerate") is not None)
    return sites, analysis


def unconstrained_types(model: Callable, args: tuple, kwargs: dict, latent: tuple) -> dict | None:
    """`{site: jax.ShapeDtypeStruct}`: the type of each latent site's unconstrained value (as
    `unconstrain` gives it: loop axes first), from the static site analysis; `None` for a NumPyro
    backend."""
    if _backend is not None:
        return None

    sites = analyze_sites(model, args, kwargs)
    out = {}
    for name in latent:
        shape, dtype = unconstrained_type(sites[name])
        out[name] = jax.ShapeDtypeStruct(sites[name].loops + tuple(shape), dtype)
    return out


def check_call(api: str, model_args: Any, model_kwargs: Any, params: Any = None) -> None:
    """A `TypeError` naming `model_args` when it is not a tuple, or `model_kwargs`/`params` when
    not a dict (NumPyro's calling convention of `log_density`, `initialize_model`, ...)."""
    ppl.check_call(api, model_args, model_kwargs, params)


def site_errors():
    """A context in which a `SiteError` raised by a run-time check inside compiled code (explicit
    `validate_args=True` on traced parameters) comes out as itself, not as XLA's
    `JaxRuntimeError`."""
    return callback_site_errors()


def potential_energy(model: Callable, args: tuple, kwargs: dict, params: dict) -> Any:
    """`-(log joint + log|det J|)` at the unconstrained `params` (a scalar)."""
    return _handlers().potential_energy(model, args, kwargs, params)


def constrain(model: Callable, args: tuple, kwargs: dict, params: dict) -> dict:
    """Constrained values of the latent sites in `params`, with the deterministic sites."""
    return _handlers().constrain_fn(model, args, kwargs, params, return_deterministic=True)


def unconstrain(model: Callable, args: tuple, kwargs: dict, values: dict) -> dict:
    """Unconstrained values of the (constrained) latent `values`; needs every latent site."""
    return _handlers().unconstrain_fn(model, args, kwargs, values)


# Initialisation needs *some* point for every latent site, also for sites whose distribution has no
# sampler (`ImproperUniform`: flat priors). As NumPyro's initialisation does, such a site gets a
# point uniform in (-2, 2) in unconstrained space -- but only inside `initialising()` and only in
# the thread that entered it; everywhere else (`Predictive`) the distribution raises as usual.
# Why a patch of numpyro's class: the draw happens in `fn.sample(key)`, called by whichever `seed`
# handler runs the model (effppl's, or NumPyro's under the test seam `_backend`), so no handler of
# ours can intercept it. It is scoped: installed while some thread is inside `initialising()`,
# the original method restored when the last one leaves.
_improper_sample = ImproperUniform.sample
_patch_lock = threading.Lock()
_patch_users = 0


def _improper_sample_for_init(self, key, sample_shape=()):
    if not ppl.is_set("initialising"):
        return _improper_sample(self, key, sample_shape)
    transform = biject_to(self.support)
    shape = transform.inverse_shape(tuple(sample_shape) + tuple(self.shape()))
    return transform(jax.random.uniform(key, shape, minval=-2.0, maxval=2.0))


@contextlib.contextmanager
def initialising():
    """Within this context (this thread), improper sites draw an initialisation point."""
    global _patch_users
    with _patch_lock:
        if _patch_users == 0:
            ImproperUniform.sample = _improper_sample_for_init
        _patch_users += 1
    try:
        with ppl.flag("initialising"):
            yield
    finally:
        with _patch_lock:
            _patch_users -= 1
            if _patch_users == 0:
                ImproperUniform.sample = _improper_sample


def validate_parameters(model: Callable, args: tuple, kwargs: dict) -> None:
    """With validation on (`effppl.enable_validation()`, NumPyro's default), run `model` once
    eagerly on the concrete `args`, its latent sites drawn from their priors (improper ones at an
    initial point), so that a distribution parameter outside its constraint raises, as NumPyro's
    eager run of the model does. Any other failure of this run is left to the caller, which
    reports it in its own words.

    **Raises:** `InvalidParameterError` (a `ValueError`) naming the site, the parameter and its
    constraint."""
    import numpyro.distributions


    if _backend is not None or not numpyro.distributions.Distribution._validate_args:
        return
    try:
        with initialising():
            get_trace(model, args, kwargs, rng_key=jax.random.PRNGKey(0))
    except InvalidParameterError:
        raise
    except Exception:  # noqa: BLE001 -- not this check's to report (see the docstring)
        return


@contextlib.contextmanager
def explained_by_parameters(model: Callable, args: tuple, kwargs: dict, errors: tuple):
    """A context in which one of `errors` (e.g. no finite initial point: a NaN potential) is
    re-raised as the `InvalidParameterError` that explains it, when the model's eager run
    (`validate_parameters`) finds one. The compiled functions it wraps carry no check: the
    check runs only when they have failed."""
    try:
        yield
    except errors as err:
        try:
            validate_parameters(model, args, kwargs)
        except InvalidParameterError as invalid:
            raise invalid from err
        raise


def infer_discrete(model: Callable, samples: dict, rng_key: Any) -> Callable:
    """`model` with its enumerated sites drawn from their conditional given the latent values
    `samples` (`effppl.handlers.infer_discrete` of the conditioned model, temperature 1)."""
    h = _handlers()
    return h.infer_discrete(_substitute(h, model, samples), rng_key=jax.random.key_data(rng_key))


def numpyro_site(site: dict) -> dict:
    """A site dict (a trace entry, or a user's) with the fields NumPyro's site functions read
    (`type`, `kwargs` with the site's `rng_key` and `sample_shape`, `infer` as a dict)."""
    site = dict(site)
    site.setdefault("type", "sample")
    site["infer"] = dict(site.get("infer") or ())
    site.setdefault("kwargs", {"rng_key": site.get("rng_key"), "sample_shape": ()})
    return site


def get_trace(
    model: Callable,
    args: tuple,
    kwargs: dict,
    *,
    rng_key: Any = None,
    substitutions: dict | None = None,
    substitute_fn: Callable | None = None,
    keep: Callable | None = None,
    record: str = "all",
) -> dict[str, TracedSite]:
    """Run `model(*args, **kwargs)` and return its sites, in execution order.

    **Arguments:**

    - `rng_key`: a raw `uint32[2]` key; when given, latent sites without a value are drawn from
      their prior (`seed`). Without it, every latent site must be in `substitutions`.
    - `substitutions`: dict site -> constrained value, fixed before the model runs (`substitute`).
    - `substitute_fn`: a function of a NumPyro-style site dict giving a latent site's constrained
      value, or None to draw it (an init strategy); it sees the site's key from `seed`.
    - `keep`: `keep(name, site) -> bool` (`site` from the site analysis: `type`,
      `is_observed`, ...): the sites to record (None: all). Each recorded field is written at
      every occurrence (inside loops: a row per step), so record only what the caller reads.
    - `record`: `"all"`; `"values"` (each site's value, no `fn` or `log_prob`); `"scores"` (a
      sample site's `log_prob`, no value or `fn`).

    **Returns:** dict site name -> `TracedSite`, sample and deterministic sites only.
    """
    h = _handlers()
    fn = model
    if substitutions:
        fn = _substitute(h, fn, substitutions)
    if rng_key is not None:
        fn = h.seed(fn, rng_key)
    if substitute_fn is not None:
        fn = _substitute(h, fn, substitute_fn=substitute_fn)
    tracer = h.trace(fn)
    tracer.keep = keep
    tracer.values_only = record == "values"
    tracer.scores_only = record == "scores"
    raw = tracer.get_trace(*args, **kwargs)
    sites = {}
    for name, site in raw.items():
        kind = site.get("type")
        if kind not in ("sample", "deterministic"):
            continue
        sites[name] = TracedSite(
            kind=kind,
            value=site["value"],
            is_observed=bool(site.get("is_observed", False)),
            fn=site.get("fn") if kind == "sample" else None,
            log_prob=site.get("log_prob") if kind == "sample" else None,
            plates=tuple(site.get("cond_indep_stack", ())),
            enumerated=kind == "sample" and site.get("infer", {}).get("enumerate") is not None,
        )
    return sites
