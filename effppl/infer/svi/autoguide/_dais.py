"""The annealed-importance-sampling autoguides (NumPyro's `AutoDAIS`, `AutoSemiDAIS`): a draw from
a base normal moved by K steps of uncorrected underdamped Langevin (HMC) dynamics along a path of
densities from the base to the model's posterior, its density the base's times the ratio of the
momenta's kinetic terms (Differentiable Annealed Importance Sampling).

One step `k` (annealing `beta_k`, step size `eta_k`, mass `m`, damping `gamma`), on the position
`z` and momentum `v` (NumPyro's parametrization, its param names, shapes and constraints):

    z' = z + eta_k v / (2 m)
    v' = v + eta_k [(1 - beta_k) grad log q0(z') + beta_k grad log p(z')]
    z  = z' + eta_k v' / (2 m)
    v  = gamma v' + sqrt(1 - gamma^2) eps_k,       eps_k ~ Normal(0, m)

and the guide's log density gains `log N(v; 0, m) - log N(v'; 0, m)` at each step (a `factor`
site), so that the ELBO is the DAIS bound on the model's evidence.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

from .... import handlers
from ....handlers import internal as ppl
from ....handlers import unconstrained_log_density
from ....handlers.internal import substitute_exactly
from ..._init import init_to_uniform
from . import _plates as plates_
from ._base import AutoGuide
from ._continuous import AutoContinuous
from ._dais_local import local_guide_base
from ._errors import AutoGuideError
from ._per_site import AutoNormal
from ._sites import fixed_supports

__all__ = ["AutoDAIS", "AutoSemiDAIS"]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _DAISSettings:
    """The settings both DAIS guides share, checked (NumPyro's rules, each error naming the
    argument): `K` an int >= 1; `0 < eta_init < eta_max`; `0 < gamma_init < 1`; `init_scale >
    0`."""

    def _dais_settings(self, K, eta_init, eta_max, gamma_init, init_scale):
        guide = f"effppl.infer.autoguide.{type(self).__name__}"
        if isinstance(K, bool) or not isinstance(K, int) or K < 1:
            raise AutoGuideError(f"{guide}(K={K!r}) expected an int >= 1 (the number of "
                                 f"annealed HMC steps), as NumPyro's K >= 1.")
        if not _number(eta_max) or eta_max <= 0:
            raise AutoGuideError(f"{guide}(eta_max={eta_max!r}) expected a positive number "
                                 f"(the largest HMC step size).")
        if not _number(eta_init) or not 0 < eta_init < eta_max:
            raise AutoGuideError(f"{guide}(eta_init={eta_init!r}) expected a number with 0 < "
                                 f"eta_init < eta_max = {eta_max!r} (the initial HMC step "
                                 f"size).")
        if not _number(gamma_init) or not 0 < gamma_init < 1:
            raise AutoGuideError(f"{guide}(gamma_init={gamma_init!r}) expected a number in the "
                                 f"open interval (0, 1) (the momentum damping).")
        if not _number(init_scale) or init_scale <= 0:
            raise AutoGuideError(f"{guide}(init_scale={init_scale!r}) expected a positive "
                                 f"number (the base normal's initial scale).")
        self.K = K
        self.eta_init, self.eta_max = float(eta_init), float(eta_max)
        self.gamma_init, self.init_scale = float(gamma_init), float(init_scale)

    def _not_defined(self, api):
        return NotImplementedError(
            f"{type(self).__name__} has no {api} (as NumPyro's): its posterior is the law of "
            f"annealed HMC draws, with no closed form. Use `sample_posterior(key, params, "
            f"sample_shape=(n,))` and summarise the draws.")

    def median(self, params):
        """Not defined (`NotImplementedError`, as NumPyro's): use `sample_posterior`."""
        raise self._not_defined("median")

    def quantiles(self, params, quantiles):
        """Not defined (`NotImplementedError`, as NumPyro's): use `sample_posterior`."""
        raise self._not_defined("quantiles")


def _annealed_hmc(z_0, eps, betas, *, eta0, eta_coeff, eta_max, gamma, inv_mass,
                  momentum_log_prob, base_log_prob, target_log_prob):
    """K steps of uncorrected underdamped Langevin dynamics from `z_0` (the module docstring):
    `(z_K, sum of log N(v_k) - log N(v'_k))`. `eps` `(K, *z.shape)`: the momentum refreshments
    (the last one is the initial momentum, as NumPyro's); `betas` `(K, ...)`: the annealing
    schedule; `base_log_prob`, `target_log_prob`: scalar functions of `z` whose gradients give
    the path's forces. Broadcasting step params (per data point) are the caller's: they arrive
    shaped to multiply `z`."""
    def step(carry, eps_beta):
        eps_k, beta = eps_beta
        z, v_prev, log_factor = carry
        eta = jnp.clip(eta0 + eta_coeff * beta, 0.0, eta_max)
        z_half = z + v_prev * eta * inv_mass
        force = ((1.0 - beta) * jax.grad(base_log_prob)(z_half)
                 + beta * jax.grad(target_log_prob)(z_half))
        v_hat = v_prev + eta * force
        z = z_half + v_hat * eta * inv_mass
        v = gamma * v_hat + jnp.sqrt(1.0 - gamma ** 2) * eps_k
        log_factor = log_factor + momentum_log_prob(v_prev) - momentum_log_prob(v_hat)
        return (z, v, log_factor), None

    zero = jnp.zeros(jnp.shape(momentum_log_prob(eps[-1])), jnp.result_type(z_0))
    (z, _, log_factor), _ = jax.lax.scan(step, (z_0, eps[-1], zero), (eps, betas))
    return z, log_factor


class AutoDAIS(_DAISSettings, AutoContinuous):
    """Differentiable annealed importance sampling over the flat unconstrained latent vector
    (size D): a base normal draw `z_0` moved by `K` steps of uncorrected underdamped Langevin
    (HMC) dynamics that anneal from the base density to the model's posterior, with learnable
    step sizes, damping, annealing schedule, mass matrix and base (NumPyro's `AutoDAIS`, its
    params and semantics; the method is called Uncorrected Hamiltonian Annealing in Geffner and
    Domke). The guide's density of its draw is the base's times the ratio of the momenta's
    kinetic terms (a `factor` site `{prefix}_factor`); the ELBO is the DAIS bound, tighter
    than the base normal's.

    **Arguments:** `model`; `K` (int >= 1, default 4: the number of annealed steps);
    `base_dist`: `"diagonal"` (default) or `"cholesky"` (a full-covariance base normal);
    `eta_init` (default 0.01) and `eta_max` (0.1): the initial and largest step size, `0 <
    eta_init < eta_max`; `gamma_init` (in (0, 1), default 0.9): the initial momentum damping;
    `prefix`; `init_loc_fn` (the base's initial loc); `init_scale` (> 0, default 0.1): the
    base's initial scale; `forward_mode_differentiation` (accepted, as NumPyro's; gradients are
    reverse mode).

    **Params** (D the latent size): `{prefix}_eta0` `()` (in `(0, eta_max)`),
    `{prefix}_eta_coeff` `()` (step `k`'s size is `clip(eta0 + eta_coeff * beta_k, 0,
    eta_max)`), `{prefix}_gamma` `()` (in `(0, 1)`), `{prefix}_beta_increments` `(K,)`
    (positive; `beta = cumsum / sum`), `{prefix}_mass_matrix` `(D,)` (positive),
    `{prefix}_z_0_loc` `(D,)`, and `{prefix}_z_0_scale` `(D,)` (positive) or
    `{prefix}_z_0_scale_tril` `(D, D)` (`scaled_unit_lower_cholesky`). The guide's sample
    sites: `{prefix}_z_0` (the base draw), `{prefix}_momentum` `(K, D)` (masked out of the
    ELBO), the factor `{prefix}_factor`, then one `Delta` per latent site.

    The target's gradient runs the model (hidden by `block`) at the arguments the guide is
    called with (NumPyro's reads the arguments it first ran with), its params at their initial
    values.

    **Raises:** `AutoGuideError` (a `ValueError`) naming the argument for `K` not an int >= 1,
    `base_dist` not `"diagonal"`/`"cholesky"`, `eta_init`, `eta_max`, `gamma_init` or
    `init_scale` out of range; when the guide first runs, `AutoGuideError` for a latent site in
    a subsampled plate (as `AutoContinuous`), and `NotImplementedError` (as NumPyro's) for a
    model with any subsampled plate: use `AutoSemiDAIS`. `median`, `quantiles`,
    `get_base_dist`, `get_transform` and `get_posterior` raise `NotImplementedError`, as
    NumPyro's: use `sample_posterior`.

    **References:** NumPyro's `AutoDAIS`; Geffner and Domke (2021), "MCMC Variational Inference
    via Uncorrected Hamiltonian Annealing"; Zhang, Hsu, Li, Finn and Grosse (2021),
    "Differentiable Annealed Importance Sampling and the Perils of Gradient Noise".
    """

    def __init__(self, model, *, K=4, base_dist="diagonal", eta_init=0.01, eta_max=0.1,
                 gamma_init=0.9, prefix="auto", init_loc_fn=init_to_uniform, init_scale=0.1,
                 forward_mode_differentiation=False):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn)
        if base_dist not in ("diagonal", "cholesky"):
            raise AutoGuideError(f"effppl.infer.autoguide.AutoDAIS(base_dist={base_dist!r:.60})"
                                 f" expected \"diagonal\" or \"cholesky\" (the base normal's "
                                 f"covariance), as NumPyro's.")
        self._dais_settings(K, eta_init, eta_max, gamma_init, init_scale)
        self.base_dist = base_dist
        self.forward_mode_differentiation = bool(forward_mode_differentiation)

    def _check_no_subsampling(self, args, kwargs):
        analysis = ppl.analyze_model(self.model, args, kwargs)
        subsampled = plates_.subsampled_plates(analysis)
        if subsampled:  # NumPyro's NotImplementedError
            raise NotImplementedError(
                f"effppl.infer.autoguide.AutoDAIS cannot be used with data subsampling (as "
                f"NumPyro's): the model's plate `{sorted(subsampled)[0]}` is subsampled. Use "
                f"AutoSemiDAIS, or a plate without subsample_size.")

    def __call__(self, *args, **kwargs):
        self._check_no_subsampling(args, kwargs)
        sites = self._latent_sites(args, kwargs)
        layout = self._layout(sites)
        init = self._init_locs(args, kwargs, sites, self._init_key(args, kwargs, sites))
        flat_init = jnp.concatenate([jnp.ravel(init[n]) for n, _, _ in layout])
        latent = self._dais(flat_init, layout, args, kwargs)
        values, log_dets, _ = self._constrain(args, kwargs, self._unpack(latent, layout), sites)
        return self._emit(values, sites, {n: -log_dets[n] for n in values})

    def _dais(self, flat_init, layout, args, kwargs):
        """The annealed draw of the flat latent vector: the params, the base draw, the momenta,
        the HMC steps and the factor, in NumPyro's order (so the same key gives the same draw).
        """
        p, d, K = self.prefix, flat_init.shape[0], self.K
        target = self._target(layout, args, kwargs)
        eta0 = ppl.param(f"{p}_eta0", jnp.asarray(self.eta_init, flat_init.dtype),
                         constraint=constraints.interval(0.0, self.eta_max))
        eta_coeff = ppl.param(f"{p}_eta_coeff", jnp.zeros((), flat_init.dtype))
        gamma = ppl.param(f"{p}_gamma", jnp.asarray(self.gamma_init, flat_init.dtype),
                          constraint=constraints.interval(0.0, 1.0))
        increments = ppl.param(f"{p}_beta_increments", jnp.ones(K, flat_init.dtype),
                               constraint=constraints.positive)
        betas = jnp.cumsum(increments)
        betas = betas / betas[-1]
        mass = ppl.param(f"{p}_mass_matrix", jnp.ones(d, flat_init.dtype),
                         constraint=constraints.positive)
        loc = ppl.param(f"{p}_z_0_loc", flat_init)
        if self.base_dist == "diagonal":
            scale = ppl.param(f"{p}_z_0_scale", jnp.full_like(flat_init, self.init_scale),
                              constraint=constraints.positive)
            base = dist.Normal(loc, scale).to_event(1)
        else:
            scale_tril = ppl.param(f"{p}_z_0_scale_tril",
                                   jnp.eye(d, dtype=flat_init.dtype) * self.init_scale,
                                   constraint=constraints.scaled_unit_lower_cholesky)
            base = dist.MultivariateNormal(loc, scale_tril=scale_tril)
        z_0 = ppl.sample(f"{p}_z_0", base, infer={"is_auxiliary": True})
        momentum = dist.Normal(0.0, mass).to_event(1)
        eps = ppl.sample(f"{p}_momentum", momentum.expand((K,)).to_event(1).mask(False),
                         infer={"is_auxiliary": True})

        z, log_factor = _annealed_hmc(
            z_0, eps, betas, eta0=eta0, eta_coeff=eta_coeff, eta_max=self.eta_max, gamma=gamma,
            inv_mass=0.5 / mass, momentum_log_prob=momentum.log_prob,
            base_log_prob=base.log_prob, target_log_prob=target)
        ppl.factor(f"{p}_factor", log_factor)
        return z

    def _target(self, layout, args, kwargs):
        """The annealing's target: the model's log density (Jacobians included) of the flat
        unconstrained latent vector, the model hidden by `block`."""
        def target(x):
            return handlers.block(lambda: unconstrained_log_density(
                self.model, args, kwargs, self._unpack(x, layout)))()
        return target

    def _param_shapes(self, size):
        shapes = {"eta0": (), "eta_coeff": (), "gamma": (), "beta_increments": (self.K,),
                  "mass_matrix": (size,), "z_0_loc": (size,)}
        if self.base_dist == "diagonal":
            shapes["z_0_scale"] = (size,)
        else:
            shapes["z_0_scale_tril"] = (size, size)
        return shapes

    def _param_support(self, name):
        p = self.prefix
        return {f"{p}_z_0_scale": constraints.positive,
                f"{p}_mass_matrix": constraints.positive,
                f"{p}_beta_increments": constraints.positive,
                f"{p}_z_0_scale_tril": constraints.lower_cholesky}.get(name)

    def get_base_dist(self):
        """Not defined (`NotImplementedError`, as NumPyro's)."""
        raise self._not_defined("base distribution")

    def get_transform(self, params):
        """Not defined (`NotImplementedError`, as NumPyro's)."""
        raise self._not_defined("transform")

    def get_posterior(self, params):
        """Not defined (`NotImplementedError`, as NumPyro's): use `sample_posterior`."""
        raise self._not_defined("closed-form posterior")


