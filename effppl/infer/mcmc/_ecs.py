"""Energy-conserving subsampling's pieces (`HMCECS`): the subsampled plates of a model, the log
likelihood of each plate's subsample, the block update of its indices, and the Taylor proxy
(control variates) of the log likelihood estimator.

The likelihood of a subsampled plate is estimated from its subsample `u` (`m` indices drawn with
replacement from `0 .. N - 1`) by the difference estimator of Quiroz et al. (2019), bias
corrected as in Dang et al. (2019): with `l_i` the log likelihood of element `i` and `q_i` a
proxy of it (a Taylor expansion around reference parameters, Bardenet et al. 2017),
`sum_all q + N mean_u(l - q) - N^2 / (2 m) var_u(l - q)`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to

from ...handlers import block, substitute, trace
from ._kernels import KernelSettingsError

__all__ = ["ECSError", "subsample_plates", "plate_log_liks", "block_update", "estimate",
           "taylor_proxy", "check_reference", "TaylorProxyState"]


class ECSError(KernelSettingsError, RuntimeError):
    """A model or proxy `HMCECS` cannot run (NumPyro raises a `RuntimeError` for these)."""


def subsample_plates(tr: dict) -> dict:
    """`{plate: (size, subsample_size)}` of the subsampled plates (`subsample_size < size`) in a
    trace (`effppl.handlers.trace(...).get_trace(...)`), in the trace's order."""
    out = {}
    for name, site in tr.items():
        args = tuple(site.get("args", ()) or ())
        if site["type"] == "plate" and len(args) == 2 and args[1] is not None \
                and args[0] > args[1]:
            out[name] = (int(args[0]), int(args[1]))
    return out


def _per_element(log_prob, dim: int):
    """`log_prob` summed over every axis but the plate's `dim` (a negative axis): `[m]`."""
    x = jnp.reshape(log_prob, (-1,) + jnp.shape(log_prob)[dim:]).sum(0)
    return jnp.reshape(x, x.shape[:1] + (-1,)).sum(-1)


