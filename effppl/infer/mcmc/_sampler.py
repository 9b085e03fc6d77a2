"""Compiled MCMC chunks: blackjax kernels and blackjax's window adaptation.

One `Sampler` per (model, argument structure, kernel settings), cached. Its chunk function is a
`jax.jit` of a `vmap` over chains (`over_chains`: none for one chain) that takes the model data as an argument and serves *both*
phases: the warmup and the sampling chunks run the same executable (one XLA compilation of the
kernel per run configuration, as in NumPyro), chunk after chunk (for the progress bar) and run after
run (new data of the same shapes) without recompiling.

**Window adaptation.** `blackjax.window_adaptation(...).run` runs the whole warmup in one call.
To report progress in chunks we run the very step it scans — blackjax's kernel followed by one
step of Stan's window adaptation (`_window.py`, built from blackjax's public pieces) on Stan's
schedule (`build_schedule`) — chunk by chunk. `tests/inference` checks that the result equals
`blackjax.window_adaptation(...).run` for the same keys, so a change inside blackjax is caught.
"""

import functools
from typing import Any, NamedTuple

import blackjax
import jax
import jax.numpy as jnp
import numpy as np
from blackjax.adaptation.step_size import find_reasonable_step_size
from jax.flatten_util import ravel_pytree

from ...effects import internal
from .._compile._cache import cached
from .._compile._chains import over_chains, per_chain_types
from .._compile._fns import MANY_REDUCTIONS
from .._compile._persistent import stored
from ._adaptation import identity_like, scheme_for, warmup_schedule
from ._kernels import HMC, NUTS
from ._mass import structure

__all__ = ["ChainState", "ChunkModel", "Span", "Sampler", "by_user_code", "sampler_for", "split_run_key", "warmup_schedule"]


class ChainState(NamedTuple):
    """A chain's state between chunks (with a leading chain axis outside `Sampler.chunk`).

    `state`: the blackjax kernel's state; `adapt_state`: blackjax's window-adaptation state;
    `step_size`, `inverse_mass_matrix`: the kernel parameters used while sampling (warmup uses
    those of `adapt_state`); `stuck_for`: the number of consecutive warmup transitions, up to the
    last one, that left the position unchanged (a chain stuck at a point keeps counting)."""

    state: Any
    adapt_state: Any
    step_size: Any
    inverse_mass_matrix: Any
    stuck_for: Any


class Span(NamedTuple):
    """Which transitions one chunk runs (scalars, the same for every chain).

    `start`: index of its first warmup step or draw; `num`: how many (at most the chunk's
    length); `sampling`: draws (True) or warmup steps; `thinning`: transitions per draw;
    `offset`: the number of warmup transitions (where the sampling keys start); `record`: record
    the warmup's transitions too (`MCMC.warmup(..., collect_warmup=True)`)."""

    start: Any
    num: Any
    sampling: Any
    thinning: Any
    offset: Any
    record: Any = np.bool_(False)


def split_run_key(key, num_chains: int, num_steps: int):
    """`(init_key, its split per chain, keys[chain, step])` of a run with key `key`: chain `c`'s
    transition keys are `split(split(split(key)[1], num_chains)[c], num_steps)`, whatever the
    layout of the chains over devices."""
    init_key, run_key = jax.random.split(key)
    steps = jax.vmap(lambda k: jax.random.split(k, num_steps))(jax.random.split(run_key, num_chains))
    return init_key, jax.random.split(init_key, num_chains), steps


def _strong(tree):
    """`tree` without weakly-typed leaves, so a chunk's output carry has exactly its input's types
    and feeding it back into the next chunk does not recompile."""
    return jax.tree.map(lambda x: jnp.asarray(x).astype(jnp.asarray(x).dtype), tree)


def _select(pred, on_true, on_false):
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


