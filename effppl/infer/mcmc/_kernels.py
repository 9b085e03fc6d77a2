"""`NUTS` and `HMC`: settings objects over blackjax's kernels.

A kernel object holds the model, the initialisation strategy and the sampler settings; the `MCMC`
driver builds (and caches, keyed by `settings()`) the compiled warmup and sampling functions.
"""

import math
import warnings
from collections.abc import Callable
from typing import Any

import blackjax
import jax
import jax.numpy as jnp
import numpy as np

from ..._errors import EffpplError
from .._compile._arguments import holds_tracer
from .._init import InitStrategy, init_to_uniform
from .._init_site import as_strategy
from .._model import model_name
from ._adaptation import MASS_MATRICES
from ._mass import normalize_dense_mass, normalize_inverse_mass_matrix, settings_key

__all__ = ["NUTS", "HMC"]


_UNIFORM = init_to_uniform()  # frozen: one default object serves every kernel

class KernelSettingsError(EffpplError, ValueError):
    """A sampler setting is invalid."""


DEFAULT_MASS_MATRIX = "diag"
"""The adaptation scheme `NUTS` and `HMC` use unless told otherwise (see `benchmarks/README.md`,
"Warmup adaptation", for why)."""


def _check(api: str, name: str, value: Any, ok: bool, expected: str) -> None:
    if not ok:
        raise KernelSettingsError(
            f"`effppl.infer.{api}(..., {name}=...)` expected {expected}, but got {value!r}."
        )


def _real(value: Any) -> bool:
    """Whether `value` is a real number (a Python or NumPy int or float, or a 0-d array of one),
    so that `float(value)` means what it says: not a str, None or bool."""
    if isinstance(value, (bool, np.bool_)) or \
            not isinstance(value, (int, float, np.number, np.ndarray, jax.Array)):
        return False
    dtype = jnp.result_type(value)
    return jnp.ndim(value) == 0 and (jnp.issubdtype(dtype, jnp.integer)
                                     or jnp.issubdtype(dtype, jnp.floating))


def _positive(value: Any) -> bool:
    return _real(value) and float(value) > 0


_NUMPYRO_OPTIONS = {  # NumPyro's kernel option -> (its default, why effppl has no other value)
    "forward_mode_differentiation": (False, "taken apart"),  # (`_HMCFamily` reads it)
    "regularize_mass_matrix": (True, "taken apart"),  # (`_HMCFamily` reads it)
    "find_heuristic_step_size": (False, "taken apart"),  # (`_HMCFamily` reads it)
    "kinetic_fn": (None, "blackjax's Euclidean kinetic energy is the only one"),
    "potential_fn": (None, "taken apart"),  # (`_HMCFamily` reads it: `_potential.py`)
}


def _unsupported_options(api, options):
    """A `KernelSettingsError` for a NumPyro kernel option effppl accepts only at its default
    (NumPyro's programs pass them by keyword), naming why."""
    for name, value in options.items():
        default, why = _NUMPYRO_OPTIONS[name]
        if value is not default and not (default is not None and value == default):
            raise KernelSettingsError(f"`effppl.infer.{api}(..., {name}={value!r:.60})`: only "
                                      f"{name}={default!r} (NumPyro's default) is supported: "
                                      f"{why}.")


def _untraced(api: str, settings: dict) -> None:
    """A `KernelSettingsError` when a setting is a JAX tracer: the kernel is built inside a JAX
    transformation (NumPyro's `test_chain_inside_jit`), which effppl's `MCMC` refuses (see
    `MCMC.run`), instead of JAX's error from `float()` of the tracer."""
    for name, value in settings.items():
        if holds_tracer(value):
            raise KernelSettingsError(
                f"`effppl.infer.{api}(..., {name}=...)` got a traced value: the kernel is built "
                f"inside a JAX transformation (`jax.jit`, `jax.vmap`, a `lax` loop). effppl's "
                f"MCMC compiles the sampler itself and runs outside transformations; its "
                f"settings are Python numbers. Build the kernel and call `MCMC.run` outside the "
                f"transformation (for many independent runs, e.g. consensus Monte Carlo, run "
                f"them as chains: `num_chains`, `chain_method='vectorized'`).")


def _known_options(api, options):
    """A `TypeError` for a keyword argument that is neither effppl's nor NumPyro's."""
    unknown = sorted(set(options) - set(_NUMPYRO_OPTIONS))
    if unknown:
        raise TypeError(f"effppl.infer.{api}() got an unexpected keyword argument "
                        f"{unknown[0]!r}.")


