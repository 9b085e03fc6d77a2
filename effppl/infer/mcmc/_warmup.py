"""The warmup phase of `MCMC`: chunks of warmup transitions, checked, and restarted when
degenerate.

After the warmup, every chain is checked (`_warmup_check.warmup_problems`: an inverse mass
matrix that is not finite and positive, a collapsed step size, a chain stuck at one point). A
degenerate chain is given a new initial point and new transition keys, and the warmup runs again
(the sound chains repeat theirs with their own keys, so their results do not change); after
`RETRIES` restarts the chains still degenerate are named in a `StuckChainWarning`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._progress import advance
from ._warmup_check import degenerate_chains, warn_degenerate

__all__ = ["RETRIES", "warm_up", "restarted", "refolded", "progress_callbacks", "first_draws"]

RETRIES = 2  # times a chain whose warmup degenerated is restarted from a new point


def first_draws(tree, num: int):
    """A chunk's first `num` draws of its buffers `[chain, draw, ...]`. Sliced on the host when
    this process holds an array whole: a slice on the device compiles a program for each `num`,
    and timed chunks (`_chunks`) have many sizes; a process-spanning array is sliced on its
    devices."""
    def part(x):
        if x.shape[1] == num:
            return x
        return np.asarray(x)[:, :num] if x.is_fully_addressable else x[:, :num]

    return jax.tree.map(part, tree)


def warm_up(call, chain, keys, num_warmup: int, spans, *, collect: bool, restart, model: str,
            first=None, start_at: int = 0, on_warmed=None, on_chunk=None, on_restart=None):
    """Run `num_warmup` warmup transitions in chunks, restarting degenerate chains.

    **Arguments:** `call(chain, keys, start, num, sampling, record) -> (chain, values, stats,
    n_div)`: one compiled chunk; `chain`, `keys`: the starting `ChainState` and the run's keys
    `[chain, step]`; `spans(start, end)`: the chunks `(start, num)` of steps `[start, end)`
    (`Chunks.spans`); `collect`: keep the warmup's transitions; `restart(first, keys, bad,
    attempt) -> (first, keys)`, or `None` when no restart is possible (the user gave the initial
    point); `model`: the model's name, for the warning; `start_at`: the transitions already done
    (a run resumed from a checkpoint: `chain` is the state reached, and `first` the initial
    state a restart begins from; default `chain`); `on_warmed(chain, done)`:
    commits progress (a checkpoint), called after every chunk of the first attempt but its last,
    and once with the final state after the checks and restarts; `on_chunk(num, n_div)` and
    `on_restart(bad)`: progress callbacks (optional).

    **Returns:** `(chain, keys, values, stats)`: the warmed-up `ChainState`, the keys in use
    (a restarted chain's are new), and the recorded transitions (lists of chunks; empty unless
    `collect`).

    **Warns:** `StuckChainWarning` naming each chain still degenerate after `RETRIES` restarts.
    """
    resumed, first = chain, chain if first is None else first
    for attempt in range(RETRIES + 1):
        values, stats, chain = [], [], resumed if attempt == 0 else first
        for start, num in spans(start_at if attempt == 0 else 0, num_warmup):
            chain, v, st, nd = call(chain, keys, start, num, False, collect)
            if collect:
                values.append(first_draws(v, num))
                stats.append(first_draws(st, num))
            if on_chunk is not None:
                on_chunk(num, nd)
            if on_warmed is not None and attempt == 0 and start + num < num_warmup:
                on_warmed(chain, start + num)
        bad = degenerate_chains(chain, num_warmup)
        if not bad or attempt == RETRIES or restart is None:
            break
        first, keys = restart(first, keys, bad, attempt + 1)
        if on_restart is not None:
            on_restart(bad)
    if bad:
        warn_degenerate(model, np.shape(keys)[0], bad, RETRIES if restart is not None else 0)
    if on_warmed is not None and num_warmup > start_at:
        on_warmed(chain, num_warmup)
    return chain, keys, values, stats


@jax.jit
def _refold(keys, attempt):
    """Every key of `keys[chain, step]` folded with `attempt` (a restarted warmup's keys)."""
    return jax.vmap(jax.vmap(lambda k: jax.random.fold_in(k, attempt)))(keys)


def _pick(mask, a, b):
    """`a` where `mask[chain]`, else `b` (leading chain axis)."""
    return jnp.where(jnp.reshape(mask, mask.shape + (1,) * (jnp.ndim(a) - 1)), a, b)


def _redo(keys, bad):
    redo = np.zeros(np.shape(keys)[0], bool)
    redo[sorted(bad)] = True
    return functools.partial(_pick, jnp.asarray(redo))


def restarted(first, keys, fresh, bad, attempt: int):
    """`(first, keys)` with the chains in `bad` replaced: their starting `ChainState` by
    `fresh`'s, their keys folded with `attempt`."""
    return jax.tree.map(_redo(keys, bad), fresh, first), refolded(keys, [(bad, attempt)])


def refolded(keys, restarts):
    """`keys` after the restarts `[(bad chains, attempt), ...]`, in order (the keys a resumed
    run samples with, after a warmup that restarted chains)."""
    for bad, attempt in restarts:
        keys = _redo(keys, bad)(_refold(keys, np.uint32(attempt)), keys)
    return keys


def progress_callbacks(bar) -> dict:
    """`warm_up`'s progress callbacks for the tqdm bar `bar`: divergences so far, restarts."""
    n_div = [0]

    def on_chunk(num, nd):
        n_div[0] += int(jnp.sum(nd))  # (a global array in a multi-process run)
        advance(bar, num, f"{n_div[0]} divergences in warmup")

    def on_restart(bad):
        n_div[0] = 0
        bar.reset()
        bar.set_description(f"warmup (chains {sorted(bad)} restarted)")

    return {"on_chunk": on_chunk, "on_restart": on_restart}