class ChunkModel(NamedTuple):
    """The model as one chunk's kernel sees it (`_HMCFamily.bind`): `position`, a dict site ->
    unconstrained value of one chain (the structure of the flat vector the kernel moves);
    `unravel(flat)` -> that dict; `constrain(flat)` -> constrained latent and deterministic
    sites; `unconstrain(values)` -> unconstrained values of constrained ones (every latent);
    `args()` -> the model's `(args, kwargs)` (traced: the chunk's data)."""

    position: Any
    unravel: Any
    constrain: Any
    unconstrain: Any
    args: Any = None


class Sampler:
    """Compiled, chain-vectorised functions of one model + argument structure + kernel settings.

    - `start(num_warmup)(params, potential_energy, grad)` -> `ChainState`.
    - `schedule(num_warmup)`: the adaptation's schedule, the chunk's `schedule` argument.
    - `chunk(length)`: the compiled chunk with output buffers of `length` draws (see `_chunk`).
    """

    def __init__(self, fns, kernel):
        self.fns = fns
        self.kernel = kernel
        self._kernel = kernel.build_kernel()
        self._kwargs = kernel.kernel_kwargs()
        self._scheme = scheme_for(kernel.mass_matrix, kernel.target_accept_prob,
                                  dense_mass=kernel.dense_mass,
                                  adapt_mass_matrix=kernel.adapt_mass_matrix,
                                  structure=functools.partial(_mass_structure, kernel),
                                  regularize=getattr(kernel, "regularize_mass_matrix", True))
        self._adapt_update, self._adapt_final = self._scheme.update, self._scheme.final
        self._starts: dict = {}
        self._chunks: dict = {}

    def start(self, num_warmup: int):
        """`jit(over_chains(_start))` for a warmup of `num_warmup` transitions (the adaptation's
        buffers are sized by it; cached per value)."""
        if num_warmup not in self._starts:
            fn = functools.partial(self._start, num_warmup=num_warmup)
            fn.__name__ = "start"  # type: ignore[attr-defined]
            self._starts[num_warmup] = stored(jax.jit(over_chains(fn, (0, 0, 0))), None,
                                              "start")
        return self._starts[num_warmup]

    def schedule(self, num_warmup: int) -> np.ndarray:
        """The adaptation scheme's warmup schedule (`int32[max(num_warmup, 1), 2]`)."""
        return self._scheme.schedule(num_warmup)

    def chunk(self, length: int):
        """`jit(over_chains(_chunk))` (a `vmap` over chains) with buffers of `length` draws
        (cached per length; `by_user_code`)."""
        return by_user_code(self, self._chunks, length, self._build_chunk)

    def _build_chunk(self, length: int):
        fn = functools.partial(self._chunk, length=length)
        in_axes = (0, 0, None, None, None)  # chain, keys: per chain
        jitted = jax.jit(over_chains(fn, in_axes))
        return stored(jitted, functools.partial(self._program_key, length), "chunk")

    def _program_key(self, length, chain, keys, span, schedule, dynamic):
        """What `_chunk`'s program depends on beyond the argument types and effppl's code (for
        `stored`): the model's jaxprs, the kernel's settings, the buffer length. `None` (not
        stored) for a kernel class defined outside effppl, or one running a user's function
        (`HMCGibbs`'s `gibbs_fn`: its code is not in the model's jaxprs)."""
        if not type(self.kernel).__module__.startswith("effppl.") or \
                getattr(self.kernel, "runs_user_code", False):
            return None
        one_chain = per_chain_types(chain.state.position)
        model = self.fns.fingerprint(one_chain, dynamic)
        if model is None:
            return None
        return repr((model, type(self.kernel).__qualname__, self.kernel.settings(), length))

    def tuned(self, astate):
        """Step size and inverse mass matrix in force during warmup (honours `adapt_*=False`)."""
        step_size, imm = astate.step_size, astate.inverse_mass_matrix
        if not self.kernel.adapt_step_size:
            step_size = jnp.asarray(self.kernel.step_size, jnp.result_type(float))
        if not self.kernel.adapt_mass_matrix and self.kernel.mass_matrix not in ("diag", "dense"):
            imm = identity_like(imm)  # (Stan's window keeps the initial one itself)
        return step_size, imm

    def final(self, astate):
        """Step size and inverse mass matrix after warmup."""
        step_size, imm = self._adapt_final(astate)
        return self.tuned(astate._replace(step_size=step_size, inverse_mass_matrix=imm))

    def _start(self, params, potential_energy, grad, num_warmup=0):
        state = self.kernel.init_state(params, -potential_energy, jax.tree.map(jnp.negative, grad))
        astate = self._scheme.init(params, self.kernel.step_size, num_warmup)
        if self.kernel.adapt_mass_matrix:
            astate = self._scheme.seed(astate, state.logdensity_grad)
        return _strong(ChainState(state, astate, *self.tuned(astate), jnp.zeros((), jnp.int32)))

    def _heuristic(self, sampling, i, schedule, key, state, logdensity, astate):
        """NumPyro's `find_heuristic_step_size`: before warmup transition `i`, when it is the
        first or follows a window's end, the step size's adaptation restarted from Hoffman and
        Gelman's (2014, Algorithm 4) heuristic: from the step size in force, doubled or halved
        until the acceptance probability of one leapfrog step from `state` crosses 0.8
        (blackjax's `find_reasonable_step_size`). A `cond` on values shared by every chain."""
        ended = schedule[jnp.clip(i - 1, 0, schedule.shape[0] - 1)][1] == 1
        due = jnp.logical_not(sampling) & ((i == 0) | ended)
        restart_at = self._scheme.restart
        assert restart_at is not None  # (`heuristic`: Stan's schemes only)
        one_step = blackjax.mcmc.hmc.build_kernel(
            divergence_threshold=self.kernel.divergence_threshold)

        def restart(astate):
            step_size, imm = self.tuned(astate)

            def generator(step):
                return lambda k, s: one_step(k, s, logdensity, step, imm, num_integration_steps=1)

            found = find_reasonable_step_size(jax.random.fold_in(key, 0x5eed), generator, state,
                                              step_size, 0.8)
            return restart_at(astate, found)

        return jax.lax.cond(due, restart, lambda a: a, astate)

    def _transition(self, kernel, sampling, key, state, logdensity, params):
        """One transition of `kernel` (`self._kernel` as the kernel object `bind`s it to the
        chunk's model); with NumPyro's `max_tree_depth=(warmup, sampling)`, a `cond` on
        `sampling` (the same for every chain: it stays a `cond` under the chains' `vmap`)
        between the two depths."""
        kwargs = self._kwargs
        depths = kwargs.get("max_num_doublings")
        if not isinstance(depths, tuple):
            return kernel(key, state, logdensity, *params, **kwargs)

        def with_depth(depth):
            def step(operands):
                return kernel(*operands[:2], logdensity, *operands[2],
                              **dict(kwargs, max_num_doublings=depth))
            return step
        return jax.lax.cond(sampling, with_depth(depths[1]), with_depth(depths[0]),
                            (key, state, params))

    def _chunk(self, chain: ChainState, keys, span: Span, schedule, dynamic, *, length):
        """Run `span.num` warmup steps, or `span.num` (<= `length`) draws, of one chain.

        **Arguments:** `chain`: the chain's `ChainState`;
        `keys[num_warmup + num_draws * thinning]`: every key of the run; `span`: which
        transitions (`Span`); `schedule`: Stan's schedule; `dynamic`: the model data.

        **Returns:** `(chain, values[length], stats[length], number of divergent transitions)`,
        the new `ChainState` holding the kernel parameters adapted so far (`final`); buffer rows
        past `span.num` are zeros.
        """
        state, astate = chain.state, chain.adapt_state
        step_size, imm = chain.step_size, chain.inverse_mass_matrix
        start, num, sampling, thinning, offset, record_warmup = span
        # The loops carry the position and gradient as one flat vector each, as NumPyro's
        # sampler does: XLA's compile time grows with the number of leaves in a while loop's
        # carry (1.6x at 200 sites with one leaf per site), and blackjax's trajectory carries
        # several copies of the position.
        model_logdensity = self.fns.logdensity_fn(
            dynamic, forward=getattr(self.kernel, "forward_mode_differentiation", False))
        many_reductions = self.fns.reductions(state.position, dynamic) >= MANY_REDUCTIONS
        flat_position, unravel = ravel_pytree(state.position)
        state = state._replace(position=flat_position,
                               logdensity_grad=ravel_pytree(state.logdensity_grad)[0])

        def logdensity(flat):
            # The barrier keeps the sites' slices of the flat vector out of the potential's
            # fusions, as in NumPyro's sampler, whose potential takes one buffer per site: XLA
            # otherwise recomputes them inside fusions that grow with the model, and compiles
            # the chunk more slowly (600 sites: 212 -> 164 s).
            out = model_logdensity(jax.lax.optimization_barrier(unravel(flat)))
            return _fusible_copy(out) if many_reductions else out

        kernel = self.kernel.bind(self._kernel, ChunkModel(
            unravel(flat_position), unravel,
            lambda flat: self.fns.constrain(unravel(flat), dynamic),
            lambda values: self.fns.unconstrain(values, dynamic),
            lambda: self.fns.args(dynamic)))
        schedule = jnp.asarray(schedule)
        last = schedule.shape[0] - 1
        dtype = jnp.result_type(state.logdensity)
        kernel_object = self.kernel
        heuristic = (getattr(kernel_object, "find_heuristic_step_size", False)
                     and kernel_object.adapt_step_size and self._scheme.restart is not None
                     and type(kernel_object) in (HMC, NUTS))

        def transition(j, carry):
            state, astate, stats, n_div, i, stuck_for = carry
            k = jnp.where(sampling, offset + i * thinning + j, i)
            if heuristic:
                astate = self._heuristic(sampling, i, schedule, keys[k], state, logdensity,
                                         astate)
            params = _select(sampling, (step_size, imm), self.tuned(astate))
            new, info = self._transition(kernel, sampling, keys[k], state, logdensity, params)
            stage = schedule[jnp.minimum(i, last)]
            # A `cond` (`sampling` is the same for every chain), so that draws skip the
            # adaptation's work: the estimators' updates and, at the schedule's window ends,
            # the Fisher low-rank estimate's SVDs.
            astate = jax.lax.cond(
                sampling, lambda a: a,
                lambda a: _strong(self._adapt_update(a, (stage[0], stage[1]), new.position,
                                                     new.logdensity_grad, info.acceptance_rate)),
                astate)
            stats = dict(self.kernel.stats(info, dtype), step_size=jnp.asarray(params[0], dtype))
            moved = jnp.any(new.position != state.position)
            stuck_for = jnp.where(sampling, stuck_for, jnp.where(moved, 0, stuck_for + 1))
            return (new, astate, stats, n_div + stats["diverging"].astype(jnp.int32), i,
                    stuck_for.astype(jnp.int32))

        def record(state, stats):
            values = self.fns.constrain(unravel(state.position), dynamic)
            stats = dict(stats, lp=state.logdensity)
            return values, stats

        # `record` traced once (the model's constrain pass, handlers compiled away), for the
        # buffers' types and for the draws; not once for each.
        zero_stats = dict(self.kernel.empty_stats(dtype), step_size=jnp.zeros((), dtype))
        record_jaxpr, shapes = jax.make_jaxpr(record, return_shape=True)(state, zero_stats)
        out_tree = jax.tree.structure(shapes)

        def recorded(state, stats):
            outs = internal.jaxpr_as_fun(record_jaxpr)(*jax.tree.leaves((state, stats)))
            return jax.tree.unflatten(out_tree, outs)

        def one_draw(n, carry):
            state, astate, stats, buffers, n_div, stuck_for = carry
            inner = jnp.where(sampling, thinning, 1)
            state, astate, stats, n_div, _, stuck_for = jax.lax.fori_loop(
                0, inner, transition, (state, astate, stats, n_div, start + n, stuck_for)
            )
            buffers = jax.lax.cond(
                sampling | record_warmup,
                lambda b: jax.tree.map(lambda buf, x: buf.at[n].set(x), b, recorded(state, stats)),
                lambda b: b,
                buffers,
            )
            return state, astate, stats, buffers, n_div, stuck_for

        buffers = jax.tree.map(lambda s: jnp.zeros((length,) + s.shape, s.dtype), shapes)
        carry = (state, astate, zero_stats, buffers, jnp.int32(0), chain.stuck_for)
        state, astate, _, (values, stats), n_div, stuck_for = jax.lax.fori_loop(
            0, num, one_draw, carry)
        state = state._replace(position=unravel(state.position),
                               logdensity_grad=unravel(state.logdensity_grad))
        step_size, imm = _strong(self.final(astate))
        chain = ChainState(_strong(state), astate, step_size, imm, stuck_for)
        return chain, values, stats, n_div