class _HMCFamily:
    _api = "HMC"
    _algorithm = blackjax.hmc

    def __init__(self, model: Callable, *, step_size, adapt_step_size, adapt_mass_matrix,
                 dense_mass, target_accept_prob, init_strategy, divergence_threshold,
                 inverse_mass_matrix=None, mass_matrix=None, numpyro_options=None):
        api = self._api
        numpyro_options = dict(numpyro_options or {})
        self.potential_fn = numpyro_options.pop("potential_fn", None)
        self.forward_mode_differentiation = numpyro_options.pop(
            "forward_mode_differentiation", False)
        _check(api, "forward_mode_differentiation", self.forward_mode_differentiation,
               isinstance(self.forward_mode_differentiation, (bool, np.bool_)), "a bool")
        self.forward_mode_differentiation = bool(self.forward_mode_differentiation)
        self.regularize_mass_matrix = numpyro_options.pop("regularize_mass_matrix", True)
        _check(api, "regularize_mass_matrix", self.regularize_mass_matrix,
               isinstance(self.regularize_mass_matrix, (bool, np.bool_)), "a bool")
        self.regularize_mass_matrix = bool(self.regularize_mass_matrix)
        self.find_heuristic_step_size = numpyro_options.pop("find_heuristic_step_size", False)
        _check(api, "find_heuristic_step_size", self.find_heuristic_step_size,
               isinstance(self.find_heuristic_step_size, (bool, np.bool_)), "a bool")
        self.find_heuristic_step_size = bool(self.find_heuristic_step_size)
        if self.potential_fn is None:
            _check(api, "model", model, callable(model),
                   "a callable model (or NumPyro's `potential_fn=` with no model)")
        elif model is not None:
            raise KernelSettingsError(f"`effppl.infer.{api}`: only one of `model` or "
                                      f"`potential_fn` can be given (as in NumPyro).")
        else:
            _check(api, "potential_fn", self.potential_fn, callable(self.potential_fn),
                   "a callable potential energy of a pytree of unconstrained arrays")
        _check(api, "step_size", step_size, _positive(step_size), "a positive float")
        dense_mass = normalize_dense_mass(api, dense_mass)
        self.inverse_mass_matrix = normalize_inverse_mass_matrix(api, inverse_mass_matrix)
        _unsupported_options(api, numpyro_options or {})
        _check(api, "target_accept_prob", target_accept_prob,
               _real(target_accept_prob) and 0 < float(target_accept_prob) < 1,
               "a float in (0, 1)")
        _check(api, "init_strategy", init_strategy, callable(init_strategy),
               "an effppl.infer init strategy such as init_to_uniform(), or a function of a "
               "site message as in NumPyro")
        _check(api, "divergence_threshold", divergence_threshold,
               _positive(divergence_threshold), "a positive float")
        _check(api, "mass_matrix", mass_matrix, mass_matrix is None or mass_matrix in MASS_MATRICES,
               f"one of {MASS_MATRICES} (or None: 'dense' with dense_mass=True, else "
               f"{DEFAULT_MASS_MATRIX!r})")
        _check(api, "mass_matrix", mass_matrix,
               not (dense_mass and mass_matrix not in (None, "dense")),
               "'dense' or None when dense_mass=True (dense_mass=True is mass_matrix='dense')")
        _check(api, "inverse_mass_matrix", self.inverse_mass_matrix,
               self.inverse_mass_matrix is None or mass_matrix in (None, "diag", "dense"),
               "None with the Fisher schemes (mass_matrix='fisher_diag' or 'low_rank' start from "
               "the identity)")
        self.mass_matrix = mass_matrix or ("dense" if dense_mass else DEFAULT_MASS_MATRIX)
        _check(api, "find_heuristic_step_size", self.find_heuristic_step_size,
               not self.find_heuristic_step_size or self.mass_matrix in ("diag", "dense"),
               "False with the Fisher schemes (nutpie's schedule tunes the step size itself; "
               "the heuristic restarts Stan's window adaptation)")
        _check(api, "regularize_mass_matrix", self.regularize_mass_matrix,
               self.regularize_mass_matrix or self.mass_matrix in ("diag", "dense"),
               "True with the Fisher schemes (the setting concerns Stan's window estimate, "
               "mass_matrix='diag' or 'dense')")
        self.model = model
        self.step_size = float(step_size)
        self.adapt_step_size = bool(adapt_step_size)
        self.adapt_mass_matrix = bool(adapt_mass_matrix)
        # True, or NumPyro's site groups (a block-structured dense matrix), with "dense" only
        self.dense_mass = (dense_mass or True) if self.mass_matrix == "dense" else False
        self.target_accept_prob = float(target_accept_prob)
        self.init_strategy = as_strategy(init_strategy)
        self.divergence_threshold = float(divergence_threshold)

    def settings(self) -> tuple:
        """Hashable settings that determine the compiled sampler (the model excluded)."""
        return (
            type(self).__name__, self.step_size, self.adapt_step_size, self.adapt_mass_matrix,
            self.dense_mass, self.mass_matrix, self.target_accept_prob,
            self.divergence_threshold, tuple(sorted(self.kernel_kwargs().items())),
            settings_key(self.inverse_mass_matrix), self.forward_mode_differentiation,
            self.regularize_mass_matrix, self.find_heuristic_step_size,
        )

    def init_state(self, position, logdensity, logdensity_grad):
        """blackjax's chain state from a point where the log density is already known."""
        return blackjax.mcmc.hmc.HMCState(position, logdensity, logdensity_grad)

    def build_kernel(self) -> Callable:
        """blackjax's kernel `(rng_key, state, logdensity_fn, step_size, imm, **kw)`."""
        return self._algorithm.build_kernel(divergence_threshold=self.divergence_threshold)

    def kernel_kwargs(self) -> dict:
        raise NotImplementedError

    def bind(self, kernel: Callable, model) -> Callable:
        """The transition function one compiled chunk runs: `kernel` (`build_kernel()`'s), or a
        function of it and of `model` (a `_sampler.ChunkModel`: the chunk's model, for a
        kernel that reads constrained values, as `HMCGibbs`). The same signature as `kernel`."""
        del model
        return kernel

    def stats(self, info, dtype) -> dict:
        """Per-transition statistics, named as in `arviz` `sample_stats` (floats as `dtype`)."""
        return {
            "diverging": jnp.asarray(info.is_divergent, bool),
            "acceptance_rate": jnp.asarray(info.acceptance_rate, dtype),
            "energy": jnp.asarray(info.energy, dtype),
            "n_steps": jnp.asarray(info.num_integration_steps, jnp.int32),
        }

    def empty_stats(self, dtype) -> dict:
        """Zeros with the structure and dtypes of `stats`."""
        return {
            "diverging": jnp.zeros((), bool),
            "acceptance_rate": jnp.zeros((), dtype),
            "energy": jnp.zeros((), dtype),
            "n_steps": jnp.zeros((), jnp.int32),
        }

    def __repr__(self) -> str:
        if self.potential_fn is not None:
            return f"{self._api}(potential_fn={getattr(self.potential_fn, '__name__', '?')})"
        return f"{self._api}(model={model_name(self.model)})"