def plate_log_liks(model: Callable, args: tuple, kwargs: dict, values: dict,
                   indices: dict) -> dict:
    """`{plate: float[m]}`: the log likelihood of each element of each subsampled plate's
    subsample, summed over the observed sites inside the plate, with the latent sites at
    `values` (constrained) and the plates at `indices` (`{plate: int[m]}`).
    **Raises:** `ECSError` naming a site inside two subsampled plates (NumPyro's error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with block(), trace() as tr, substitute(data=indices), substitute(data=values):
            model(*args, **kwargs)
    out: dict = {}
    for name, site in tr.items():
        if site["type"] != "sample" or not site["is_observed"]:
            continue
        frames = [f for f in site["cond_indep_stack"] if f.name in indices]
        if len(frames) > 1:
            raise ECSError(f"effppl.infer.HMCECS: Multiple subsample plates at site `{name}` "
                           f"({[f.name for f in frames]}) are not allowed. Please reshape your "
                           f"data.")
        if frames:
            frame = frames[0]
            lp = _per_element(site["fn"].log_prob(site["value"]), frame.dim)
            out[frame.name] = out[frame.name] + lp if frame.name in out else lp
    return out


def block_update(key, indices, size: int, num_blocks: int):
    """`indices` (int[m]) with one block of them, chosen uniformly among `num_blocks` blocks of
    `ceil(m / num_blocks)` positions, drawn anew uniformly from `0 .. size - 1` (Tran et al.
    2017's block pseudo-marginal update)."""
    m = indices.shape[0]
    block_size = (m - 1) // num_blocks + 1
    key_block, key_new = jax.random.split(key)
    chosen = jax.random.randint(key_block, (), 0, num_blocks)
    new = jax.random.randint(key_new, (m,), 0, size, dtype=indices.dtype)
    position = jnp.arange(m) // block_size
    return jnp.where(position == chosen, new, indices)


def estimate(log_liks, proxy_sum, proxy_subsample, size: int):
    """The bias-corrected difference estimator of a plate's log likelihood (the module's
    docstring) from its subsample's `log_liks` (float[m]), the proxy's sum over all `size`
    elements and its values at the subsample."""
    m = log_liks.shape[0]
    diff = log_liks - proxy_subsample
    return proxy_sum + size * jnp.mean(diff) - 0.5 * size ** 2 / m * jnp.var(diff)


class TaylorProxyState(NamedTuple):
    """The Taylor proxy's statistics at a subsample (`{plate: ...}` each): the log likelihood
    of each element at the reference parameters (`[m]`), its gradient (`[m, d]`) and, for
    degree 2, its Hessian (`[m, d, d]`; None for degree 1)."""

    ref_subsample_log_liks: Any
    ref_subsample_log_lik_grads: Any
    ref_subsample_log_lik_hessians: Any = None


def _over_all(fn: Callable, size: int, m: int):
    """`sum_i fn(indices)` over the whole plate (`0 .. size - 1`), in subsamples of `m` (the
    plate's shape in the model), the last one padded with index 0 and its padding weighted 0:
    `fn(indices, weights)` returns a pytree summed over the subsamples."""
    count = -(-size // m)
    idx = np.arange(count * m)
    weights = jnp.asarray((idx < size).reshape(count, m), jnp.result_type(float))
    idx = jnp.asarray(np.where(idx < size, idx, 0).reshape(count, m), jnp.int32)
    parts = jax.lax.map(lambda iw: fn(iw[0], iw[1]), (idx, weights))
    return jax.tree.map(lambda x: x.sum(0), parts)


def taylor_proxy(reference_params: dict, degree: int = 2) -> Callable:
    """NumPyro's `taylor_proxy`: the control variate of `HMCECS`'s likelihood estimator, a
    Taylor expansion of each element's log likelihood of degree 1 or 2 around
    `reference_params` (dict latent site -> constrained value, e.g. a MAP estimate; every
    latent site of the model), in the sites' unconstrained space (Bardenet, Doucet & Holmes
    2017, "On Markov chain Monte Carlo methods for tall data").

    Returns NumPyro's proxy constructor `construct(prototype_trace, subsample_plate_sizes,
    model, model_args, model_kwargs, num_blocks=1) -> (proxy_fn, gibbs_init, gibbs_update)`:
    `proxy_fn(params, plates, state) -> ({plate: sum over all elements}, {plate: [m] at the
    subsample})` at unconstrained `params` (raveled in the order of `reference_params`),
    `gibbs_init(rng_key, indices) -> TaylorProxyState` of a subsample (`{plate: int[m]}`),
    `gibbs_update(rng_key, indices, state) -> (new indices, their state)` (a block update).

    **Raises:** `ValueError` for a `degree` other than 1 or 2; `ECSError` (when the chains
    start) naming a latent site of the model missing from `reference_params`, a name that is
    not a latent site, or a value of the wrong shape, not finite or outside the site's support.
    """
    if degree not in (1, 2) or isinstance(degree, bool):
        raise ValueError(f"effppl.infer.HMCECS.taylor_proxy: the Taylor proxy is defined for "
                         f"degree 1 or 2, but got degree={degree!r}.")
    if not isinstance(reference_params, dict):
        raise TypeError(f"effppl.infer.HMCECS.taylor_proxy: reference_params must be a dict "
                        f"site -> value, but got {type(reference_params).__name__}.")

    def construct(prototype_trace, subsample_plate_sizes, model, model_args, model_kwargs,
                  num_blocks=1):
        check_reference(reference_params, prototype_trace)

        def transform(name):  # unconstrained -> constrained (the identity off sample sites)
            site = prototype_trace.get(name)
            if site is not None and site["type"] == "sample":
                return biject_to(site["fn"].support)
            return dist.transforms.IdentityTransform()

        ref = {n: transform(n).inv(jnp.asarray(v)) for n, v in reference_params.items()}
        ref_flat, unravel = ravel_pytree(ref)

        def log_lik(flat, indices):
            values = {n: transform(n)(v) for n, v in unravel(flat).items()}
            return plate_log_liks(model, model_args, model_kwargs, values, indices)

        def stats(flat, indices, weights=None):
            def total(f):  # (the plates in `weights` only: one plate's sum at a time)
                assert weights is not None
                return {k: (v * weights[k]).sum()
                        for k, v in log_lik(f, indices).items() if k in weights}

            def each(f):
                return log_lik(f, indices)

            # forward mode: `d` passes over the subsample each (reverse mode would take one
            # pass per element of a vector output: quadratic in the subsample size)
            fn = each if weights is None else total
            out = [fn(flat), jax.jacfwd(fn)(flat)]
            if degree == 2:
                out.append(jax.jacfwd(jax.jacfwd(fn))(flat))
            return out

        plates = dict(subsample_plate_sizes)
        ref_sums = [dict() for _ in range(degree + 1)]
        for name, (size, m) in plates.items():
            others = {k: jnp.zeros(mk, jnp.int32) for k, (_, mk) in plates.items() if k != name}

            def whole(idx, w, name=name, others=others):
                got = stats(ref_flat, {**others, name: idx}, {name: w})
                return [g[name] for g in got]

            for j, s in enumerate(_over_all(whole, size, m)):
                ref_sums[j][name] = s

        def gibbs_init(rng_key, gibbs_sites):
            return TaylorProxyState(*stats(ref_flat, dict(gibbs_sites)))

        def gibbs_update(rng_key, gibbs_sites, gibbs_state):
            new = {}
            for name, idx in gibbs_sites.items():
                rng_key, key = jax.random.split(rng_key)
                new[name] = block_update(key, idx, plates[name][0], num_blocks)
            return new, gibbs_init(None, new)

        def proxy_fn(params, subsample_lik_sites, gibbs_state):
            diff = ravel_pytree(params)[0] - ref_flat
            total, sub = {}, {}
            for name in subsample_lik_sites:
                total[name] = ref_sums[0][name] + ref_sums[1][name] @ diff
                sub[name] = (gibbs_state.ref_subsample_log_liks[name]
                             + gibbs_state.ref_subsample_log_lik_grads[name] @ diff)
                if degree == 2:
                    total[name] = total[name] + 0.5 * diff @ ref_sums[2][name] @ diff
                    sub[name] = sub[name] + 0.5 * (
                        gibbs_state.ref_subsample_log_lik_hessians[name] @ diff) @ diff
            return total, sub

        return proxy_fn, gibbs_init, gibbs_update

    construct.reference_params = reference_params  # (`HMCECS` checks them before compiling)
    return construct


def check_reference(reference_params: dict, prototype_trace: dict) -> None:
    """`ECSError` naming the site unless `reference_params` give every latent site of the
    prototype trace (and nothing else) a finite value of its shape inside its support."""
    latent = {n: s for n, s in prototype_trace.items()
              if s["type"] == "sample" and not s["is_observed"]}
    api = "effppl.infer.HMCECS.taylor_proxy"
    missing = [n for n in latent if n not in reference_params]
    if missing:
        raise ECSError(f"{api}: reference_params lacks the latent site(s) {missing} of the "
                       f"model; the proxy expands the log likelihood around a value of every "
                       f"latent site.")
    extra = [n for n in reference_params if n not in latent]
    if extra:
        raise ECSError(f"{api}: reference_params names {extra}, which are not latent sites of "
                       f"the model (its latent sites: {sorted(latent)}).")
    for name, site in latent.items():
        value = reference_params[name]
        if isinstance(value, jax.core.Tracer):
            continue  # (checked where the values are known)
        value = np.asarray(value)
        shape = np.shape(site["value"])
        if value.shape != shape:
            raise ECSError(f"{api}: reference_params[{name!r}] has shape {value.shape}, but "
                           f"site `{name}` has shape {shape}.")
        if not np.all(np.isfinite(value)):
            raise ECSError(f"{api}: reference_params[{name!r}] is not finite "
                           f"({value.tolist()!r:.60}).")
        with jax.ensure_compile_time_eval():  # (also while a sampler's program is traced)
            inside = np.asarray(site["fn"].support(jnp.asarray(value, site["value"].dtype)))
        if not np.all(inside):
            raise ECSError(f"{api}: reference_params[{name!r}] = {value.tolist()!r:.60} is outside the "
                           f"support of site `{name}` ({site['fn'].support}).")
