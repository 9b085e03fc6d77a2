"""Initialisation strategies and the bounded search for a valid initial point.

A strategy proposes an *unconstrained* point per chain inside a compiled, cached function; the
search evaluates the potential energy and its gradient there and redraws the chains whose point,
potential or gradient is not finite, at most `max_tries` times, then raises `InitializationError`.
"""

import dataclasses
import functools
import math
import zlib
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.infer
from numpyro.distributions.transforms import biject_to

from .._errors import EffpplError
from ..effects.internal import describe_non_array
from . import _model
from ._sharding import readable

__all__ = [
    "InitStrategy",
    "InitializationError",
    "init_to_uniform",
    "init_to_median",
    "init_to_value",
    "find_initial_params",
]


class InitializationError(EffpplError, RuntimeError):
    """No initial point with a finite potential energy and gradient was found."""


@dataclasses.dataclass(frozen=True)
class InitStrategy:
    """Base class of initialisation strategies.

    A strategy has a hashable static part (the dataclass fields, which key the compiled init
    function) and a dynamic part (`dynamic()`, a pytree of arrays passed to it as an argument).
    `propose(rng_key, ctx, dynamic)` runs traced, for one chain, and returns a dict site ->
    unconstrained value.
    """

    def dynamic(self) -> Any:
        return ()

    def propose(self, rng_key, ctx: "ModelContext", dynamic: Any) -> dict:
        raise NotImplementedError

    def describe(self) -> str:
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
        return f"{type(self).__name__.lstrip('_')}({fields})"

    def __call__(self, site=None):
        """NumPyro's protocol: the constrained initial value of `site` (a site dict), or None."""
        if site is None:
            return self
        return self.site_fn()(site_message(site))

    def site_fn(self):
        """NumPyro's function of a site message doing what this strategy does."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class ModelContext:
    """What a strategy may ask of the model while traced: prior draws and unconstraining."""

    model: Any
    args: tuple
    kwargs: dict
    latent: tuple

    def prior(self, rng_key, substitutions=None, substitute_fn=None) -> dict:
        """Constrained latent values: prior draws, except those in `substitutions` or given by
        `substitute_fn(site)` (a NumPyro-style site dict; `None`: draw)."""
        sites = _model.get_trace(
            self.model, self.args, self.kwargs,
            rng_key=jax.random.key_data(rng_key), substitutions=substitutions,
            substitute_fn=substitute_fn,
        )
        return {name: sites[name].value for name in self.latent}

    def unconstrain(self, values: dict) -> dict:
        return _model.unconstrain(self.model, self.args, self.kwargs, values)

    def unconstrained_types(self, rng_key) -> dict:
        """`{site: jax.ShapeDtypeStruct}` of the unconstrained latent values: from the static
        site analysis (no pass of the model through handlers), else (a NumPyro backend) from
        the abstract value of a prior draw, unconstrained."""
        types = _model.unconstrained_types(self.model, self.args, self.kwargs, self.latent)
        if types is None:
            types = jax.eval_shape(lambda k: self.unconstrain(self.prior(k)), rng_key)
        return types


def _uniform_like(rng_key, tree: dict, radius: float) -> dict:
    """`{site: Uniform(-radius, radius) draws}` of the types in `tree` (integer types draw in the
    default float type). One draw per dtype, cut into the sites (in name order): one random-bits
    computation rather than one per site, which XLA compiled slowly for models with many sites."""
    def float_dtype(x):
        return x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.result_type(float)

    names = sorted(tree)
    dtypes = sorted({jnp.dtype(float_dtype(tree[n])).name for n in names})
    keys = dict(zip(dtypes, jax.random.split(rng_key, max(len(dtypes), 1))))
    out = {}
    for dtype in dtypes:
        group = [n for n in names if jnp.dtype(float_dtype(tree[n])).name == dtype]
        sizes = [math.prod(tree[n].shape) for n in group]
        flat = jax.random.uniform(keys[dtype], (sum(sizes),), dtype, -radius, radius)
        for n, start, size in zip(group, np.cumsum([0, *sizes[:-1]]), sizes):
            out[n] = flat[int(start):int(start) + size].reshape(tree[n].shape)
    return out


@dataclasses.dataclass(frozen=True)
class _InitToUniform(InitStrategy):
    radius: float = 2.0

    def propose(self, rng_key, ctx, dynamic):
        k_prior, k_uniform = jax.random.split(rng_key)
        return _uniform_like(k_uniform, ctx.unconstrained_types(k_prior), self.radius)

    def site_fn(self):
        return functools.partial(numpyro.infer.init_to_uniform, radius=self.radius)


@dataclasses.dataclass(frozen=True)
class _InitToMedian(InitStrategy):
    num_samples: int = 15

    def _medians(self, rng_key, ctx, current):
        sites = _model.get_trace(
            ctx.model, ctx.args, ctx.kwargs,
            rng_key=jax.random.key_data(rng_key), substitutions=current,
        )
        out = {}
        for i, name in enumerate(ctx.latent):
            fn = sites[name].fn
            if fn is None:  # `cond` branches of different families: no one distribution to
                out[name] = current[name]  # take a median of, so keep the prior draw
                continue
            draws = fn.sample(jax.random.fold_in(rng_key, i), (self.num_samples,))
            transform = biject_to(fn.support)
            median = jnp.median(transform.inv(draws), axis=0)
            out[name] = transform(median).astype(jnp.result_type(current[name]))
        return out

    def propose(self, rng_key, ctx, dynamic):
        # Fixed point: each site's median given the medians of the sites it depends on. A chain of
        # n dependent sites settles after at most n passes; stop early once nothing changes.
        def cond(carry):
            i, changed, _ = carry
            return changed & (i <= len(ctx.latent))

        def body(carry):
            i, _, current = carry
            new = self._medians(rng_key, ctx, current)
            changed = jnp.any(jnp.stack(
                [jnp.any(new[n] != current[n]) for n in ctx.latent]
            ))
            return i + 1, changed, new

        start = ctx.prior(rng_key)
        _, _, medians = jax.lax.while_loop(cond, body, (0, jnp.asarray(True), start))
        return ctx.unconstrain(medians)

    def site_fn(self):
        return functools.partial(numpyro.infer.init_to_median, num_samples=self.num_samples)


@dataclasses.dataclass(frozen=True)
class _InitToValue(InitStrategy):
    names: tuple = ()
    values: Any = dataclasses.field(default=None, compare=False, hash=False)
    radius: float = 2.0

    def dynamic(self):
        return dict(zip(self.names, self.values))

    def propose(self, rng_key, ctx, dynamic):
        k_prior, k_uniform = jax.random.split(rng_key)
        given = {n: v for n, v in dynamic.items() if n in ctx.latent}
        unconstrained = ctx.unconstrain(ctx.prior(k_prior, substitutions=given))
        uniform = _uniform_like(k_uniform, unconstrained, self.radius)
        return {n: unconstrained[n] if n in given else uniform[n] for n in unconstrained}

    def describe(self):
        return f"init_to_value(values={{{', '.join(self.names)}}})"

    def site_fn(self):
        return functools.partial(numpyro.infer.init_to_value,
                                 values=dict(zip(self.names, self.values)))


def is_site(site) -> bool:
    """Whether `site` is a site message (a strategy is being asked for a site's value)."""
    return isinstance(site, Mapping) and "fn" in site and "name" in site


def site_message(site) -> dict:
    """A site message or trace entry with the fields NumPyro's site functions read. A site
    without a key (a trace entry: effppl's traces do not keep the key a site was drawn with)
    gets the key `PRNGKey(0)` folded with a hash of its name, so a strategy that draws
    (`init_to_uniform`, `init_to_median`, `init_to_sample`) gives each site its own draw."""
    site = _model.numpyro_site(site)
    if site["kwargs"].get("rng_key") is None:
        key = jax.random.fold_in(jax.random.PRNGKey(0), zlib.crc32(site["name"].encode()))
        site["kwargs"] = {"sample_shape": (), **site["kwargs"], "rng_key": key}
    return site


def init_to_uniform(site=None, radius: float = 2.0) -> InitStrategy:
    """Initialise each latent site uniformly in `(-radius, radius)` in unconstrained space.

    **Arguments:**

    - `site`: as in NumPyro, a site message to return the initial value of (leave it out to
      get the strategy).
    - `radius`: half-width of the interval, in unconstrained units. Stan and NumPyro use 2.

    **Returns:** an `InitStrategy` for `NUTS(..., init_strategy=...)` / `HMC`.

    **Raises:** `ValueError` unless `radius` is a positive number.

    **References:** Stan Reference Manual, "Initialization"; `numpyro.infer.init_to_uniform`.
    """
    return _InitToUniform(radius=_radius("init_to_uniform", radius))(site)


def _radius(api, radius):
    if describe_non_array(radius) is not None or jnp.ndim(radius) != 0 \
            or jnp.iscomplexobj(radius) or not radius > 0:
        raise ValueError(f"`effppl.infer.{api}(radius=...)` expected a number > 0, but got "
                         f"{radius!r}.")
    return float(radius)


def init_to_median(site=None, num_samples: int = 15) -> InitStrategy:
    """Initialise each latent site to its prior median, estimated from `num_samples` draws.

    The median of a site is taken given the medians of the sites it depends on (as NumPyro does),
    in unconstrained space and mapped back, so it lies in the support. A site whose `cond`/`switch`
    branches use different distribution families (no one distribution to take a median of)
    starts at a prior draw instead.

    **Arguments:**

    - `site`: as in NumPyro, a site message to return the initial value of.
    - `num_samples`: number of prior draws per site used to estimate the median.

    **Returns:** an `InitStrategy`. **Raises:** `ValueError` unless `num_samples` is an int >= 1.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) \
            or num_samples < 1:
        raise ValueError(
            f"`effppl.infer.init_to_median(num_samples=...)` expected a positive int, but got {num_samples!r}."
        )
    return _InitToMedian(num_samples=int(num_samples))(site)


def init_to_value(site=None, values: dict | None = None, radius: float = 2.0) -> InitStrategy:
    """Initialise the latent sites in `values` to the given *constrained* values.

    Sites not in `values` are initialised as by `init_to_uniform(radius)`; names in `values` that
    are not latent sites (observed or deterministic) are ignored.

    **Arguments:**

    - `site`: as in NumPyro, a site message to return the initial value of.
    - `values`: dict site name -> constrained value (array-like, the site's shape).
    - `radius`: for the sites not in `values`, see `init_to_uniform`.

    **Returns:** an `InitStrategy`.
    """
    if site is not None and not is_site(site) and values is None:
        site, values = None, site  # `init_to_value({...})`, values given first
    if values is not None and not isinstance(values, Mapping):
        raise InitializationError(
            f"`effppl.infer.init_to_value(values=...)` expected a dict site name -> constrained "
            f"value, but got {type(values).__name__} {values!r}.")
    values = dict(values or {})
    for name, value in values.items():
        problem = describe_non_array(value)
        if problem is not None:
            raise InitializationError(
                f"`effppl.infer.init_to_value(values=...)`: the value of site `{name}` must be an "
                f"array of numbers (constrained), but is {problem}.")
    names = tuple(sorted(values))
    return _InitToValue(
        names=names, values=tuple(jnp.asarray(values[n]) for n in names),
        radius=_radius("init_to_value", radius)
    )(site)


@jax.jit
def _select_chains(ok, old, new):
    def pick(a, b):
        mask = jnp.reshape(ok, ok.shape + (1,) * (jnp.ndim(a) - 1))
        return jnp.where(mask, a, b)

    return jax.tree.map(pick, old, new)


def _chains_ok(pe, param_ok, grad_ok):
    """bool[chain]: the potential energy, every unconstrained value and gradient are finite
    (read to the host, also from chains split over processes)."""
    pe, param_ok, grad_ok = readable((pe, param_ok, grad_ok))
    ok = np.isfinite(np.asarray(pe))
    for flags in (*param_ok.values(), *grad_ok.values()):
        ok &= np.asarray(flags)
    return ok


def rounding_error(params: dict, pe, grad: dict) -> np.ndarray:
    """float[chain]: the size of the potential energy's rounding error at `params`: the
    potential's own (`eps * |U|`) plus the change of `U` when each coordinate moves by one unit
    in its last place (`eps * sum_i |dU/dx_i| * max(|x_i|, 1)`), `eps` the dtype's machine
    epsilon.

    Where this exceeds the sampler's divergence threshold (1000), no leapfrog step can conserve
    the energy to within the threshold, whatever the step size: every move that changes the
    position in floating point is divergent, and dual averaging settles on a step size
    (1e-20 and below) at which the position no longer changes. Such a point is finite but not a
    usable start (an ARMA model with an explosive moving-average root starts at potentials of
    1e23 to 1e42). Chains split over processes are read to the host first."""
    params, pe, grad = readable((params, pe, grad))
    pe = np.asarray(pe)
    eps = np.finfo(pe.dtype if np.issubdtype(pe.dtype, np.floating) else float).eps
    total = np.abs(pe).astype(np.float64)
    for name, g in grad.items():
        x = np.asarray(params[name], np.float64)
        g = np.abs(np.asarray(g, np.float64)) * np.maximum(np.abs(x), 1.0)
        total = total + g.reshape(g.shape[0], -1).sum(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        return eps * total


def find_initial_params(fns, strategy: InitStrategy, rng_key, num_chains: int, dynamic: tuple,
                        *, max_tries: int = 100, api: str = "effppl.infer.MCMC.run",
                        chain_keys=None, max_rounding_error: float | None = None,
                        forward: bool = False):
    """Draw one valid unconstrained initial point per chain.

    **Arguments:**

    - `fns`: the model's `ModelFns` (compiled, cached functions).
    - `strategy`: an `InitStrategy`.
    - `rng_key`: a typed PRNG key, or one per chain (shape `(num_chains,)`).
    - `num_chains`: number of chains.
    - `dynamic`: the array leaves of the model arguments.
    - `max_tries`: number of draws per chain before giving up.
    - `chain_keys`: the first draws' keys, one per chain (default `split(rng_key, num_chains)`).
    - `forward`: take the gradient in forward mode (NumPyro's `forward_mode_differentiation`).
    - `max_rounding_error`: when given (the sampler's divergence threshold), a point whose
      potential energy's `rounding_error` exceeds it is redrawn as well: it is finite, but no
      Hamiltonian trajectory can leave it (Stan and NumPyro accept it, and their chains can stay
      there for the whole run).

    **Returns:** `(params, potential_energy, grad)`, each with a leading chain axis.

    **Raises:** `InitializationError` naming the model and what was non-finite (or too large to
    resolve).
    """
    propose = fns.init_proposer(strategy)
    sdyn = strategy.dynamic()
    if chain_keys is None:  # `split(rng_key, num_chains)` when `rng_key` is one key
        chain_keys = rng_key if rng_key.ndim else jax.random.split(rng_key, num_chains)
    params = propose(chain_keys, sdyn, dynamic)
    name = fns.name
    for attempt in range(1, max_tries + 1):
        try:
            pe, grad, param_ok, grad_ok = fns.potential_and_grad(params, dynamic, forward)
        except ValueError as err:
            if "while_loop" not in str(err) or forward:
                raise
            raise InitializationError(
                f"`{api}` needs the gradient of model `{name}`'s log density, but JAX cannot "
                "differentiate a `lax.while_loop` in reverse mode, and the model has sample sites "
                "inside one, through which the gradient would go. Use `lax.scan` or "
                "`lax.fori_loop` with static bounds (and `effppl.handlers.mask` for a "
                "data-dependent number of steps), or, with few latent coordinates, take the "
                "gradient in forward mode: `NUTS(model, forward_mode_differentiation=True)`, "
                "as in NumPyro.") from err
        finite = _chains_ok(pe, param_ok, grad_ok)
        ok = finite.copy()
        if max_rounding_error is not None:
            ok &= ~(rounding_error(params, pe, grad) > max_rounding_error)
        if ok.all():
            return params, pe, grad
        if attempt == max_tries:
            break
        if rng_key.ndim:  # a key per chain: each chain's redraws depend on its key alone
            keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(chain_keys, attempt)
        else:
            keys = jax.random.split(jax.random.fold_in(rng_key, attempt), num_chains)
        params = _select_chains(ok, params, propose(keys, sdyn, dynamic))
    chain = int(np.flatnonzero(~ok)[0])
    pe, param_ok, grad_ok = readable((pe, param_ok, grad_ok))
    problems = []
    bad_params = [n for n, f in param_ok.items() if not np.asarray(f)[chain]]
    if bad_params:
        problems.append(f"the initial unconstrained value was non-finite at sites {bad_params}")
    if not np.isfinite(np.asarray(pe)[chain]):
        problems.append(f"the potential energy was {float(np.asarray(pe)[chain])}")
    bad_grads = [n for n, f in grad_ok.items() if not np.asarray(f)[chain]]
    if bad_grads:
        problems.append(f"the gradient was non-finite at sites {bad_grads}")
    if finite[chain]:
        problems.append(
            f"the potential energy {float(np.asarray(pe)[chain]):.3g} and its gradient were "
            f"finite but so large that their rounding error "
            f"({float(rounding_error(params, pe, grad)[chain]):.3g}) exceeds the divergence "
            f"threshold ({max_rounding_error:g}): no trajectory can leave such a point")
    leaves = [x for x in jax.tree_util.tree_leaves(dynamic)
              if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
    found = sorted({kind for x in leaves for kind, bad in (("NaN", jnp.isnan), ("inf", jnp.isinf))
                    if bool(jnp.any(bad(x)))})  # (on the device: data may span processes)
    if found:
        problems.append(f"the model's data hold {' and '.join(found)} (in its array arguments): "
                        f"such a value among the observations or covariates makes the log density "
                        f"non-finite; drop those values, or mask them with `effppl.handlers.mask`")
    raise InitializationError(
        f"`{api}` could not find a valid initial point for model `{name}` after {max_tries} tries "
        f"with {strategy.describe()} (chain {chain} of {num_chains}): {'; '.join(problems)}. Check "
        "that the model's log density is finite and differentiable on the support of its priors, "
        "or pass init_strategy=init_to_value(values={...}) with a point known to be valid."
    )


def given_initial_params(fns, init_params: dict, num_chains: int, dynamic: tuple,
                         *, api: str = "effppl.infer.MCMC.run", forward: bool = False):
    """The user's initial point, checked, as `find_initial_params` returns one.

    **Arguments:** as `find_initial_params`, and `init_params`: dict latent site -> *unconstrained*
    value (as NumPyro's `MCMC.run(init_params=...)`; `effppl.handlers.unconstrain_fn` maps
    constrained values there), of the site's unconstrained shape (the same for every chain) or
    with a leading axis of length `num_chains`.

    **Returns:** `(params, potential_energy, grad)`, each with a leading chain axis.

    **Raises:** `InitializationError` naming the site whose value is missing, unknown or of the
    wrong shape, or the chain at which the log density or its gradient is not finite.
    """
    name = fns.name
    if not isinstance(init_params, Mapping):
        raise InitializationError(
            f"`{api}(init_params=...)` expected a dict site name -> unconstrained value, but got "
            f"{type(init_params).__name__}.")
    keys = jax.random.split(jax.random.key(0), num_chains)
    template = jax.eval_shape(fns.init_proposer(init_to_uniform()), keys, (), dynamic)
    if set(init_params) != set(template):
        raise InitializationError(
            f"`{api}(init_params=...)` needs an unconstrained value for each latent site of model "
            f"`{name}`, {sorted(template)}, but got {sorted(init_params)}. For constrained values, "
            "or to give only some sites, use init_strategy=init_to_value(values={...}).")
    params = {}
    for site, spec in template.items():
        problem = describe_non_array(init_params[site])
        if problem is not None:
            raise InitializationError(
                f"`{api}(init_params=...)`: the value of site `{site}` of model `{name}` must be "
                f"an array of numbers (unconstrained), but is {problem}.")
        value = jnp.asarray(init_params[site], spec.dtype)
        if value.shape == spec.shape[1:]:
            value = jnp.broadcast_to(value, spec.shape)
        if value.shape != spec.shape:
            raise InitializationError(
                f"`{api}(init_params=...)`: site `{site}` of model `{name}` has unconstrained shape "
                f"{spec.shape[1:]}, so its value must have that shape or {spec.shape} (one per "
                f"chain), but got {jnp.shape(init_params[site])}.")
        params[site] = value
    pe, grad, param_ok, grad_ok = fns.potential_and_grad(params, dynamic, forward)
    ok = _chains_ok(pe, param_ok, grad_ok)
    pe = readable(pe)
    if not ok.all():
        raise InitializationError(
            f"`{api}(init_params=...)`: the log density of model `{name}` or its gradient is not "
            f"finite at the given point of chain {int(np.flatnonzero(~ok)[0])} (potential energy "
            f"{float(np.asarray(pe)[~ok][0])}). The values are unconstrained: map constrained ones "
            "with effppl.handlers.unconstrain_fn, or use init_strategy=init_to_value(values=...).")
    return params, pe, grad
