"""`HMCGibbs`: HMC (or NUTS) within Gibbs, with the user's Gibbs step for some sites (NumPyro's
`HMCGibbs`), driven by the same `MCMC` warmup as `NUTS` and `HMC`.

The chain moves every latent site's unconstrained value, as `NUTS` does; a transition first
draws the Gibbs sites by the user's `gibbs_fn` (from their constrained values and the other
sites'), writes them back unconstrained, and then takes one transition of the inner kernel on
the other sites' coordinates alone, with the Gibbs sites held at their new values. The warmup's
mass matrix covers every coordinate; the inner kernel takes its block of the HMC sites.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .._compile._persistent import digest
from .._model import model_name
from ._kernels import HMC, NUTS, KernelSettingsError, _HMCFamily, _untraced

__all__ = ["HMCGibbs", "inner_checked", "per_element", "step_on"]


class _ByIdentity:
    """A function in a kernel's `settings()`: equal only to itself (two Gibbs steps never share a
    compiled sampler), shown by its qualified name (a checkpoint's settings are compared by
    their text)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __eq__(self, other):
        return isinstance(other, _ByIdentity) and other.fn is self.fn

    def __hash__(self):
        return id(self.fn)

    def __repr__(self):
        fn = getattr(self.fn, "func", self.fn)  # (a `functools.partial`: its function)
        return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


