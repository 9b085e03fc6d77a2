"""What a run leaves: the chains' state, the draws and statistics, and the `MCMC` methods that
read them (`get_samples`, `get_extra_fields`, `last_state`, `print_summary`, `to_arviz`)."""

from typing import Any, NamedTuple

import jax
import numpy as np

from ..._errors import EffpplError
from ._mass import block_views, numpyro_blocks

__all__ = ["MCMCError", "DivergenceWarning", "AdaptState", "MCMCState", "MCMCResults", "MCMCResultsView",
           "STATS", "NUMPYRO_FIELDS", "numpyro_fields", "site_fields"]


class MCMCError(EffpplError, ValueError):
    """Invalid MCMC settings, model, or call order."""


class DivergenceWarning(UserWarning):
    """Some post-warmup transitions diverged (including non-finite log densities)."""


STATS = ("diverging", "acceptance_rate", "energy", "n_steps", "tree_depth", "lp", "step_size")
"""The statistics of every transition a run records (`get_extra_fields`)."""
NUMPYRO_FIELDS = {  # NumPyro's name of a sampler statistic -> it, from effppl's statistics
    "accept_prob": lambda stats: stats["acceptance_rate"],
    "num_steps": lambda stats: stats["n_steps"],
    "potential_energy": lambda stats: -stats["lp"],
    "hmc_state.potential_energy": lambda stats: -stats["lp"],
    "hmc_state.num_steps": lambda stats: stats["n_steps"],
    "hmc_state.accept_prob": lambda stats: stats["acceptance_rate"],
    "adapt_state.step_size": lambda stats: stats["step_size"],
}


def _site_field(field) -> bool:
    """NumPyro's `"z.<site>"` (a latent site's unconstrained draws) or `"~z.<site>"` (leave the
    site out of the draws)."""
    return isinstance(field, str) and field.startswith(("z.", "~z.")) and \
        len(field) > field.index(".") + 1


def numpyro_fields(extra_fields, api):
    """The NumPyro names among `extra_fields` (with NumPyro's site fields `"z.<site>"` and
    `"~z.<site>"`); raises `MCMCError` on a name effppl cannot give."""
    if isinstance(extra_fields, str):
        extra_fields = (extra_fields,)
    unknown = [f for f in extra_fields
               if f not in STATS and f not in NUMPYRO_FIELDS and not _site_field(f)]
    if unknown:
        raise MCMCError(
            f"`{api}(..., extra_fields=...)`: effppl cannot record {unknown}. It records "
            f"{list(STATS)} always, and gives NumPyro's names {list(NUMPYRO_FIELDS)} and "
            f"`'z.<site>'` (a latent site's unconstrained draws; `'~z.<site>'` leaves the site "
            f"out of the draws) when asked.")
    return tuple(dict.fromkeys(f for f in extra_fields if f in NUMPYRO_FIELDS or _site_field(f)))


def site_fields(results: "MCMCResults", fields, api) -> None:
    """NumPyro's site fields of `fields` applied to `results` in place: `"z.<site>"` adds the
    site's unconstrained draws to the statistics (`[chain, draw, ...]`), `"~z.<site>"` drops the
    site from the draws. **Raises:** `MCMCError` naming a site that is not latent."""
    wanted = [f for f in fields if _site_field(f)]
    if not wanted:
        return
    latent = results.info.latent
    unknown = [f for f in wanted if f.split(".", 1)[1] not in latent]
    if unknown:
        raise MCMCError(f"`{api}(..., extra_fields={unknown})`: not latent sites of model "
                        f"`{results.fns.name}`; those are {list(latent)}.")
    unconstrained = None
    if any(not f.startswith("~") for f in wanted):
        from .._model import unconstrain
        args, kwargs = results.fns.args(results.dynamic)
        draws = {n: results.samples[n] for n in latent}
        chains, num = np.shape(draws[latent[0]])[:2]
        flat = jax.tree.map(lambda x: x.reshape((chains * num,) + x.shape[2:]), draws)
        values = jax.jit(jax.vmap(
            lambda v: unconstrain(results.fns.model, args, kwargs, v)))(flat)
        unconstrained = jax.tree.map(lambda x: x.reshape((chains, num) + x.shape[1:]), values)
    for field in wanted:
        name = field.split(".", 1)[1]
        if field.startswith("~"):
            results.samples.pop(name, None)
        elif unconstrained is not None:
            results.stats[field] = unconstrained[name]