class HMC(_HMCFamily):
    """Hamiltonian Monte Carlo with a fixed trajectory length or number of leapfrog steps, on
    blackjax's `hmc` kernel.

    Step size and mass matrix are tuned during warmup by Stan's window adaptation (or by nutpie's
    Fisher-divergence adaptation: `mass_matrix=`)
    (`blackjax.window_adaptation`).

    **Arguments:**

    - `model`: the model, a Python callable using `effppl.sample`.
    - `num_steps`: leapfrog steps per transition (int >= 1), or None (the default): then each
      transition integrates for time `trajectory_length` L (a positive float, default 2 pi) in
      `n = ceil(L / step_size)` steps of size L / n, as NumPyro's `HMC`. With both given, as in
      NumPyro, each transition takes `num_steps` steps of size `L / num_steps`: the step size is
      then fixed (a `UserWarning` says so when `adapt_step_size`); give `trajectory_length=None`
      for `num_steps` steps of an adapted size.
    - `step_size`: initial step size (unconstrained units); the final one when
      `adapt_step_size=False`.
    - `adapt_step_size`: tune the step size by dual averaging during warmup.
    - `adapt_mass_matrix`: estimate the inverse mass matrix during warmup.
    - `dense_mass`: a dense (`True`) or diagonal (`False`) mass matrix, or NumPyro's list of
      site groups (`[("x", "y"), ("z",)]`): a dense block per group, diagonal elsewhere.
    - `inverse_mass_matrix`: NumPyro's initial inverse mass matrix (kept fixed with
      `adapt_mass_matrix=False`): an array over every latent site's unconstrained coordinates
      (sites sorted by name), or a dict site group -> array (a vector, or with a dense block a
      square matrix); other sites start at the identity.
    - `mass_matrix`: the warmup's adaptation scheme. `"diag"` (the default) and `"dense"`:
      Stan's window adaptation of a diagonal or dense inverse mass matrix from the draws'
      variances or covariance (Stan Reference Manual, "HMC algorithm parameters"). `"fisher_diag"`
      and `"low_rank"`: nutpie's Fisher-divergence adaptation (Seyboldt et al. 2026,
      arXiv 2603.18845), a diagonal `sqrt(Var[x] / Var[grad log p])` from the draws and their
      gradients, plus, for `"low_rank"`, a correction of rank k = min(d, 100) from their
      covariances, applied in O(d k) per leapfrog step, on nutpie's schedule (windows of 10 draws
      over the first 30% of the warmup, then of 80 growing by 1.5x; the last 15% tunes the step
      size alone). `"fisher_diag"` re-estimates its diagonal after every draw, as nutpie does;
      `"low_rank"` at each window's end. `"low_rank"` suits correlated posteriors at any dimension, where `"dense"`
      costs O(d^2) per step. `None`: `"dense"` when `dense_mass=True`, else the default.
    - `target_accept_prob`: the mean acceptance probability targeted by step-size adaptation.
    - `init_strategy`: `init_to_uniform()` (default), `init_to_median()`, `init_to_value(...)`.
    - `divergence_threshold`: energy error above which a transition counts as divergent.
    - `potential_fn`: NumPyro's alternative to `model` (give one of them): a potential energy
      (minus an unnormalised log density) of a pytree of unconstrained arrays; `MCMC.run` then
      needs `init_params` in that structure (a leading `num_chains` axis with several chains)
      and no model arguments, and `get_samples()` returns draws in that structure.
    - `forward_mode_differentiation`: as NumPyro's, take the log density's gradient in forward
      mode (`jax.jacfwd`: d forward passes per gradient, batched), for a model JAX cannot
      differentiate in reverse mode (a `lax.while_loop` between a latent site and the density).
    - `regularize_mass_matrix`: as NumPyro's: False takes each window's sample covariance as the
      inverse mass matrix, without Stan's shrinkage toward a small multiple of the identity
      (`"diag"` and `"dense"` only).
    - `find_heuristic_step_size`: as NumPyro's: before the warmup's first transition and after
      each window's end, restart the step size's dual averaging from Hoffman and Gelman's
      heuristic (the step size doubled or halved until the acceptance probability of one
      leapfrog step crosses 0.8; `blackjax.adaptation.step_size.find_reasonable_step_size`),
      as Stan does after each window. `"diag"` and `"dense"` only.
    - NumPyro's `kinetic_fn`: accepted at NumPyro's default only (another value raises, naming
      why).

    **Raises:** `KernelSettingsError` (a `ValueError`) for invalid settings (also when both
    `num_steps` and `trajectory_length` are None), and for a NumPyro option at another value
    than its default.

    **References:** Neal (2011), "MCMC using Hamiltonian dynamics"; Stan Reference Manual,
    "HMC algorithm parameters"; Seyboldt, Carlson & Carpenter (2026), "Preconditioning HMC by
    minimising Fisher divergence", arXiv 2603.18845 (nutpie); blackjax `blackjax.hmc`.

    Example: a standard normal, sampled with 8 leapfrog steps per transition.

        >>> import jax
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import HMC, MCMC
        >>> def model():
        ...     effppl.sample("x", dist.Normal(0.0, 1.0))
        >>> mcmc = MCMC(HMC(model, trajectory_length=1.0), num_warmup=200, num_samples=500,
        ...             progress_bar=False)
        >>> mcmc.run(jax.random.key(0))
        >>> x = mcmc.get_samples()["x"]
        >>> x.shape, bool(abs(x.mean()) < 0.2), bool(0.8 < x.std() < 1.2)
        ((500,), True, True)
    """

    _api = "HMC"
    _algorithm = blackjax.hmc

    def __init__(self, model: Callable | None = None, num_steps: int | None = None,
                 step_size: float = 1.0, *,
                 trajectory_length: float | None = 2 * math.pi, adapt_step_size: bool = True,
                 adapt_mass_matrix: bool = True, dense_mass: Any = False,
                 target_accept_prob: float = 0.8, init_strategy: InitStrategy = _UNIFORM,
                 divergence_threshold: float = 1000.0, inverse_mass_matrix: Any = None,
                 mass_matrix: str | None = None, **numpyro_options):
        _untraced("HMC", dict(num_steps=num_steps, step_size=step_size,
                              trajectory_length=trajectory_length,
                              target_accept_prob=target_accept_prob,
                              divergence_threshold=divergence_threshold,
                              inverse_mass_matrix=inverse_mass_matrix))
        if num_steps is not None:
            _check("HMC", "num_steps", num_steps,
                   isinstance(num_steps, int) and not isinstance(num_steps, bool)
                   and num_steps >= 1, "an int >= 1, or None")
        if trajectory_length is not None:
            _check("HMC", "trajectory_length", trajectory_length,
                   _positive(trajectory_length) and math.isfinite(float(trajectory_length)),
                   "a positive float, or None")
        _known_options("HMC", numpyro_options)
        if num_steps is None and trajectory_length is None:
            raise KernelSettingsError("`effppl.infer.HMC(..., num_steps=None, trajectory_length="
                                      "None)`: At least one of num_steps or trajectory_length "
                                      "must be given (as in NumPyro).")
        if num_steps is not None and trajectory_length is not None and adapt_step_size:
            warnings.warn(f"effppl.infer.HMC: If both num_steps ({num_steps}) and "
                          f"trajectory_length ({float(trajectory_length):.4g}) are given, each "
                          f"transition takes {num_steps} steps of size trajectory_length / "
                          f"num_steps and the step size can't be adapted (as in NumPyro). Give "
                          f"trajectory_length=None for {num_steps} steps of an adapted size.",
                          UserWarning, stacklevel=2)
        if num_steps is not None and trajectory_length is not None:
            # NumPyro's transitions: `num_steps` steps of L / num_steps, whatever the adaptation
            # says; here the step size is that one, and not adapted (so the draws' stats say it)
            step_size, adapt_step_size = float(trajectory_length) / num_steps, False
            trajectory_length = None
        self.num_steps = num_steps
        self.trajectory_length = None if trajectory_length is None else float(trajectory_length)
        super().__init__(model, step_size=step_size, adapt_step_size=adapt_step_size,
                         adapt_mass_matrix=adapt_mass_matrix, dense_mass=dense_mass,
                         target_accept_prob=target_accept_prob, init_strategy=init_strategy,
                         divergence_threshold=divergence_threshold,
                         inverse_mass_matrix=inverse_mass_matrix,
                         mass_matrix=mass_matrix, numpyro_options=numpyro_options)

    def kernel_kwargs(self) -> dict:
        if self.trajectory_length is not None:  # the steps come from `build_kernel`
            return {}
        return {"num_integration_steps": self.num_steps}

    def settings(self) -> tuple:
        return (*super().settings(), self.num_steps, self.trajectory_length)

    def build_kernel(self) -> Callable:
        """blackjax's `hmc` kernel; with `trajectory_length` L, each transition takes
        `n = ceil(L / step_size)` leapfrog steps of size `L / n` (NumPyro's `HMC`)."""
        kernel = super().build_kernel()
        length = self.trajectory_length
        if length is None:
            return kernel

        def kernel_of_length(rng_key, state, logdensity_fn, step_size, inverse_mass_matrix):
            n = jnp.maximum(jnp.ceil(length / step_size), 1.0)
            return kernel(rng_key, state, logdensity_fn, length / n, inverse_mass_matrix,
                          num_integration_steps=n.astype(jnp.int32))
        return kernel_of_length


