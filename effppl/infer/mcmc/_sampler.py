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

import jax
import jax.numpy as jnp
import numpy as np
from blackjax.adaptation.window_adaptation import build_schedule
from jax.flatten_util import ravel_pytree

from ...effects import internal
from .._compile._cache import cached
from .._compile._chains import over_chains
from .._compile._fns import MANY_REDUCTIONS
from .._compile._persistent import stored
from ._mass import structure
from ._window import window_adaptation

__all__ = ["ChainState", "Span", "Sampler", "sampler_for", "warmup_schedule"]


class ChainState(NamedTuple):
    """A chain's state between chunks (with a leading chain axis outside `Sampler.chunk`).

    `state`: the blackjax kernel's state; `adapt_state`: blackjax's window-adaptation state;
    `step_size`, `inverse_mass_matrix`: the kernel parameters used while sampling (warmup uses
    those of `adapt_state`)."""

    state: Any
    adapt_state: Any
    step_size: Any
    inverse_mass_matrix: Any


class Span(NamedTuple):
    """Which transitions one chunk runs (scalars, the same for every chain).

    `start`: index of its first warmup step or draw; `num`: how many (at most the chunk's
    length); `sampling`: draws (True) or warmup steps; `thinning`: transitions per draw;
    `offset`: the number of warmup transitions (where the sampling keys start)."""

    start: Any
    num: Any
    sampling: Any
    thinning: Any
    offset: Any


@functools.lru_cache(maxsize=32)
def warmup_schedule(num_warmup: int) -> np.ndarray:
    """Stan's warmup schedule, `int32[max(num_warmup, 1), 2]`, rows `(slow?, ends a window?)`."""
    if num_warmup == 0:
        sched = np.zeros((1, 2), np.int32)
    else:
        with jax.ensure_compile_time_eval():
            sched = np.asarray(build_schedule(num_warmup), dtype=np.int32).reshape(num_warmup, 2)
    sched.setflags(write=False)
    return sched


def _strong(tree):
    """`tree` without weakly-typed leaves, so a chunk's output carry has exactly its input's types
    and feeding it back into the next chunk does not recompile."""
    return jax.tree.map(lambda x: jnp.asarray(x).astype(jnp.asarray(x).dtype), tree)


def _select(pred, on_true, on_false):
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