class _LocalPlan(NamedTuple):
    """Where `AutoSemiDAIS`'s local latent sites sit: the subsample plate (name, full size N,
    subsample size), and each local site's name, axis of the plate (negative, in its
    unconstrained value), per-data-point shape and size (D the sum)."""

    plate: str
    size: int
    subsample_size: int
    sites: tuple          # ((name, axis, point_shape, point_size), ...), in the model's order
    supports: dict        # {name: support}

    @property
    def dim(self) -> int:
        return sum(n for _, _, _, n in self.sites)

    def pack(self, values: dict):
        """`{site: (..., subsample at axis, ...)}` -> `(subsample, D)`."""
        return jnp.concatenate([jnp.reshape(jnp.moveaxis(values[name], axis, 0),
                                            (self.subsample_size, n))
                                for name, axis, _, n in self.sites], axis=-1)

    def unpack(self, z) -> dict:
        """`(subsample, D)` -> `{site: value}`, the plate's axis where the site has it."""
        out, start = {}, 0
        for name, axis, point_shape, n in self.sites:
            piece = z[:, start:start + n].reshape((self.subsample_size,) + point_shape)
            out[name] = jnp.moveaxis(piece, 0, axis)
            start += n
        return out


class AutoSemiDAIS(_DAISSettings, AutoGuide):
    """Semi-parametric DAIS for models with global and local latent sites (NumPyro's
    `AutoSemiDAIS`): the global sites from `global_guide`, and the local sites of the one
    subsampled plate (N data points, a subsample of B) by K annealed HMC steps per data point
    (as `AutoDAIS`, its module docstring), from a base normal per data point (or from
    `local_guide`), towards the local posterior given the global draw. Works with data
    subsampling, unlike `AutoDAIS`; the ELBO is a locally enhanced bound (Geffner and Domke).

    **Arguments:** `model`: the whole model, whose local sites sit in one subsampled
    `effppl.plate`; `local_model`: the part of the model with the local sites, a function of
    what `global_guide.model` returns (of the model's arguments when `global_guide` is None);
    `global_guide`: a guide of the global sites whose `.model` is the global part of the model
    (e.g. `AutoNormal(global_model)`), or None for a model without global sites; `local_guide`:
    None, or a guide of the local sites (a function of the same arguments as `local_model`,
    entering the same plate), whose draw and density give the base of the annealing; `prefix`;
    `K` (int >= 1, default 4); `eta_init`, `eta_max`, `gamma_init`, `init_scale`: as
    `AutoDAIS`; `subsample_plate`: the name of the plate of the local sites, needed when no
    plate subsamples (or several plates exist); `use_global_dais_params` (bool, default False):
    one set of step params for all data points instead of one per data point;
    `forward_mode_differentiation`: accepted, as NumPyro's.

    **Params** (N the plate's full size, D the local sites' size per data point), besides the
    global guide's (and the local guide's): `{prefix}_eta0`, `{prefix}_eta_coeff`,
    `{prefix}_gamma` `(N,)`, `{prefix}_beta_increments` `(N, K)`, `{prefix}_mass_matrix` `(N,
    D)` (with `use_global_dais_params`: `()`, `()`, `()`, `(K,)`, `(D,)`); without a local
    guide, `{prefix}_z_0_loc` `(N, D)` (initially 0) and `{prefix}_z_0_scale` `(N, D)`
    (positive, initially `init_scale`). Per data point params are read at the subsample's rows.

    The annealing target of the local sites is `local_model` at the subsample (its plate given
    the guide's indices), its params at their initial values (NumPyro's reads the fitted ones).
    The local sites' supports must not depend on other values (they are mapped with their
    supports, as NumPyro's prototype's). `gamma_init` is used (NumPyro's `AutoSemiDAIS` starts
    `gamma` at 0.9 whatever `gamma_init` is).

    **Raises:** `AutoGuideError` (a `ValueError`) naming the argument for a bad setting (as
    `AutoDAIS`), `local_model`, `global_guide` or `local_guide` not callable, `subsample_plate`
    not a str; when the guide first runs, `AutoGuideError` when the model has not exactly one
    subsample plate (NumPyro's assertion), no local site in it (NumPyro's `RuntimeError`), or a
    local site whose support depends on other values. `median` and `quantiles` raise
    `NotImplementedError`, as NumPyro's.

    **Local guide** (NumPyro's semantics, `_dais_local.py`): the local guide is called at the
    subsample's indices (its plate of the same name) with `local_model`'s arguments; its draw of
    the local sites, mapped to unconstrained space with its own sites' supports, is `z_0`
    (instead of `{prefix}_z_0`, and without `{prefix}_z_0_loc`/`_scale`); its unconstrained log
    density is the base of the annealing path and, at `z_0`, the factor `{prefix}_z_0_factor`
    (scaled by N / B). Its params keep their names and full shapes (an `AutoNormal(local_model)`:
    `{site}_auto_loc`, `{site}_auto_scale` `(N, ...)`). The ELBO and its gradient equal NumPyro's
    at the same params and key (a hand-written local guide or an `AutoNormal`, with a global
    guide taking one key per site); the initial values of an `AutoNormal` local guide's params
    are not NumPyro's. **Raises** (at the first run): `AutoGuideError` naming a local latent
    site the local guide does not sample, or a site it samples that is not local; at
    construction, `AutoGuideError` for an autoguide other than `AutoNormal` as the local guide
    (`AutoDelta`, `AutoMultivariateNormal`, ...: no density at other values).

    **References:** NumPyro's `AutoSemiDAIS`; Jankowiak and Phan (2022), "Surrogate Likelihoods
    for Variational Annealed Importance Sampling"; Geffner and Domke (2021), "MCMC Variational
    Inference via Uncorrected Hamiltonian Annealing"; Zhang, Hsu, Li, Finn and Grosse (2021),
    "Differentiable Annealed Importance Sampling and the Perils of Gradient Noise"; Geffner and
    Domke (2022), "Variational Inference with Locally Enhanced Bounds for Hierarchical Models".
    """

    def __init__(self, model, local_model, global_guide=None, local_guide=None, *,
                 prefix="auto", K=4, eta_init=0.01, eta_max=0.1, gamma_init=0.9,
                 init_scale=0.1, subsample_plate=None, use_global_dais_params=False,
                 forward_mode_differentiation=False):
        super().__init__(model, prefix=prefix)
        name = "effppl.infer.autoguide.AutoSemiDAIS"
        # `local_model=None` is accepted here and refused at the first call, as NumPyro builds
        # the guide first (e.g. to hand it to `AutoGuideList.append`, which refuses it)
        for arg, value in (("local_model", local_model), ("global_guide", global_guide),
                           ("local_guide", local_guide)):
            if not callable(value) and value is not None:
                raise AutoGuideError(f"{name}({arg}={value!r:.60}) expected a callable"
                                     + (" or None." if arg != "local_model" else "."))
        if isinstance(local_guide, AutoGuide) and not isinstance(local_guide, AutoNormal):
            raise AutoGuideError(
                f"{name}(local_guide={type(local_guide).__name__}(...)): the local guide's "
                f"unconstrained log density at other values is the base of the annealing, and "
                f"{type(local_guide).__name__} gives none (its draws are `Delta` sites at its "
                f"own values). Use `AutoNormal(local_model)` or a hand-written guide of the "
                f"local sites.")
        if global_guide is not None and not callable(getattr(global_guide, "model", None)):
            raise AutoGuideError(f"{name}(global_guide=...) expected a guide with a `.model` "
                                 f"(the global part of the model, e.g. `AutoNormal("
                                 f"global_model)`), but {type(global_guide).__name__} has none.")
        if subsample_plate is not None and not isinstance(subsample_plate, str):
            raise AutoGuideError(f"{name}(subsample_plate={subsample_plate!r:.60}) expected the "
                                 f"name of a plate (a str), or None.")
        if not isinstance(use_global_dais_params, bool):
            raise AutoGuideError(f"{name}(use_global_dais_params={use_global_dais_params!r:.60})"
                                 f" expected a bool.")
        self._dais_settings(K, eta_init, eta_max, gamma_init, init_scale)
        self.local_model, self.global_guide, self.local_guide = (local_model, global_guide,
                                                                 local_guide)
        self.subsample_plate = subsample_plate
        self.use_global_dais_params = use_global_dais_params
        self.forward_mode_differentiation = bool(forward_mode_differentiation)

    def _setup_prototype(self, *args, **kwargs):
        """As `AutoGuide`'s, and the global guide's at the same arguments (so that, as in
        NumPyro, it draws its initial values once, not at every run)."""
        if not callable(self.local_model):
            raise AutoGuideError("effppl.infer.autoguide.AutoSemiDAIS(model, local_model, ...) "
                                 "expected a callable `local_model` (the part of the model with "
                                 "the local sites), but got None.")
        super()._setup_prototype(*args, **kwargs)
        setup = getattr(self.global_guide, "_setup_prototype", None)
        if setup is not None:
            setup(*args, **kwargs)

    # -- the model's structure -------------------------------------------------------------------

    def _plan(self, args, kwargs) -> _LocalPlan:
        """The subsample plate and the local sites in it (NumPyro's rules: the plate given by
        `subsample_plate`, else the one subsampled plate, else the one plate).

        **Raises:** `AutoGuideError` as the class docstring says."""
        guide = "effppl.infer.autoguide.AutoSemiDAIS"
        analysis = ppl.analyze_model(self.model, args, kwargs)
        sites = self._latent_sites(args, kwargs, analysis)
        full = {n: size for n, (size, _) in plates_.subsampled_plates(analysis).items()}
        frames = {}
        for site in analysis.values():
            if site.type == "sample":
                for frame in plates_.site_frames(site, full):
                    frames.setdefault(frame.name, frame)
        if self.subsample_plate is not None:
            if self.subsample_plate not in frames:
                raise AutoGuideError(f"{guide}(subsample_plate={self.subsample_plate!r}): the "
                                     f"model has no sample site in a plate of that name (its "
                                     f"plates: {sorted(frames)}).")
            candidates = {self.subsample_plate: frames[self.subsample_plate]}
        else:
            candidates = ({n: f for n, f in frames.items() if f.subsampled}
                          or dict(frames))
        if len(candidates) != 1:
            raise AutoGuideError(f"{guide} needs exactly one plate with data subsampling (as "
                                 f"NumPyro's), but the model has {len(candidates)}: "
                                 f"{sorted(candidates)}. Name the local sites' plate with "
                                 f"`subsample_plate=...`.")
        (plate, frame), = candidates.items()
        local, dim = [], None
        for name, latent in sites.items():
            mine = next((f for f in latent.frames if f.name == plate), None)
            if mine is None:
                continue
            dim = mine.dim if dim is None else dim  # the first local site's, as NumPyro's
            event_ndim = len(latent.shape) - latent.batch_ndim
            axis = dim - event_ndim
            shape = list(latent.shape)
            del shape[axis]
            local.append((name, axis, tuple(shape), math.prod(shape)))
        if not local:
            raise AutoGuideError(f"{guide}: there are no local latent sites in the plate "
                                 f"`{plate}`; AutoSemiDAIS is for models with local latent "
                                 f"sites (use AutoDAIS).")
        supports = fixed_supports({n: sites[n] for n, *_ in local})
        if supports is None:
            raise AutoGuideError(f"{guide}: a local latent site's support depends on other "
                                 f"values (or the site has several distributions), so its "
                                 f"draws cannot be mapped to it; give the local sites "
                                 f"supports without parameters.")
        return _LocalPlan(plate, frame.size, frame.subsample_size, tuple(local), supports)

    def _local_args(self, args, kwargs, global_latents):
        """The arguments of `local_model` (and `local_guide`): what the global model returns at
        `global_latents` (hidden by `block`), or the model's arguments without a global guide."""
        if self.global_guide is None:
            return args, dict(kwargs)
        model = substitute_exactly(self.global_guide.model, data=global_latents)
        return (handlers.block(model)(*args, **kwargs),), {}

    # -- the guide ---------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        plan = self._plan(args, kwargs)
        sites = self._latent_sites(args, kwargs)
        self._init_key(args, kwargs, sites)
        global_latents, z = self._sample_latent(plan, args, kwargs)
        result = dict(global_latents)
        local = plan.unpack(z)
        values, log_dets = {}, {}
        for name, u in local.items():
            t = biject_to(plan.supports[name])
            values[name] = t(u)
            log_dets[name] = -jnp.sum(t.log_abs_det_jacobian(u, values[name]))
        result.update(self._emit(values, {n: sites[n] for n in values}, log_dets))
        return result

    def _dais_params(self, plan, dtype):
        """The step params, each read at the subsample's rows (or one set, broadcast)."""
        p, n, b, d, K = self.prefix, plan.size, plan.subsample_size, plan.dim, self.K
        if self.use_global_dais_params:
            shapes = {"eta0": (), "eta_coeff": (), "gamma": (), "beta_increments": (K,),
                      "mass_matrix": (d,)}
            event_dims = {k: None for k in shapes}
        else:
            shapes = {"eta0": (n,), "eta_coeff": (n,), "gamma": (n,),
                      "beta_increments": (n, K), "mass_matrix": (n, d)}
            event_dims = {"eta0": 0, "eta_coeff": 0, "gamma": 0, "beta_increments": 1,
                          "mass_matrix": 1}
        inits = {"eta0": self.eta_init, "eta_coeff": 0.0, "gamma": self.gamma_init,
                 "beta_increments": 1.0, "mass_matrix": 1.0}
        supports = {"eta0": constraints.interval(0.0, self.eta_max),
                    "eta_coeff": constraints.real, "gamma": constraints.interval(0.0, 1.0),
                    "beta_increments": constraints.positive,
                    "mass_matrix": constraints.positive}
        out = {}
        for k, shape in shapes.items():
            value = ppl.param(f"{p}_{k}", jnp.full(shape, inits[k], dtype),
                              constraint=supports[k], event_dim=event_dims[k])
            batch = (b,) if k in ("eta0", "eta_coeff", "gamma") else (b, shape[-1])
            out[k] = jnp.broadcast_to(value, batch)
        return out

    def _normal_base(self, plan, dtype):
        """`(z_0, base_log_prob)` without a local guide: a learnable diagonal normal per data
        point (`{prefix}_z_0_loc`, `{prefix}_z_0_scale` `(N, D)`, read at the subsample), its
        draw the auxiliary site `{prefix}_z_0` (called inside the subsample plate)."""
        p, n, d = self.prefix, plan.size, plan.dim
        loc = ppl.param(f"{p}_z_0_loc", jnp.zeros((n, d), dtype), event_dim=1)
        scale = ppl.param(f"{p}_z_0_scale", jnp.full((n, d), self.init_scale, dtype),
                          constraint=constraints.positive, event_dim=1)
        base = dist.Normal(loc, scale).to_event(1)
        z_0 = ppl.sample(f"{p}_z_0", base, infer={"is_auxiliary": True})
        return z_0, lambda z: jnp.sum(base.log_prob(z))

    def _sample_latent(self, plan, args, kwargs):
        """`(global latents, local latent (subsample, D))`: the global guide's draw, then the
        annealed draw of the local sites, in NumPyro's order (the same key, the same draws)."""
        p, n, b, d, K = self.prefix, plan.size, plan.subsample_size, plan.dim, self.K
        if self.global_guide is not None:
            global_latents = self.global_guide(*args, **kwargs)
        else:
            global_latents = {}
        local_args, local_kwargs = self._local_args(args, kwargs, global_latents)
        dtype = jnp.result_type(float)
        # the plate is entered for the guide's own sites only: the annealing target runs the
        # local model, whose own plate of that name must not sit inside this one
        plate = ppl.plate(plan.plate, n, subsample_size=b)
        with plate as idx:
            step = self._dais_params(plan, dtype)
            if self.local_guide is None:
                z_0, base_log_prob = self._normal_base(plan, dtype)
        if self.local_guide is not None:  # run outside the plate, at its indices
            z_0, base_log_prob = local_guide_base(self.local_guide, plan, plate, idx,
                                                  local_args, local_kwargs)
            log_q0 = base_log_prob(z_0)
        with plate:
            if self.local_guide is not None:  # broadcast to (B,) and scaled by N / B
                ppl.factor(f"{p}_z_0_factor", log_q0 / b)
            mass = step["mass_matrix"]
            eps = ppl.sample(f"{p}_momentum", dist.Normal(0.0, mass[..., None])
                             .expand((b, d, K)).to_event(2).mask(False),
                             infer={"is_auxiliary": True})
        betas = jnp.cumsum(step["beta_increments"], axis=-1)
        betas = betas / betas[..., -1:]
        local_model = substitute_exactly(self.local_model, data={plan.plate: idx})

        def target(z):  # the local model at the subsample, without the plate's scale
            return handlers.block(lambda: unconstrained_log_density(
                local_model, local_args, local_kwargs, plan.unpack(z)))() * (b / n)

        z, log_factor = _annealed_hmc(
            z_0, jnp.moveaxis(eps, -1, 0), betas.T[..., None], eta0=step["eta0"][:, None],
            eta_coeff=step["eta_coeff"][:, None], eta_max=self.eta_max,
            gamma=step["gamma"][:, None], inv_mass=0.5 / mass,
            momentum_log_prob=dist.Normal(0.0, mass).to_event(1).log_prob,
            base_log_prob=base_log_prob, target_log_prob=target)
        with plate:
            ppl.factor(f"{p}_local_dais_factor", log_factor)
        return global_latents, z