class NUTS(_HMCFamily):
    """The No-U-Turn Sampler (multinomial, iterative) on blackjax's `nuts` kernel.

    Step size and mass matrix are tuned during warmup by Stan's window adaptation (or by nutpie's
    Fisher-divergence adaptation: `mass_matrix=`)
    (`blackjax.window_adaptation`).

    **Arguments:**

    - `model`: the model, a Python callable using `effppl.sample`.
    - `step_size`, `adapt_step_size`, `adapt_mass_matrix`, `dense_mass`, `mass_matrix`,
      `target_accept_prob`, `init_strategy`, `divergence_threshold`: as for `HMC`.
    - `max_tree_depth`: maximum number of trajectory doublings (at most `2**max_tree_depth - 1`
      leapfrog steps per transition); NumPyro's pair `(during warmup, while sampling)` sets
      the two phases apart.
    - NumPyro's options `potential_fn`, `forward_mode_differentiation`,
      `regularize_mass_matrix`, `find_heuristic_step_size`, `inverse_mass_matrix`: as for `HMC`.

    **Raises:** `KernelSettingsError` (a `ValueError`) for invalid settings.

    **References:** Hoffman & Gelman (2014), "The No-U-Turn Sampler", JMLR 15; Betancourt (2017),
    "A Conceptual Introduction to Hamiltonian Monte Carlo"; Stan Reference Manual; Seyboldt et
    al. (2026), arXiv 2603.18845 (nutpie's adaptation); blackjax `blackjax.nuts`.

    Example: a linear regression; `y` is given as a keyword, so `Predictive` can leave it out.

        >>> import jax, jax.numpy as jnp
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import MCMC, NUTS
        >>> def model(x, y=None):
        ...     w = effppl.sample("w", dist.Normal(0.0, 1.0))
        ...     sigma = effppl.sample("sigma", dist.HalfNormal(1.0))
        ...     with effppl.plate("data", x.shape[0]):
        ...         effppl.sample("y", dist.Normal(w * x, sigma), obs=y)
        >>> x = jnp.linspace(-1.0, 1.0, 30)
        >>> mcmc = MCMC(NUTS(model, target_accept_prob=0.9), num_warmup=200, num_samples=200,
        ...             progress_bar=False)
        >>> mcmc.run(jax.random.key(0), x, y=2.0 * x + 0.1 * jnp.sin(9.0 * x))
        >>> round(float(mcmc.get_samples()["w"].mean()), 1)
        2.0
    """

    _api = "NUTS"
    _algorithm = blackjax.nuts

    def __init__(self, model: Callable | None = None, *, step_size: float = 1.0,
                 adapt_step_size: bool = True,
                 adapt_mass_matrix: bool = True, dense_mass: bool = False,
                 target_accept_prob: float = 0.8, max_tree_depth: int | tuple = 10,
                 init_strategy: InitStrategy = _UNIFORM,
                 divergence_threshold: float = 1000.0, inverse_mass_matrix: Any = None,
                 mass_matrix: str | None = None, trajectory_length: float | None = None,
                 **numpyro_options):
        _untraced("NUTS", dict(step_size=step_size, target_accept_prob=target_accept_prob,
                               divergence_threshold=divergence_threshold,
                               inverse_mass_matrix=inverse_mass_matrix))
        del trajectory_length  # as NumPyro's: "This arg has no effect in NUTS sampler."
        def depth_ok(d):
            return isinstance(d, int) and not isinstance(d, bool) and d >= 1
        if isinstance(max_tree_depth, list):
            max_tree_depth = tuple(max_tree_depth)
        _check("NUTS", "max_tree_depth", max_tree_depth,
               depth_ok(max_tree_depth) or (isinstance(max_tree_depth, tuple)
                                            and len(max_tree_depth) == 2
                                            and all(map(depth_ok, max_tree_depth))),
               "an int >= 1, or NumPyro's pair (depth during warmup, depth while sampling)")
        _known_options("NUTS", numpyro_options)
        self.max_tree_depth = max_tree_depth
        super().__init__(model, step_size=step_size, adapt_step_size=adapt_step_size,
                         adapt_mass_matrix=adapt_mass_matrix, dense_mass=dense_mass,
                         target_accept_prob=target_accept_prob, init_strategy=init_strategy,
                         divergence_threshold=divergence_threshold,
                         inverse_mass_matrix=inverse_mass_matrix,
                         mass_matrix=mass_matrix, numpyro_options=numpyro_options)

    def build_kernel(self) -> Callable:
        return blackjax.nuts.build_kernel(divergence_threshold=self.divergence_threshold)

    def kernel_kwargs(self) -> dict:
        return {"max_num_doublings": self.max_tree_depth}

    def stats(self, info, dtype) -> dict:
        out = super().stats(info, dtype)
        out["tree_depth"] = jnp.asarray(info.num_trajectory_expansions, jnp.int32)
        return out

    def empty_stats(self, dtype) -> dict:
        return dict(super().empty_stats(dtype), tree_depth=jnp.zeros((), jnp.int32))