class HMCGibbs(_HMCFamily):
    """HMC-within-Gibbs: each transition draws the `gibbs_sites` with the user's `gibbs_fn`,
    then moves the other latent sites by one transition of `inner_kernel` (`HMC` or `NUTS`)
    with the Gibbs sites held at their new values. As NumPyro's `HMCGibbs`.

    It is the user's task that `gibbs_fn` draws from the Gibbs sites' conditional posterior given
    the other sites (and the data it closes over); the chain then targets the model's posterior.

    **Arguments:**

    - `inner_kernel`: a `NUTS` or `HMC` kernel of the model (its settings, adaptation and
      `init_strategy` serve the whole chain; its `mass_matrix` `"diag"` or `"dense"`).
    - `gibbs_fn(rng_key, gibbs_sites, hmc_sites)`: called by keyword with a PRNG key (use it
      for every draw), a dict of the Gibbs sites' current (constrained) values and a dict of the
      other latent sites' constrained values and the model's deterministic sites; returns a dict
      of new values for every Gibbs site, of the same shapes. It is traced once per compiled
      chunk (a JAX function: no Python side effects per transition).
    - `gibbs_sites`: the names of the Gibbs sites (continuous latent sites of the model whose
      support does not depend on other latent sites; the other sites' supports may depend on
      them).

    `gibbs_fn` may read data it closes over (a global): its program, with those arrays, keys
    the compiled sampler, so new data there compile it anew (data passed to `MCMC.run` as model
    arguments do not).

    The warmup (Stan's window adaptation) tunes the step size and the mass matrix of the HMC
    sites; the Gibbs sites are drawn in warmup too, as in NumPyro. `MCMC.get_samples()` holds
    every latent site; the statistics are the inner kernel's.

    **Raises:** `KernelSettingsError` for an `inner_kernel` that is not `NUTS` or `HMC` of a
    model (or uses another `mass_matrix`), a non-callable `gibbs_fn`, or `gibbs_sites` that are
    not a non-empty sequence of distinct names; when the chains run, for a Gibbs site that is
    not a continuous latent site of the model (a discrete one is summed out by enumeration), for
    a model whose latent sites are all Gibbs sites, and for a `gibbs_fn` whose result is not a
    dict with a value of the right shape for each Gibbs site.

    **Warns:** `UserWarning` after `MCMC.run`, naming `gibbs_fn` and the site, when draws of a
    Gibbs site are not finite (`gibbs_fn` returned a value outside the site's support).

    **References:** Geman & Geman (1984), "Stochastic relaxation, Gibbs distributions, and the
    Bayesian restoration of images" (Gibbs sampling); Neal (2011), "MCMC using Hamiltonian
    dynamics", sec. 5.4.2 (HMC updating a subset of the variables); NumPyro's `HMCGibbs`.

    Example: a normal mean `mu` with a conjugate Gibbs step, and a scale `sigma` moved by NUTS.

        >>> import jax, jax.numpy as jnp
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import MCMC, NUTS, HMCGibbs
        >>> z = jax.random.normal(jax.random.key(1), (200,))
        >>> y = 3.0 + 0.5 * (z - z.mean()) / z.std()  # mean 3 and standard deviation 0.5
        >>> def model(y):
        ...     mu = effppl.sample("mu", dist.Normal(0.0, 10.0))
        ...     sigma = effppl.sample("sigma", dist.HalfNormal(2.0))
        ...     with effppl.plate("N", y.shape[0]):
        ...         effppl.sample("y", dist.Normal(mu, sigma), obs=y)
        >>> def gibbs_fn(rng_key, gibbs_sites, hmc_sites):
        ...     precision = 1 / 100.0 + y.shape[0] / hmc_sites["sigma"] ** 2
        ...     mean = (y.sum() / hmc_sites["sigma"] ** 2) / precision
        ...     return {"mu": mean + jax.random.normal(rng_key) / jnp.sqrt(precision)}
        >>> kernel = HMCGibbs(NUTS(model), gibbs_fn=gibbs_fn, gibbs_sites=["mu"])
        >>> mcmc = MCMC(kernel, num_warmup=300, num_samples=500, progress_bar=False)
        >>> mcmc.run(jax.random.key(0), y)
        >>> draws = mcmc.get_samples()
        >>> round(float(draws["mu"].mean()), 1), round(float(draws["sigma"].mean()), 1)
        (3.0, 0.5)
    """

    _api = "HMCGibbs"
    runs_user_code = True  # `gibbs_fn`: the sampler's program is not stored on disk

    def __init__(self, inner_kernel: HMC | NUTS, gibbs_fn: Callable, gibbs_sites: Sequence[str]):
        api = self._api
        inner_checked(api, inner_kernel)
        if not callable(gibbs_fn):
            raise KernelSettingsError(
                f"`effppl.infer.{api}(..., gibbs_fn=...)` expected a callable "
                f"`gibbs_fn(rng_key, gibbs_sites, hmc_sites)`, but got {gibbs_fn!r:.60}.")
        if isinstance(gibbs_sites, str) or not isinstance(gibbs_sites, Sequence) \
                or not gibbs_sites or not all(isinstance(n, str) for n in gibbs_sites) \
                or len(set(gibbs_sites)) != len(gibbs_sites):
            raise KernelSettingsError(
                f"`effppl.infer.{api}(..., gibbs_sites=...)` expected a non-empty list of "
                f"distinct site names, but got {gibbs_sites!r:.80}.")
        _untraced(api, {"gibbs_sites": list(gibbs_sites)})
        self.__dict__.update(inner_kernel.__dict__)  # the inner kernel's settings
        self.inner_kernel = inner_kernel
        self.gibbs_fn = gibbs_fn
        self.gibbs_sites = tuple(gibbs_sites)

    def settings(self) -> tuple:
        return (*self.inner_kernel.settings(), self._api, _ByIdentity(self.gibbs_fn),
                self.gibbs_sites)

    def user_code_key(self, fns, position, dynamic) -> str | None:
        """A digest of `gibbs_fn`'s program at the model's value types (`position`: one chain's
        unconstrained values, `ShapeDtypeStruct`s; `dynamic`: the model data): its text and the
        arrays it closes over, so that a chunk is compiled anew when they change
        (`_sampler.by_user_code`). `None` when a Gibbs site is not among the values (the
        chunk's trace then raises the error naming it)."""
        shapes = jax.eval_shape(fns.constrain, position, dynamic)
        if any(n not in shapes or n not in position for n in self.gibbs_sites):
            return None
        gibbs = {n: shapes[n] for n in self.gibbs_sites}
        others = {n: v for n, v in shapes.items() if n not in gibbs}

        def step(key, gibbs_sites, hmc_sites):
            return _checked(self._api, self.gibbs_fn(rng_key=key, gibbs_sites=gibbs_sites,
                                                     hmc_sites=hmc_sites), gibbs_sites)

        closed = jax.make_jaxpr(step)(jax.random.key(0), gibbs, others)
        return digest(str(closed.jaxpr), list(closed.consts))

    def check_draws(self, model: str, samples: dict) -> None:
        """A `UserWarning` naming `gibbs_fn` and the Gibbs sites whose draws are not finite
        (`samples`: `{site: [chain, draw, ...]}`): `gibbs_fn` returned a value outside the
        site's support (its unconstrained value is NaN, and the chain stays there)."""
        bad = {}
        for name in self.gibbs_sites:
            ok = np.isfinite(np.asarray(samples[name], np.float64))
            ok = ok.reshape(ok.shape[:2] + (-1,)).all(axis=-1) if ok.ndim > 2 else ok
            if not ok.all():
                chains = [int(c) for c in np.flatnonzero(~ok.all(axis=1))]
                bad[name] = (chains, int(np.argmin(ok[chains[0]])))
        if bad:
            what = "; ".join(f"'{n}' in chains {c} (chain {c[0]} from draw {d})"
                             for n, (c, d) in bad.items())
            warnings.warn(
                f"effppl.infer.{self._api}: draws of Gibbs sites of model `{model}` are not "
                f"finite: {what}. `gibbs_fn` ({_ByIdentity(self.gibbs_fn)!r}) returned a value "
                f"outside the site's support (or not finite), and the chain cannot leave it. "
                f"Check that it draws from the site's conditional within its support.",
                UserWarning, stacklevel=4)

    def init_state(self, position, logdensity, logdensity_grad):
        return self.inner_kernel.init_state(position, logdensity, logdensity_grad)

    def build_kernel(self) -> Callable:
        return self.inner_kernel.build_kernel()

    def kernel_kwargs(self) -> dict:
        return self.inner_kernel.kernel_kwargs()

    def stats(self, info, dtype) -> dict:
        return self.inner_kernel.stats(info, dtype)

    def empty_stats(self, dtype) -> dict:
        return self.inner_kernel.empty_stats(dtype)

    def bind(self, kernel: Callable, model) -> Callable:
        """The HMC-within-Gibbs transition of one chunk: the Gibbs step, then `kernel` on the
        HMC sites' coordinates (see the module's docstring)."""
        names = sorted(model.position)
        missing = [n for n in self.gibbs_sites if n not in model.position]
        if missing:
            raise KernelSettingsError(
                f"`effppl.infer.{self._api}`: gibbs_sites {missing} are not continuous latent "
                f"sites of model `{model_name(self.model)}` (its continuous latent "
                f"sites: {names}; a discrete site is summed out by enumeration, or updated by "
                f"`DiscreteHMCGibbs`).")
        gibbs_mask = per_element(model.position, lambda n: n in self.gibbs_sites)
        hmc_index = np.flatnonzero(~gibbs_mask)
        if hmc_index.size == 0:
            raise KernelSettingsError(
                f"`effppl.infer.{self._api}`: every latent site of the model is a Gibbs site "
                f"({list(self.gibbs_sites)}): there is nothing left for the HMC kernel to move.")
        hmc_sites = tuple(n for n in names if n not in self.gibbs_sites)
        moving = _reading(model, hmc_sites, self.gibbs_sites)
        if moving:
            raise KernelSettingsError(
                f"`effppl.infer.{self._api}`: the support of Gibbs site '{moving[0]}' depends on "
                f"other latent sites (or the site is computed in a loop with them): the HMC "
                f"step holds the Gibbs sites' unconstrained values, which would move "
                f"'{moving[0]}' (NumPyro refuses such supports too). Reparametrise the site to a "
                f"fixed support.")
        # HMC sites whose support depends on a Gibbs site: unconstrained anew after the Gibbs
        # step, so that their values stay what the Gibbs step was given
        follow = set(_reading(model, self.gibbs_sites, hmc_sites)) | set(self.gibbs_sites)
        gibbs_fn, gibbs_sites, api = self.gibbs_fn, self.gibbs_sites, self._api

        def transition(rng_key, state, logdensity, step_size, inverse_mass_matrix, **kwargs):
            key_gibbs, key_hmc = jax.random.split(rng_key)
            flat = state.position
            values = model.constrain(flat)
            now = {n: values[n] for n in gibbs_sites}
            new = gibbs_fn(rng_key=key_gibbs, gibbs_sites=now,
                           hmc_sites={n: v for n, v in values.items() if n not in now})
            new = _checked(api, new, now)
            latent = {n: values[n] for n in model.position}
            unconstrained = model.unconstrain({**latent, **new})
            sites = model.unravel(flat)
            flat = ravel_pytree({n: unconstrained[n] if n in follow else v
                                 for n, v in sites.items()})[0]

            return step_on(kernel, key_hmc, state, flat, hmc_index, logdensity, step_size,
                           inverse_mass_matrix, kwargs)

        return transition