def by_user_code(sampler, store: dict, length: int, build):
    """The chunk function of `length` draws, `build(length)`, kept in `store`. For a kernel
    that runs the user's code (`HMCGibbs`'s `gibbs_fn`), whose arrays it closes over (data read
    from a global) are not arguments, the chunk is built anew whenever that code's program
    (`kernel.user_code_key` at the call's argument types: its text and the arrays it closes over)
    differs from the one kept, so that new data read there are not silently replaced by the
    first ones."""
    kernel, fns = sampler.kernel, sampler.fns
    if not getattr(kernel, "runs_user_code", False):
        if length not in store:
            store[length] = build(length)
        return store[length]

    def call(chain, keys, span, schedule, dynamic):
        one_chain = per_chain_types(chain.state.position)
        code = kernel.user_code_key(fns, one_chain, dynamic)
        if store.get(length, (None,))[0] != code or code is None:
            store[length] = (code, build(length))
        return store[length][1](chain, keys, span, schedule, dynamic)

    return call


def _fusible_copy(x):
    """`x`, bitwise, through an elementwise operation XLA keeps (a rounding to `x`'s own
    precision), so that the log density reaches the sampler's state through a fusible user.

    XLA's CPU fusion pass forbids more than 6 reductions in one fusion, and decides it by
    counting the reductions of the whole consumer fusion each time it considers one more,
    again after every fusion into it. With one fusible user, the log density's chain of
    scalar sums (`total + sum(log_prob)` per site) becomes one fusion of thousands of
    instructions with each site's plate reduction as an operand, and the counting grows
    faster than the model: 256 s of XLA for the chunk at 600 sites, against 227 s for
    NumPyro's program. With two fusible users, as in NumPyro's sampler (the stored potential
    and the energy), XLA computes the scalar chain in both, each reduction has two users and
    is rejected at once (an expensive producer would be duplicated): 85 s at 600 sites. The
    reductions themselves are computed once; only the scalar chain is computed twice."""
    info = jnp.finfo(x.dtype)
    return jax.lax.reduce_precision(x, exponent_bits=info.nexp, mantissa_bits=info.nmant)


def sampler_for(fns, kernel) -> Sampler:
    """The cached `Sampler` of `fns` (model + argument structure) and `kernel`'s settings."""
    key = ("sampler", fns, kernel.settings())
    return cached(key, lambda: Sampler(fns, kernel))


def _mass_structure(kernel, position):
    """`_mass.structure` of the latent sites of `position` (a dict site -> unconstrained value)
    for `kernel`'s `dense_mass` and `inverse_mass_matrix`."""
    if kernel.dense_mass in (True, False) and getattr(kernel, "inverse_mass_matrix", None) is None:
        return None, None
    sizes = {name: int(np.prod(jnp.shape(value))) for name, value in position.items()}
    dtype = ravel_pytree(position)[0].dtype
    return structure(kernel._api, sizes, kernel.dense_mass, kernel.inverse_mass_matrix, dtype)
