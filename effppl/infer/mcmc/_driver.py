"""The `MCMC` driver: initialisation, chunked warmup and sampling, results.

A thin driver over `Sampler` (compiled, cached by structure): it splits the model arguments into
structure and arrays, finds initial points, calls the compiled chunks under a tqdm progress bar,
and stores the draws. A second `run` with new data of the same shapes compiles nothing.
"""

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import tqdm.auto as tqdm
from jax.sharding import NamedSharding, PartitionSpec

from ..._keys import typed_key
from ...handlers import config_enumerate
from ...handlers.internal import check_enumerable
from .._checkpoint import as_checkpoint
from .._compile._arguments import holds_tracer, leaked_tracers
from .._compile._cache import cached
from .._compile._fns import prepare
from .._init import InitializationError
from .._model import explained_by_parameters, site_errors
from .._progress import advance
from .._sharding import place, place_data, readable
from . import _sharded
from ._checkpoint import RunRecord
from ._chunks import SECONDS, Chunks
from ._empty import without_latents
from ._kernels import _HMCFamily
from ._mass import numpyro_blocks
from ._mixing import ChainMixingWarning, warn_mixing
from ._potential import PotentialProgram, potential_program
from ._results import (
    NUMPYRO_FIELDS,
    DivergenceWarning,
    MCMCError,
    MCMCResults,
    MCMCResultsView,
    MCMCState,
    numpyro_fields,
    site_fields,
)
from ._sampler import Span, sampler_for
from ._start import initial_chain, restart_chains
from ._warmup import first_draws, progress_callbacks, refolded, warm_up
from ._warmup_check import (
    MaxTreeDepthWarning,
    StuckChainWarning,
    warn_divergences,
    warn_tree_depth,
)

__all__ = ["MCMC", "MCMCState", "MCMCError", "DivergenceWarning", "StuckChainWarning",
           "MaxTreeDepthWarning", "ChainMixingWarning"]

_CHAIN_METHODS = ("vectorized", "sharded")
# NumPyro's names: its chains run one after another ("sequential") or one per device under
# `pmap` ("parallel"); effppl's "vectorized" and "sharded" give the same draws in one program
_NUMPYRO_CHAIN_METHODS = {"sequential": "vectorized", "parallel": "sharded"}
_CHECKPOINT_CHUNKS = 100  # a checkpointed run's first chunk: 1/100 of it (then they grow)


def _concat(parts, place):
    """The chunks' draws `parts` joined along the draw axis: on the host (then `place`d where the
    chains run) when this process holds them whole, so that no program is compiled for each
    number of chunks; on the devices otherwise."""
    if len(parts) == 1:
        return parts[0]
    leaves = jax.tree.leaves(parts)
    if all(getattr(x, "is_fully_addressable", True) for x in leaves):
        return place(jax.tree.map(
            lambda *xs: jnp.asarray(np.concatenate([np.asarray(x) for x in xs], axis=1)), *parts))
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1), *parts)


def _refuse_traced(api, inputs):
    """`MCMCError` when `MCMC.run`/`warmup` is itself traced (inside `jax.jit`, `jax.vmap`, a
    `lax` loop): its key, data or initial point is a tracer."""
    if holds_tracer(inputs):
        raise MCMCError(
            f"`{api}` was called inside a JAX transformation (`jax.jit`, `jax.vmap`, a `lax` "
            f"loop): its key, data or init_params are traced. effppl's MCMC compiles the "
            f"sampler itself and, between compiled steps, checks initial points, restarts "
            f"degenerate warmups and counts divergences on the host, which a trace cannot do. "
            f"Call it outside the transformation: its compiled sampler is reused for new data "
            f"of the same shapes (no recompilation), and for many independent runs (e.g. "
            f"consensus Monte Carlo) run them as chains (`num_chains`, "
            f"`chain_method='vectorized'`) or loop in Python.")


def _auto_enumerated(model):
    """`config_enumerate(model)`, one wrapper per model object (the compiled programs are cached
    by the model: a new wrapper per run would compile anew), kept in the bounded compile cache
    (`clear_cache` drops it) under the model's identity: two models that compare equal (a
    dataclass holding its data in a `compare=False` field) get their own wrappers."""
    wrapper = cached(("auto-enumerated", id(model)), lambda: config_enumerate(model),
                     valid=lambda stored: stored._wraps_model[0] is model)
    return wrapper