def step_on(kernel, key, state, flat, index, logdensity, step_size, inverse_mass_matrix,
            kwargs):
    """One transition of `kernel` on the coordinates `index` (NumPy) of the flat vector `flat`,
    the others held where they are: the chain's new state over the whole vector (the gradient
    zero off `index`) and the kernel's info."""
    def on_index(position):
        return logdensity(flat.at[index].set(position))

    value, grad = jax.value_and_grad(on_index)(flat[index])
    imm = inverse_mass_matrix
    imm = imm[index] if jnp.ndim(imm) == 1 else imm[np.ix_(index, index)]
    inner = state._replace(position=flat[index], logdensity=value, logdensity_grad=grad)
    inner, info = kernel(key, inner, on_index, step_size, imm, **kwargs)
    full_grad = jnp.zeros_like(flat).at[index].set(inner.logdensity_grad)
    return inner._replace(position=flat.at[index].set(inner.position),
                          logdensity_grad=full_grad), info


def per_element(position: dict, value_of: Callable) -> np.ndarray:
    """`value_of(site)` for each element of the flat vector of `position` (dict site ->
    array), in that vector's order (`ravel_pytree`'s: the leaves' order)."""
    return np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(
        {n: np.full(np.shape(v), value_of(n)) for n, v in position.items()})])