class AdaptState(NamedTuple):
    """NumPyro's `adapt_state` of a chain's state (`MCMCState.adapt_state`).

    `step_size`: float; `inverse_mass_matrix`: dict `(site names, sorted) -> matrix` over the
    flat unconstrained position (a vector: diagonal; a square matrix: dense, block-structured
    ones with their zeros), NumPyro's keying; `mass_matrix_sqrt`, `mass_matrix_sqrt_inv`: dicts
    keyed the same, `S` the lower Cholesky factor of the mass matrix (`S S^T = M`) and `S^-1`
    (`S^-T S^-1` = the inverse mass matrix), elementwise vectors for a diagonal mass matrix,
    as NumPyro's `HMCAdaptState`. For `BarkerMH` the three are arrays over the flat position,
    not dicts, as NumPyro's `BarkerMH` has them.
    """

    step_size: Any
    inverse_mass_matrix: dict
    mass_matrix_sqrt: Any
    mass_matrix_sqrt_inv: Any


def _one_chain(x):
    """NumPyro's view: no chain axis when there is one chain."""
    return jax.tree.map(lambda v: v[0] if np.shape(v)[:1] == (1,) else v, x)


def _sqrt_pair(imm, dense):
    """`(mass_matrix_sqrt, mass_matrix_sqrt_inv)` of an inverse mass matrix (`[..., d]`: diagonal;
    `dense`: `[..., d, d]`), as NumPyro's: `S`, the lower Cholesky factor of the mass matrix, and
    `S^-1` (so `S^-T S^-1` is the inverse mass matrix); elementwise for a diagonal one."""
    import jax.numpy as jnp
    if not dense:
        return 1.0 / jnp.sqrt(imm), jnp.sqrt(imm)
    sqrt = jnp.linalg.cholesky(jnp.linalg.inv(imm))
    eye = jnp.broadcast_to(jnp.eye(imm.shape[-1], dtype=imm.dtype), imm.shape)
    return sqrt, jax.scipy.linalg.solve_triangular(sqrt, eye, lower=True)


class MCMCState(NamedTuple):
    """The chains' state after warmup or sampling (leading axis: chain).

    `position`: dict site -> unconstrained value; `logdensity`, `logdensity_grad`: at `position`;
    `step_size`, `inverse_mass_matrix`: the adapted kernel parameters (over the flat position,
    sites in sorted order); `mass_blocks`: NumPyro's block structure of that matrix (a static
    `MassBlocks`, no leaves; None: one block of every site); `kernel_state`: the rest of a
    kernel's chain state (`SA`'s population: a dict field -> array), or None.

    NumPyro's names read the same state, as NumPyro's `HMCState` has them (no chain axis when
    there is one chain): `z` (the position), `z_grad` (the potential energy's gradient),
    `potential_energy`, and `adapt_state` (an `AdaptState`: `step_size`, `inverse_mass_matrix`
    as a dict keyed by the tuples of site names of NumPyro's blocks, `mass_matrix_sqrt`,
    `mass_matrix_sqrt_inv`).
    """

    position: dict
    logdensity: Any
    logdensity_grad: dict
    step_size: Any
    inverse_mass_matrix: Any
    mass_blocks: Any = None
    kernel_state: Any = None

    @property
    def z(self) -> dict:
        """NumPyro's name: the unconstrained position, dict site -> value."""
        return _one_chain(self.position)

    @property
    def z_grad(self) -> dict:
        """NumPyro's name: the gradient of the potential energy (minus the log density's)."""
        return _one_chain(jax.tree.map(lambda g: -g, self.logdensity_grad))

    @property
    def potential_energy(self) -> Any:
        """NumPyro's name: the potential energy, minus the log density."""
        return _one_chain(-self.logdensity)

    @property
    def adapt_state(self) -> AdaptState:
        """NumPyro's `adapt_state`: the adapted step size and mass matrix (see `AdaptState`)."""
        imm = self.inverse_mass_matrix
        if isinstance(imm, dict) and not imm:  # a model without latent sites
            parts: tuple = ({}, {}, {})
        elif not hasattr(imm, "ndim"):  # the Fisher schemes' factored matrices: as they are
            parts = ({tuple(sorted(self.position)): imm}, {}, {})
        elif self.mass_blocks is not None and self.mass_blocks.flat:  # (NumPyro's BarkerMH)
            parts = (imm, *_sqrt_pair(imm, np.ndim(imm) == 3))
        else:
            blocks = self.mass_blocks or numpyro_blocks(self.position, np.ndim(imm) == 3, None)
            sizes = {k: int(np.prod(np.shape(v)[1:])) for k, v in self.position.items()}
            views = block_views(blocks, sizes, imm, lead=1)
            dense = dict(blocks.blocks)
            roots = {g: _sqrt_pair(m, dense[g]) for g, m in views.items()}
            parts = (views, {g: r[0] for g, r in roots.items()},
                     {g: r[1] for g, r in roots.items()})
        return AdaptState(_one_chain(self.step_size), *(_one_chain(p) for p in parts))