class Sampler:
    """Compiled, chain-vectorised functions of one model + argument structure + kernel settings.

    - `start(params, potential_energy, grad)` -> `ChainState`.
    - `chunk(length)`: the compiled chunk with output buffers of `length` draws (see `_chunk`).
    """

    def __init__(self, fns, kernel):
        self.fns = fns
        self.kernel = kernel
        self._kernel = kernel.build_kernel()
        self._kwargs = kernel.kernel_kwargs()
        self._adapt_init, self._adapt_update, self._adapt_final = window_adaptation(
            kernel.dense_mass, kernel.target_accept_prob, kernel.adapt_mass_matrix,
            functools.partial(_mass_structure, kernel))
        self.start = stored(jax.jit(over_chains(self._start, (0, 0, 0))), None, "start")
        self._chunks: dict = {}

    def chunk(self, length: int):
        """`jit(over_chains(_chunk))` (a `vmap` over chains) with buffers of `length` draws (cached per length)."""
        if length not in self._chunks:
            fn = functools.partial(self._chunk, length=length)
            in_axes = (0, 0, None, None, None)  # chain, keys: per chain
            jitted = jax.jit(over_chains(fn, in_axes))
            self._chunks[length] = stored(jitted, functools.partial(self._program_key, length),
                                          "chunk")
        return self._chunks[length]

    def _program_key(self, length, chain, keys, span, schedule, dynamic):
        """What `_chunk`'s program depends on beyond the argument types and effppl's code (for
        `stored`): the model's jaxprs, the kernel's settings, the buffer length. `None` (not
        stored) for a kernel class defined outside effppl."""
        if not type(self.kernel).__module__.startswith("effppl."):
            return None
        one_chain = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                                 chain.state.position)
        model = self.fns.fingerprint(one_chain, dynamic)
        if model is None:
            return None
        return repr((model, type(self.kernel).__qualname__, self.kernel.settings(), length))

    def tuned(self, astate):
        """Step size and inverse mass matrix in force during warmup (honours `adapt_*=False`)."""
        step_size, imm = astate.step_size, astate.inverse_mass_matrix
        if not self.kernel.adapt_step_size:
            step_size = jnp.asarray(self.kernel.step_size, jnp.result_type(float))
        return step_size, imm  # (`adapt_mass_matrix=False`: the window keeps the initial one)

    def final(self, astate):
        """Step size and inverse mass matrix after warmup."""
        step_size, imm = self._adapt_final(astate)
        return self.tuned(astate._replace(step_size=step_size, inverse_mass_matrix=imm))

    def _start(self, params, potential_energy, grad):
        state = self.kernel.init_state(params, -potential_energy, jax.tree.map(jnp.negative, grad))
        astate = self._adapt_init(params, self.kernel.step_size)
        return _strong(ChainState(state, astate, *self.tuned(astate)))

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
        start, num, sampling, thinning, offset = span
        # The loops carry the position and gradient as one flat vector each, as NumPyro's
        # sampler does: XLA's compile time grows with the number of leaves in a while loop's
        # carry (1.6x at 200 sites with one leaf per site), and blackjax's trajectory carries
        # several copies of the position.
        model_logdensity = self.fns.logdensity_fn(dynamic)
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

        schedule = jnp.asarray(schedule)
        last = schedule.shape[0] - 1
        dtype = jnp.result_type(state.logdensity)

        def transition(j, carry):
            state, astate, stats, n_div, i = carry
            k = jnp.where(sampling, offset + i * thinning + j, i)
            params = _select(sampling, (step_size, imm), self.tuned(astate))
            new, info = self._kernel(keys[k], state, logdensity, *params, **self._kwargs)
            stage = schedule[jnp.minimum(i, last)]
            adapted = self._adapt_update(
                astate, (stage[0], stage[1]), new.position, new.logdensity_grad,
                info.acceptance_rate,
            )
            astate = _strong(_select(sampling, astate, adapted))
            stats = self.kernel.stats(info, dtype)
            return new, astate, stats, n_div + info.is_divergent.astype(jnp.int32), i

        def record(state, stats):
            values = self.fns.constrain(unravel(state.position), dynamic)
            stats = dict(stats, lp=state.logdensity, step_size=jnp.asarray(step_size, dtype))
            return values, stats

        # `record` traced once (the model's constrain pass, handlers compiled away), for the
        # buffers' types and for the draws; not once for each.
        zero_stats = self.kernel.empty_stats(dtype)
        record_jaxpr, shapes = jax.make_jaxpr(record, return_shape=True)(state, zero_stats)
        out_tree = jax.tree.structure(shapes)

        def recorded(state, stats):
            outs = internal.jaxpr_as_fun(record_jaxpr)(*jax.tree.leaves((state, stats)))
            return jax.tree.unflatten(out_tree, outs)

        def one_draw(n, carry):
            state, astate, stats, buffers, n_div = carry
            inner = jnp.where(sampling, thinning, 1)
            state, astate, stats, n_div, _ = jax.lax.fori_loop(
                0, inner, transition, (state, astate, stats, n_div, start + n)
            )
            buffers = jax.lax.cond(
                sampling,
                lambda b: jax.tree.map(lambda buf, x: buf.at[n].set(x), b, recorded(state, stats)),
                lambda b: b,
                buffers,
            )
            return state, astate, stats, buffers, n_div

        buffers = jax.tree.map(lambda s: jnp.zeros((length,) + s.shape, s.dtype), shapes)
        carry = (state, astate, zero_stats, buffers, jnp.int32(0))
        state, astate, _, (values, stats), n_div = jax.lax.fori_loop(0, num, one_draw, carry)
        state = state._replace(position=unravel(state.position),
                               logdensity_grad=unravel(state.logdensity_grad))
        chain = ChainState(_strong(state), astate, *_strong(self.final(astate)))
        return chain, values, stats, n_div


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
