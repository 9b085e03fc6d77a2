"""What an `MCMC` run has done, saved to a checkpoint after its chunks and kept on Ctrl-C.

`RunRecord` holds the *committed* progress of one run: the chains' state (`ChainState`: position,
log density and gradient, the window adaptation's state, the step size and inverse mass matrix)
after the last chunk that finished, how many warmup steps and draws that is, and the draws so
far. The driver commits after each chunk (`warmed`, `drew`); with a checkpoint, the record saves
when `Checkpoint.every` seconds have passed, at the end, and when interrupted.

**Resuming bit for bit.** A run's keys are a function of its key (`_sharded.run_keys`), each
transition's key and schedule row are indexed by its step, and where chunks cut a run changes no
draw (`_chunks`), so the remaining transitions of a resumed run get the very keys, schedule rows
and carry (restored from the checkpoint's exact bytes) that the uninterrupted run gave them,
through the same compiled chunk (its buffer length is a function of the settings,
`MCMC._chunk_plan`). Its draws equal that run's.
A warmup that restarted chains changed their keys: the restarts (chains, attempt) are saved
with the warmup's end, and a run resumed in sampling folds its keys as they were folded; a run
resumed in warmup restarts them again from the same points (`_start.restart_chains`).

**Which run a checkpoint is of** (`_identity`): the model's program (`ModelFns.fingerprint`: the
jaxprs of the potential and of the constrain pass, with the values they close over), the model
data's shapes, dtypes and values, the kernel's settings, `num_warmup`, `num_samples`,
`num_chains`, `thinning`, the chunk length, the key, the start (init strategy, `init_params` or
`post_warmup_state`), float64 on or off, and the layout of the chains' state. Any difference is
an error naming it; a checkpoint is never resumed by another run.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import numpy as np

from ...effects import internal
from .._arviz import _usable_dims
from .._checkpoint import Record, layout, shapes
from .._checkpoint_store import Store
from .._compile._chains import per_chain_types
from .._compile._persistent import digest
from .._interrupt import InterruptedWarning, Stopper

__all__ = ["RunRecord"]


_GROUPS = ("posterior", "sample_stats")
_STATE = "chain_state"  # the chains' state's leaves in the store: `chain_state_0000`, ...


def _start(kernel, init_params, post_warmup_state) -> str:
    if post_warmup_state is not None:
        return "post_warmup_state " + digest(*jax.tree.leaves(post_warmup_state))
    if init_params is not None:
        return "init_params " + digest(*jax.tree.leaves(init_params))
    strategy = kernel.init_strategy
    return f"{strategy.describe()} " + digest(*jax.tree.leaves(strategy.dynamic()))


def _identity(mcmc, fns, dynamic, key, chain, length, start) -> dict:
    one_chain = per_chain_types(chain.state.position)
    kernel = mcmc.kernel
    return {
        "model": fns.name,
        "model program": fns.fingerprint(one_chain, dynamic) or "unknown (a callback)",
        "latent sites": {n: [list(s.shape), str(s.dtype)] for n, s in one_chain.items()},
        "data shapes": shapes(dynamic),
        "data values": digest(*dynamic),
        "kernel": f"{type(kernel).__qualname__} {kernel.settings()!r}",
        "num_warmup": mcmc.num_warmup, "num_samples": mcmc.num_samples,
        "num_chains": mcmc.num_chains, "thinning": mcmc.thinning, "chunk length": length,
        "rng_key": f"{jax.random.key_impl(key)} "
                   f"{np.asarray(jax.random.key_data(key)).ravel().tolist()}",
        "start (init strategy, init_params or post_warmup_state)": start,
        "jax_enable_x64": bool(internal.config_value("jax_enable_x64")),
        "chains' state layout (effppl's and blackjax's)": layout(chain),
    }


class RunRecord(Record):
    """The committed progress of one run (see the module's docstring).

    Built by `RunRecord.open(...)`; `chain`, `warmup_done`, `draws_done` are where the run
    (re)starts; `values`, `stats`: lists of draws `[chain, draw, ...]` so far (dicts by site
    and statistic). `wait`, `warmed`, `drew`, `catching`, `finish` are called by the driver.
    """

    def __init__(self, api, stopper, store, chain):
        super().__init__(api, stopper, store)
        self.chain, self.warmup_done, self.draws_done = chain, 0, 0
        self.restarts: list[list] = []  # the warmup's restarts: [chains, attempt] each
        self.values, self.stats = [], []  # `_unsaved`: (values, stats) not yet in the checkpoint
        self._info: Any = None  # the model's `SiteInfo` (plate names of the draws' axes)
        self._saved_at = self._progress()

    def _progress(self):
        return self.warmup_done, self.draws_done

    @classmethod
    def open(cls, mcmc, checkpoint, api, *, fns, info, dynamic, key, chain, length, num_draws,
             init_params, post_warmup_state, place):
        """A record of the run starting at `chain`, or resumed from `checkpoint`'s version in
        force. `place(tree)` puts a restored chain state where the chains run.

        **Raises:** `CheckpointError` for a checkpoint of another run, a damaged one, or a
        path that is no checkpoint."""
        stopper = Stopper(api)
        if checkpoint is None:
            return cls(api, stopper, None, chain)
        start = _start(mcmc.kernel, init_params, post_warmup_state)
        identity = _identity(mcmc, fns, dynamic, key, chain, length, start)
        store, saved = Store.open(checkpoint, "MCMC", identity, api, axis=1, total=num_draws)
        record = cls(api, stopper, store, chain)
        record._info = info
        if saved is None:
            return record
        record.chain = place(record._restored(chain, _STATE, saved.state))
        record.warmup_done = int(saved.progress["warmup"])
        record.draws_done = int(saved.progress["draws"])
        record.restarts = [[list(bad), int(a)] for bad, a in saved.progress.get("restarts", [])]
        record._saved_at = record._progress()
        if record.draws_done:
            record.values = [{k[len("posterior/"):]: v for k, v in saved.arrays.items()
                              if k.startswith("posterior/")}]
            record.stats = [{k[len("sample_stats/"):]: v for k, v in saved.arrays.items()
                             if k.startswith("sample_stats/")}]
        return record

    def warmed(self, chain, done: int, restarts=()) -> None:
        """Commit `done` warmup steps, reaching `chain`; at the warmup's end, with the
        `restarts` `[(chains, attempt), ...]` it made."""
        self.chain, self.warmup_done, self.restarts = chain, done, [
            [sorted(int(c) for c in bad), int(attempt)] for bad, attempt in restarts]
        self._committed()

    def drew(self, chain, done: int, values, stats) -> None:
        """Commit draws up to `done`, the new ones `values`, `stats`, reaching `chain`."""
        # one assignment: a Ctrl-C lands before or after it, never half-way
        self.chain, self.values, self.stats, self.draws_done, self._unsaved = (
            chain, self.values + [values], self.stats + [stats], done,
            self._unsaved + [(values, stats)])
        self._committed()

    def _save(self) -> None:
        assert self.store is not None
        appends = {}
        if self._unsaved:
            parts = jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=1),
                                 *self._unsaved) if len(self._unsaved) > 1 else \
                jax.tree.map(np.asarray, self._unsaved[0])
            values, stats = parts
            if not self.store.dims:
                self.store.dims = self._dims(values, stats)
            appends.update({f"posterior/{k}": v for k, v in values.items()})
            appends.update({f"sample_stats/{k}": v for k, v in stats.items()})
        progress = {"warmup": self.warmup_done, "draws": self.draws_done}
        if self.restarts:
            progress["restarts"] = self.restarts
        self.store.save(progress, self._state(self.chain, _STATE), appends)

    def _dims(self, values, stats) -> dict:
        shapes = {n: v.shape[2:] for n, v in values.items()}
        dims = self._info.dims if self._info is not None else ()
        site_dims = tuple((site, names) for site, names in dims if site in values)
        usable = _usable_dims(site_dims, shapes, {*values, *stats})
        dims = {}
        for name, value in values.items():
            names = list(usable.get(name, ()))
            axes = [names[i] if i < len(names) and names[i] else f"{name}_dim_{i}"
                    for i in range(value.ndim - 2)]
            dims[f"posterior/{name}"] = ("chain", "draw", *axes)
        for name, value in stats.items():
            dims[f"sample_stats/{name}"] = ("chain", "draw") + tuple(
                f"{name}_dim_{i}" for i in range(value.ndim - 2))
        return dims

    def finish(self, num_warmup: int, num_draws: int) -> None:
        """After the chunks: save what is not saved, release the checkpoint, and say what an
        interrupted run kept (an `InterruptedWarning`)."""
        if not self._end():
            return
        if self.warmup_done < num_warmup:
            kept = (f"in warmup, after {self.warmup_done} of {num_warmup} steps per chain: no "
                    f"draws yet")
        else:
            kept = (f"after {self.draws_done} of {num_draws} draws per chain; they are in "
                    f"`mcmc.get_samples()`")
        if self.store is not None:
            how = (f"The checkpoint {str(self.store.path)!r} holds what it did: run the same "
                   f"call again to continue where it stopped (the draws will be those of an "
                   f"uninterrupted run).")
        else:
            how = ("Without a checkpoint the run cannot continue where it stopped: pass "
                   "`checkpoint='run.zarr'` to `run` to make runs resumable; to draw more now, "
                   "set `mcmc.post_warmup_state = mcmc.last_state` and run again.")
        warnings.warn(f"{self.api} was interrupted (Ctrl-C) {kept}. {how}", InterruptedWarning,
                      stacklevel=4)