class MCMCResults(NamedTuple):
    """What `MCMC.run` keeps: the draws and everything needed to describe them.

    `samples`: dict site -> constrained draws `[chain, draw, ...]`; `stats`: dict statistic ->
    `[chain, draw]`; `fns`: the model's `ModelFns`; `dynamic`: the model's array arguments;
    `info`: its `ModelInfo`; `last_state`: the chains' final `MCMCState`.
    """

    samples: dict
    stats: dict
    fns: Any
    dynamic: tuple
    info: Any
    last_state: MCMCState


class MCMCResultsView:
    """The result methods of `MCMC`, reading `self._results` (an `MCMCResults`, or None before
    the first `run`)."""

    _results: MCMCResults | None = None
    _warmed: MCMCState | None = None  # the state `warmup` left, until the next draws

    def _results_for(self, api) -> MCMCResults:
        if self._results is None:
            raise MCMCError(f"`effppl.infer.MCMC.{api}` needs draws; call `mcmc.run(rng_key, ...)` first.")
        return self._results

    def _get(self, name, api):
        return getattr(self._results_for(api), name)

    @staticmethod
    def _flatten(tree, group_by_chain):
        if group_by_chain:
            return tree
        return jax.tree.map(lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]), tree)

    def get_samples(self, group_by_chain: bool = False) -> dict:
        """The draws: dict site -> array `[chain, draw, ...]` or, by default, `[chain * draw, ...]`.

        Latent sites are constrained (in their support); deterministic sites are included.
        """
        return self._sample_tree(self._flatten(self._shown(self._get("samples", "get_samples")),
                                               group_by_chain))

    def _carriers(self, names) -> dict:
        """`{carrier site: discrete site}`: the real sites by which the kernel moves discrete
        ones (`DiscreteHMCGibbs`), shown to the user as those sites."""
        carriers_of = getattr(getattr(self, "kernel", None), "carriers_of", None)
        return {} if carriers_of is None else carriers_of(names)

    def _shown(self, samples: dict) -> dict:
        """The draws as the user sees them: without the kernel's carrier sites."""
        hidden = self._carriers(samples)
        return {k: v for k, v in samples.items() if k not in hidden} if hidden else samples

    def _sample_tree(self, samples):
        """The draws in the structure the user gave (`MCMC`: a `potential_fn`'s `init_params`)."""
        return samples

    def get_extra_fields(self, group_by_chain: bool = False) -> dict:
        """Per-draw sampler statistics, shaped like `get_samples`.

        `diverging` (bool), `acceptance_rate`, `energy` (Hamiltonian; HMC and NUTS), `n_steps`
        (leapfrog steps, i.e. gradients), `tree_depth` (NUTS), `lp` (log density of the unconstrained latents, Jacobian included),
        `step_size`. With `thinning`, the statistics of the last transition of each kept draw.
        """
        return self._flatten(self._get("stats", "get_extra_fields"), group_by_chain)

    @property
    def last_state(self) -> MCMCState:
        """The chains' final state: of the last `run`, or of `warmup` when it came after it (as
        NumPyro's); set `mcmc.post_warmup_state = mcmc.last_state` to continue."""
        if self._warmed is not None:
            return self._warmed
        return self._get("last_state", "last_state")

    def print_summary(self, prob: float = 0.9, exclude_deterministic: bool = True) -> None:
        """Print mean, sd, quantiles, bulk ESS and split R-hat per site, and the divergences.

        Diagnostics come from `numpyro.diagnostics.print_summary` (Gelman et al. 2013, BDA3 §11.4;
        Vehtari et al. 2021 for rank-normalised split R-hat).
        """
        from numpyro.diagnostics import print_summary

        samples = self._get("samples", "print_summary")
        info = self._get("info", "print_summary")
        drawn = set(self._carriers(samples).values())  # (discrete sites: draws, not computed)
        samples = self._shown(samples)
        if exclude_deterministic:
            samples = {k: v for k, v in samples.items()
                       if k not in info.deterministic or k in drawn}
        print_summary({k: np.asarray(v) for k, v in samples.items()}, prob=prob, group_by_chain=True)
        n_div = int(np.sum(np.asarray(self._get("stats", "print_summary")["diverging"])))
        print(f"Number of divergences: {n_div}")

    def to_arviz(self):
        """An `arviz.InferenceData` with groups `posterior`, `sample_stats`, `log_likelihood`
        (pointwise, per observed site) and `observed_data`.
        """
        from .._arviz import to_inference_data

        results = self._results_for("to_arviz")
        return to_inference_data(results, hidden=tuple(self._carriers(results.samples)))