def inner_checked(api: str, inner_kernel) -> None:
    """A `KernelSettingsError` unless `inner_kernel` is a `NUTS` or `HMC` kernel of a model
    with a `"diag"` or `"dense"` mass matrix (the inner kernel of a Gibbs kernel `api`)."""
    if type(inner_kernel) not in (HMC, NUTS):
        raise KernelSettingsError(
            f"`effppl.infer.{api}(inner_kernel, ...)` expected an effppl.infer `NUTS` or "
            f"`HMC` kernel, but got {inner_kernel!r:.80}.")
    if inner_kernel.potential_fn is not None:
        raise KernelSettingsError(
            f"`effppl.infer.{api}`: the inner kernel was built with `potential_fn`; "
            f"HMC-within-Gibbs needs its model (the Gibbs sites are model sites).")
    if inner_kernel.find_heuristic_step_size:
        raise KernelSettingsError(
            f"`effppl.infer.{api}`: the inner kernel's find_heuristic_step_size=True is not "
            f"supported here (its one-step search would move the Gibbs sites' coordinates); "
            f"the window adaptation tunes the step size from the given one.")
    if inner_kernel.mass_matrix not in ("diag", "dense"):
        raise KernelSettingsError(
            f"`effppl.infer.{api}`: the inner kernel's mass_matrix="
            f"{inner_kernel.mass_matrix!r} is not supported: nutpie's Fisher schemes adapt "
            f"from the gradient of every coordinate, and the Gibbs sites have none; use "
            f"'diag' or 'dense'.")


def _reading(model, sources: tuple, targets: tuple) -> list:
    """The `targets` (latent site names) whose unconstrained value depends on the value of a
    site in `sources`: their supports do (`Uniform(0, theta)`). Decided on the data flow of
    `model.unconstrain`'s program (an equation reading a dependent value makes all its outputs
    dependent: a site computed in a loop with a source counts as dependent too)."""
    shapes = jax.eval_shape(model.constrain, ravel_pytree(model.position)[0])
    given = {n: shapes[n] for n in sources}
    rest = {n: shapes[n] for n in model.position if n not in sources}

    def unconstrained(given, rest):
        out = model.unconstrain({**given, **rest})
        return [out[n] for n in targets]

    jaxpr = jax.make_jaxpr(unconstrained)(given, rest).jaxpr
    dependent = set(jaxpr.invars[:len(jax.tree.leaves(given))])
    for eqn in jaxpr.eqns:
        if any(type(v).__name__ != "Literal" and v in dependent for v in eqn.invars):
            dependent.update(eqn.outvars)
    return [name for name, var in zip(targets, jaxpr.outvars)
            if type(var).__name__ != "Literal" and var in dependent]


def _checked(api: str, new, now: dict) -> dict:
    """`gibbs_fn`'s result, each value as an array of its site's dtype; a `KernelSettingsError`
    unless it is a dict with a value of each Gibbs site's shape (raised while tracing)."""
    if not isinstance(new, dict) or set(new) != set(now):
        got = sorted(new) if isinstance(new, dict) else type(new).__name__
        raise KernelSettingsError(
            f"`effppl.infer.{api}`: `gibbs_fn` must return a dict with a new value for each "
            f"Gibbs site {sorted(now)}, but returned {got}.")
    out = {}
    for name, value in new.items():
        try:
            value = jnp.asarray(value)
        except TypeError as err:
            raise KernelSettingsError(
                f"`effppl.infer.{api}`: `gibbs_fn` returned {value!r:.60} for Gibbs site "
                f"'{name}', which is not an array of numbers ({err}).") from None
        if not (jnp.issubdtype(value.dtype, jnp.floating)
                or jnp.issubdtype(value.dtype, jnp.integer) or value.dtype == jnp.bool_):
            raise KernelSettingsError(
                f"`effppl.infer.{api}`: `gibbs_fn` returned a value of dtype {value.dtype} for "
                f"Gibbs site '{name}', whose value is real ({jnp.result_type(now[name])}).")
        if value.shape != jnp.shape(now[name]):
            raise KernelSettingsError(
                f"`effppl.infer.{api}`: `gibbs_fn` returned a value of shape {value.shape} for "
                f"Gibbs site '{name}', whose value has shape {jnp.shape(now[name])}.")
        out[name] = value.astype(jnp.result_type(now[name]))
    return out