class MCMC(MCMCResultsView):
    """Run Markov chains with a gradient-based kernel: warmup (window adaptation), then sampling.

    **Arguments:**

    - `kernel`: `NUTS(model, ...)`, `HMC(model, ...)`, `BarkerMH(model, ...)`, `SA(model, ...)`,
      or a Gibbs kernel around `NUTS`/`HMC` (`HMCGibbs`, `DiscreteHMCGibbs`, `MixedHMC`,
      `HMCECS`).
    - `num_warmup`: adaptation transitions per chain (discarded).
    - `num_samples`: transitions per chain after warmup; `num_samples // thinning` are kept.
    - `num_chains`: number of chains.
    - `chain_method`: `"vectorized"` (one `jit(vmap)` over chains on one device) or `"sharded"`
      (a `shard_map` over the chain axis of `mesh`: each device runs its share of the chains,
      vectorized, with no communication between devices). Both give the same draws. NumPyro's
      `"sequential"` runs as `"vectorized"`, its `"parallel"` as `"sharded"`, and its callable
      `jax.vmap` as `"vectorized"` (no other callable).
    - `mesh`: for `"sharded"`, a mesh from `effppl.distributed.make_mesh(chain=..., data=...)`
      over the devices of every process; `num_chains` must be a multiple of its chain axis.
      Data sharded over its data axis (`effppl.distributed.shard`) are summed by one
      all-reduce per gradient. Default: as many of the devices as divide `num_chains` (all of
      them, with several processes).
    - `jit_model_args`: accepted for NumPyro's programs; effppl always passes the model's array
      arguments to the compiled sampler as arguments (a new `run` on new data of the same shapes
      compiles nothing), which is what NumPyro's `jit_model_args=True` asks for.
    - `thinning`: keep every `thinning`-th draw.
    - `progress_bar`: show a tqdm bar over warmup and sampling (run in ~20 chunks of one compiled
      function; with `False`, each phase is a single call). Its clock starts after the first
      chunk, so the rate and ETA leave out compilation.

    **Raises:** `MCMCError` (a `ValueError`) for invalid settings.

    **References:** Stan Reference Manual, "MCMC sampling" and "HMC algorithm parameters";
    Hoffman & Gelman (2014); blackjax `window_adaptation`.

    Example: the mean of a normal with known scale; its posterior mean is the data's mean.

        >>> import jax
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import MCMC, NUTS
        >>> def model(y):
        ...     mu = effppl.sample("mu", dist.Normal(0.0, 10.0))
        ...     with effppl.plate("data", y.shape[0]):
        ...         effppl.sample("y", dist.Normal(mu, 1.0), obs=y)
        >>> y = 3.0 + jax.random.normal(jax.random.key(1), (20,))
        >>> mcmc = MCMC(NUTS(model), num_warmup=200, num_samples=200, num_chains=2,
        ...             progress_bar=False)
        >>> mcmc.run(jax.random.key(0), y)
        >>> mcmc.get_samples()["mu"].shape, mcmc.get_samples(group_by_chain=True)["mu"].shape
        ((400,), (2, 200))
        >>> bool(abs(mcmc.get_samples()["mu"].mean() - y.mean()) < 0.1)
        True
        >>> idata = mcmc.to_arviz()          # arviz.InferenceData; mcmc.print_summary() prints
        >>> sorted(idata.groups())
        ['log_likelihood', 'observed_data', 'posterior', 'sample_stats']
    """

    def __init__(self, kernel, *, num_warmup: int, num_samples: int, num_chains: int = 1,
                 chain_method: str = "vectorized", thinning: int = 1, progress_bar: bool = True,
                 mesh=None, jit_model_args: bool = False):
        def check(name, value, ok, expected):
            if not ok:
                raise MCMCError(f"`effppl.infer.MCMC(..., {name}=...)` expected {expected}, but got {value!r}.")

        def is_int(v, low):
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= low

        check("kernel", kernel, isinstance(kernel, _HMCFamily),
              "an effppl.infer NUTS or HMC kernel (or BarkerMH, HMCGibbs)")
        check("num_warmup", num_warmup, is_int(num_warmup, 0), "an int >= 0")
        check("num_samples", num_samples, is_int(num_samples, 1), "an int >= 1")
        check("num_chains", num_chains, is_int(num_chains, 1), "an int >= 1")
        check("thinning", thinning, is_int(thinning, 1) and thinning <= num_samples,
              f"an int in [1, num_samples={num_samples}]")
        if chain_method is jax.vmap:  # NumPyro's callable chain method, the vectorized one
            chain_method = "vectorized"
        chain_method = _NUMPYRO_CHAIN_METHODS.get(chain_method, chain_method) \
            if isinstance(chain_method, str) else chain_method
        check("chain_method", chain_method, chain_method in _CHAIN_METHODS,
              f"one of {_CHAIN_METHODS}, or NumPyro's 'sequential' (run as 'vectorized'), "
              f"'parallel' (run as 'sharded') or `jax.vmap` (run as 'vectorized'; effppl maps "
              f"its compiled chunks over chains itself, so no other function)")
        check("jit_model_args", jit_model_args, isinstance(jit_model_args, (bool, np.bool_)),
              "a bool")
        check("progress_bar", progress_bar, isinstance(progress_bar, (bool, np.bool_)), "a bool")
        check("mesh", mesh, mesh is None or chain_method == "sharded",
              "None with chain_method='vectorized' (a mesh needs chain_method='sharded')")
        self.kernel = kernel
        self.num_warmup, self.num_samples = int(num_warmup), int(num_samples)
        self.num_chains, self.thinning = int(num_chains), int(thinning)
        self.chain_method, self.progress_bar = chain_method, bool(progress_bar)
        self.mesh = mesh
        self.post_warmup_state: MCMCState | None = None
        self._results: MCMCResults | None = None

    # -- running ---------------------------------------------------------------------------

    def _settings(self):
        """The settings every process of a sharded run must share."""
        return dict(kernel=(type(self.kernel).__name__, self.kernel.settings()),
                    num_warmup=self.num_warmup, num_samples=self.num_samples,
                    num_chains=self.num_chains, thinning=self.thinning)

    def _place(self, tree, mesh, spec):
        if mesh is None:
            return tree
        return place(tree, NamedSharding(mesh, spec))

    def _chunk_plan(self, num_warmup: int, num_draws: int,
                    checkpoint=None) -> tuple[Chunks, int]:
        """`(chunks, length)`: the run's chunk sizes (`Chunks`) and the draws' compiled buffer
        length, which bounds a chunk of draws.

        The buffer length is a function of the settings alone (that of a whole run, warmup
        included), so that `warmup()`, the `run()` after it (whose `num_warmup` is 0) and a whole
        `run()` share one executable. Without a progress bar or checkpoint each phase is one
        call, and the buffer holds the draws (warmup records nothing, so its calls are not
        bounded by it). With a progress bar, 20 equal chunks of the phases left. With a
        checkpoint, the first chunk is `1 / _CHECKPOINT_CHUNKS` of what is left and the next
        ones grow until one takes about `SECONDS` (at most a fifth of `every`: `every=0` keeps
        them at the first's size), within a buffer of a quarter of the draws. Where chunks cut
        the run changes no draw (`_chunks`).
        """
        total, whole = num_warmup + num_draws, self.num_warmup + num_draws
        if checkpoint is not None:
            first = max(1, math.ceil(total / _CHECKPOINT_CHUNKS))
            return (Chunks(first, min(SECONDS, checkpoint.every / 5)),
                    max(1, math.ceil(whole / _CHECKPOINT_CHUNKS), math.ceil(num_draws / 4)))
        if self.progress_bar:
            return Chunks(max(1, math.ceil(total / 20))), max(1, math.ceil(whole / 20))
        return Chunks(max(total, 1)), max(num_draws, 1)

    def _prepare(self, rng_key, args, kwargs, api, init_params=None):
        """The key, the model's compiled functions and sites, and the data, placed for the mesh."""
        key = typed_key(rng_key, f"`{api}`", MCMCError)
        setup = getattr(self.kernel, "setup_model", None)
        if setup is not None and self._program is None:  # (`HMCECS`: its subsampled plates)
            setup(args, kwargs)
        fns, dynamic = prepare(api, self._model(), args, kwargs)
        info = fns.site_info(dynamic)
        for name, fn in info.not_enumerable:  # the potential would say so; HMC needs it first
            check_enumerable(name, fn)
        if init_params is None:
            for name in info.valued:  # NumPyro's warning; they start at their value
                warnings.warn(f"{api}: {self.kernel.init_strategy.describe()} skipping "
                              f"initialization of site '{name}' which already stores a value "
                              f"(a `substitute` inside model `{fns.name}`); it starts there, "
                              f"and the sampler moves it as any latent site (the sampler's "
                              f"values replace the model's own, as in NumPyro).",
                              UserWarning, stacklevel=4)
        for name, dim, batch in info.missing_plates:  # NumPyro's loose plate check
            warnings.warn(f"{api}: Missing a plate statement for batch dimension {dim} at site "
                          f"'{name}' of model `{fns.name}` (its batch shape is {batch}; the "
                          f"plates around it cover other dimensions). Its log density is summed "
                          f"over that dimension as over a plate's; wrap it in "
                          f"`effppl.plate(..., {batch[dim]}, dim={dim})` to say so.",
                          UserWarning, stacklevel=4)
        if info.discrete_latent:
            fns, dynamic, info = self._enumerated(api, fns, info, args, kwargs)
        if self.chain_method == "vectorized":
            return key, fns, info, dynamic, None
        mesh = _sharded.chain_mesh(self.num_chains, self.mesh, api)
        dynamic = place_data(dynamic, mesh)
        _sharded.check_run(api, fns, dynamic, key, self._settings())
        return key, fns, info, dynamic, mesh

    def _execute(self, rng_key, args, kwargs, api, *, sample: bool, init_params=None,
                 collect_warmup: bool = False, checkpoint=None):
        _refuse_traced(api, (rng_key, args, kwargs, init_params))
        key, fns, info, dynamic, mesh = self._prepare(rng_key, args, kwargs, api, init_params)
        if not info.latent:  # nothing to sample (NumPyro runs and returns no latent draws)
            results = without_latents(fns, info, dynamic, self.num_chains,
                                      self.num_samples // self.thinning)
            if sample:
                self._results, self._warmed = results, None
            else:
                self.post_warmup_state = self._warmed = results.last_state
            return
        sampler = sampler_for(fns, self.kernel)
        if mesh is not None:
            sampler = _sharded.sharded_sampler(sampler, mesh)
        thinning = self.thinning
        num_draws = self.num_samples // thinning if sample else 0
        pws = self.post_warmup_state if sample else None
        num_steps = (0 if pws is not None else self.num_warmup) + num_draws * thinning
        init_key, init_keys, keys = _sharded.run_keys(key, self.num_chains, num_steps, mesh)
        place = functools.partial(self._place, mesh=mesh, spec=PartitionSpec("chain"))
        first, num_warmup = initial_chain(self, sampler, fns, info, (init_key, init_keys),
                                          dynamic, place, api, pws, init_params)
        # The buffer length is that of a full run, also for `warmup()` alone, so that `warmup()`
        # and the `run()` after it can share one executable.
        chunks, length = self._chunk_plan(num_warmup, self.num_samples // thinning, checkpoint)
        # warmup transitions recorded (`collect_warmup`) go into the draws' buffers
        spans = functools.partial(chunks.spans, cap=length if collect_warmup else None)
        keys = place(keys)
        schedule, chunk = sampler.schedule(self.num_warmup), sampler.chunk(length)
        # -- checkpoint: the run's committed progress, resumed from `checkpoint` if it has some
        record = RunRecord.open(
            self, checkpoint, api, fns=fns, info=info, dynamic=dynamic, key=key, chain=first,
            length=length, num_draws=num_draws, init_params=init_params, post_warmup_state=pws,
            place=place)

        def call(chain, keys, start, num, sampling, collect=False):
            span = Span(start=np.int32(start), num=np.int32(num), sampling=np.bool_(sampling),
                        thinning=np.int32(thinning), offset=np.int32(num_warmup),
                        record=np.bool_(collect))
            return record.wait(chunk(chain, keys, span, schedule, dynamic))

        total = num_warmup + num_draws * thinning
        done = record.warmup_done + record.draws_done * thinning
        restarts = []  # the warmup's restarts (chains, attempt): they change the chains' keys

        def restart(first, keys, bad, attempt):
            restarts.append((bad, attempt))
            return restart_chains(self, sampler, fns, init_key, dynamic, place, api, first,
                                  keys, bad, attempt)

        values, stats = [], []  # (the warmup's, when collected; a Ctrl-C may stop it first)
        with tqdm.tqdm(total=total, initial=done, disable=not self.progress_bar,
                       desc="warmup") as bar, record.catching():
            if record.warmup_done < num_warmup or not num_warmup:
                chain, keys, values, stats = warm_up(
                    call, record.chain, keys, num_warmup, spans, collect=collect_warmup,
                    restart=restart if init_params is None else None, model=fns.name,
                    first=first, start_at=record.warmup_done,
                    on_warmed=lambda chain, done: record.warmed(
                        chain, done, restarts if done == num_warmup else ()),
                    **(progress_callbacks(bar) if self.progress_bar else {}))
            else:  # resumed in sampling: the chains' keys as the warmup left them
                chain, keys = record.chain, refolded(keys, record.restarts)
            bar.set_postfix_str("", refresh=False)
            bar.set_description("sample")
            n_div = 0
            for start, num in chunks.spans(record.draws_done, num_draws, cap=length):
                # draws move the chain only: its kernel parameters are those of the warmup
                out, v, st, _ = call(chain, keys, start, num, True)
                chain = chain._replace(state=out.state)
                v, st = first_draws((v, st), num)
                record.drew(chain, start + num, v, st)
                if self.progress_bar:
                    d = st["diverging"]  # (a host array when sliced: no compiled sum per size)
                    n_div += int(np.sum(d) if isinstance(d, np.ndarray) else jnp.sum(d))
                    advance(bar, num * thinning, f"{n_div} divergences")
        # what the run committed (all of it, unless Ctrl-C stopped it: then it is kept)
        record.finish(num_warmup, num_draws)
        chain = record.chain
        if sample:
            values, stats = record.values, record.stats
        if record.stopper.interrupted and (record.warmup_done < num_warmup
                                           or (sample and not values)):
            self._results = None  # nothing drawn: nothing to show (the checkpoint holds it)
            return
        state = chain.state
        last = MCMCState(position=state.position, logdensity=state.logdensity,
                         logdensity_grad=state.logdensity_grad, step_size=chain.step_size,
                         inverse_mass_matrix=chain.inverse_mass_matrix,
                         mass_blocks=numpyro_blocks(
                             state.position, getattr(self.kernel, "dense_mass", False),
                             getattr(self.kernel, "inverse_mass_matrix", None),
                             getattr(self.kernel, "flat_adapt_state", False)),
                         kernel_state=_kernel_state(state))
        if not sample:
            self.post_warmup_state = self._warmed = last
            if collect_warmup and values:
                self._results = MCMCResults(samples=_concat(values, place),
                                            stats=_concat(stats, place),
                                            fns=fns, dynamic=dynamic, info=info, last_state=last)
            return
        self._warmed = None
        samples, stats = _concat(values, place), _concat(stats, place)
        if mesh is not None:  # read to every host once, when the draws span processes
            samples, stats = readable((samples, stats))
        self._results = MCMCResults(samples=samples, stats=stats, fns=fns,
                                    dynamic=dynamic, info=info, last_state=last)
        warn_divergences(fns.name, self._results.stats, record.draws_done * self.num_chains)
        depth = getattr(self.kernel, "max_tree_depth", None)
        warn_tree_depth(fns.name, self._results.stats,
                        depth[1] if isinstance(depth, tuple) else depth)  # (sampling's)
        warn_mixing(fns.name, self._results.stats, self._shown(self._results.samples),
                    exact=not getattr(self.kernel, "estimated_log_density", False))
        check_draws = getattr(self.kernel, "check_draws", None)  # (a kernel's own checks)
        if check_draws is not None:
            check_draws(fns.name, self._results.samples)

    def _explained(self, args, kwargs):
        """No finite initial point because a distribution parameter is invalid (validation on):
        that error, naming the site, instead."""
        return explained_by_parameters(self._model(), args, kwargs, (InitializationError,))

    # -- NumPyro's `potential_fn` kernels (`_potential.py`) ----------------------------------

    _program: PotentialProgram | None = None

    def _enumerated(self, api, fns, info, args, kwargs):
        """NumPyro's way with latent discrete sites not marked for enumeration: those with a
        finite support are summed out (`config_enumerate`), with NumPyro's `FutureWarning`
        naming them; a site without one (e.g. `Poisson`) is an `MCMCError`."""
        fns, dynamic = prepare(api, _auto_enumerated(self._model()), args, kwargs)
        marked, info = info, fns.site_info(dynamic)
        if info.discrete_latent:
            raise MCMCError(
                f"`{api}` needs continuous latent sites, but site `{info.discrete_latent[0]}` of "
                f"model `{fns.name}` has a discrete support without a finite one to enumerate. "
                "Observe it, or marginalise it in the model (e.g. a truncated sum with "
                "`effppl.factor`); discrete sites with a finite support are summed out exactly "
                "(mark them with `infer={'enumerate': 'parallel'}`).")
        for name, fn in info.not_enumerable:
            check_enumerable(name, fn)
        names = ", ".join(f"'{n}'" for n in marked.discrete_latent)
        warnings.warn(f"{api}: Some algorithms will automatically enumerate the discrete latent "
                      f"site(s) {names} of model `{fns.name}` (summed out exactly, as NumPyro "
                      f"does). In the future, enumerated sites need to be marked with "
                      f"`infer={{'enumerate': 'parallel'}}` (or the model wrapped in "
                      f"`effppl.infer.config_enumerate`).", FutureWarning, stacklevel=5)
        return fns, dynamic, info

    def _model(self):
        """The model the chains run: the kernel's, or the model of its `potential_fn`."""
        return self.kernel.model if self._program is None else self._program.model

    def _for_potential(self, args, kwargs, init_params, api):
        """`init_params` as the sites of the kernel's `potential_fn` model (set up here), or as
        given for a kernel with a model."""
        if getattr(self.kernel, "potential_fn", None) is None:
            self._program = None
            return init_params
        if init_params is None and self.post_warmup_state is not None and self._program:
            return None  # (continuing from `warmup`, whose program it is)
        self._program = potential_program(self.kernel, init_params, self.num_chains, args,
                                          kwargs, api)
        return self._program.sites_of(init_params)

    def _sample_tree(self, samples):
        return samples if self._program is None else self._program.tree_of(samples)

    def warmup(self, rng_key, *args, extra_fields=(), collect_warmup: bool = False,
               init_params=None, **kwargs) -> None:
        """Run only the warmup; the next `run` starts from `post_warmup_state` and skips it.

        **Arguments:** as `run`, and `collect_warmup`: keep the warmup's transitions, as
        NumPyro's `MCMC.warmup(..., collect_warmup=True)`: `get_samples` and `get_extra_fields`
        then return them (`num_warmup` per chain; `step_size` the one in force at each, and
        `n_steps`/`num_steps` its leapfrog steps, i.e. gradient evaluations) until the next
        `run`. `extra_fields` as for `run`.

        **Returns:** `None`; sets `self.post_warmup_state`.

        **Warns:** `StuckChainWarning` naming each chain whose warmup degenerated (a collapsed
        step size, an inverse mass matrix that is not finite and positive, or a chain that ended
        the warmup stuck at one point) after two restarts from new initial points.
        """
        if not isinstance(collect_warmup, (bool, np.bool_)):
            raise MCMCError(f"`effppl.infer.MCMC.warmup(..., collect_warmup=...)` expected a "
                            f"bool, but got {collect_warmup!r}.")
        aliases = numpyro_fields(extra_fields, "effppl.infer.MCMC.warmup")
        init_params = self._for_potential(args, kwargs, init_params, "effppl.infer.MCMC.warmup")
        with site_errors(), self._explained(args, kwargs):
            self._execute(rng_key, args, kwargs, "effppl.infer.MCMC.warmup", sample=False,
                          init_params=init_params, collect_warmup=bool(collect_warmup))
        if collect_warmup and self.num_warmup:
            stats = self._get("stats", "warmup")
            stats.update({name: NUMPYRO_FIELDS[name](stats) for name in aliases
                          if name in NUMPYRO_FIELDS})
            site_fields(self._results_for("warmup"), aliases, "effppl.infer.MCMC.warmup")

    def run(self, rng_key, *args, extra_fields=(), init_params=None, checkpoint=None,
            **kwargs) -> None:
        """Initialise, warm up (unless `post_warmup_state` is set) and sample the chains.

        **Arguments:**

        - `rng_key`: `jax.random.key(seed)` or a raw `uint32[2]` `jax.random.PRNGKey(seed)`.
        - `*args`, `**kwargs`: the model's arguments. Arrays are data (arguments of the compiled
          sampler: new values of the same shapes re-use it); every other leaf is static and keys it.
        - `extra_fields`: names of statistics `get_extra_fields` must return, for NumPyro
          compatibility: every statistic of `get_extra_fields` is always recorded, and NumPyro's
          names `accept_prob`, `num_steps`, `potential_energy` and `adapt_state.step_size` are
          added under those names when asked for; NumPyro's `"z.<site>"` adds a latent site's
          unconstrained draws, and `"~z.<site>"` leaves the site out of `get_samples`. Other
          names raise `MCMCError`.
        - `init_params`: optional starting point, as NumPyro's: dict latent site -> *unconstrained*
          value (`effppl.handlers.unconstrain_fn` maps constrained values there), of the site's
          unconstrained shape or with a leading `num_chains` axis; replaces `init_strategy`. For
          constrained values, or only some sites, use `init_strategy=init_to_value(values=...)`.
        - `checkpoint`: a folder path (`"run.zarr"`) or `effppl.infer.Checkpoint(path,
          every=seconds)`. The run goes in compiled chunks (the first a hundredth of the run, the
          next ones growing until one takes about two seconds) and, after a chunk, every
          `every` seconds (default 10), writes its draws, statistics and the chains' full state there,
          atomically (a zarr store: `arviz.InferenceData.from_datatree(xarray.open_datatree(path,
          engine="zarr", consolidated=False))` opens the draws). When the folder holds a checkpoint of this very run
          (same model, data, settings and key), `run` continues where it stopped, and the draws
          equal those of an uninterrupted run, bit for bit.

        **Ctrl-C** stops the run after the chunk in progress (a second Ctrl-C at once) and
        returns, keeping the draws so far (`get_samples`, and the checkpoint when one is set),
        with an `InterruptedWarning` saying how many there are and how to continue.

        **Returns:** `None`; see `get_samples`, `get_extra_fields`, `print_summary`, `to_arviz`.

        **Raises:** `InitializationError` when a chain finds no finite starting point, or
        `init_params` misses a site, has a wrong shape or a non-finite log density;
        `MCMCError` for a model whose latent sites are discrete and not enumerated (a model
        with no latent site runs no sampler: its draws hold its deterministic sites, as
        NumPyro's), or `init_params` given while
        `post_warmup_state` is set, or a call inside `jax.jit`/`jax.vmap` (traced key, data or
        `init_params`: call it outside; NumPyro's `potential_fn` kernels also for missing
        `init_params` or given model arguments); `CheckpointError` for a `checkpoint` of another run (naming
        what differs), a damaged one, or a path that holds something else;
        `ModelArgumentError` naming a model argument that cannot be
        data; `SiteError` naming a site whose explicit `validate_args=True` check fails, or
        (`InvalidParameterError`, with validation on) whose distribution parameter is invalid
        when no finite initial point is found.

        **Warns:** `DivergenceWarning` when post-warmup transitions diverged. A non-finite log
        density at a proposal counts as a divergence; it never stops sampling.
        `StuckChainWarning` as for `warmup`; `MaxTreeDepthWarning` (NUTS) when more than a tenth
        of the post-warmup transitions stopped at `max_tree_depth`; `ChainMixingWarning` naming
        chains far below the best chain's log density (`_mixing.py`).
        """
        aliases = numpyro_fields(extra_fields, "effppl.infer.MCMC.run")
        checkpoint = as_checkpoint(checkpoint, "effppl.infer.MCMC.run")
        init_params = self._for_potential(args, kwargs, init_params, "effppl.infer.MCMC.run")
        with site_errors(), leaked_tracers("effppl.infer.MCMC.run", self._model()), \
                self._explained(args, kwargs):
            self._execute(rng_key, args, kwargs, "effppl.infer.MCMC.run", sample=True,
                          init_params=init_params, checkpoint=checkpoint)
        if self._results is None:  # interrupted before the first draw
            return
        stats = self._get("stats", "run")
        stats.update({name: NUMPYRO_FIELDS[name](stats) for name in aliases
                      if name in NUMPYRO_FIELDS})
        site_fields(self._results_for("run"), aliases, "effppl.infer.MCMC.run")


def _kernel_state(state):
    """The fields of a kernel's chain state beyond its position and log density (`SA`'s
    population), as a dict, or None."""
    rest = {f: getattr(state, f) for f in state._fields
            if f not in ("position", "logdensity", "logdensity_grad")}
    return rest or None
