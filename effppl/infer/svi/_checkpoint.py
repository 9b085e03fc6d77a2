"""What an `SVI.run` has done, saved to a checkpoint after its chunks and kept on Ctrl-C.

`StepRecord` holds the committed progress of one run: the `SVIState` (the optimiser's state,
holding the unconstrained params, the mutable state and the key) after the last chunk that
finished, the number of steps done, the losses so far and the number of skipped steps. With a
checkpoint it saves as `MCMC.run`'s record does (`effppl/infer/_checkpoint.py`): the losses as
the zarr array `losses[step]`, the state's arrays in the state slots.

**Resuming bit for bit.** The steps of a run are a function of the state alone (each step
splits the state's key), the run's chunks are fixed by `num_steps` (100 with a checkpoint), and
the state is restored from its exact bytes, so a resumed run makes the very steps the
uninterrupted one made.

**Which run a checkpoint is of** (`_identity`): the model's and guide's names, the ELBO and its
settings, the optimiser (its class, and its first step on a fixed probe: an optax transformation
shows its hyperparameters only so), the initial state (the params' initial values, which come from
the key, the model and guide, and `init_params` or `init_state`), the layout of the state, the
data's shapes, dtypes and values, `num_steps`, `stable_update`,
`forward_mode_differentiation`, the chunk length and float64 on or off.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ...effects import internal
from .. import _model
from .._checkpoint import Record, layout, shapes
from .._checkpoint_store import Store
from .._compile._persistent import digest
from .._interrupt import InterruptedWarning, Stopper

__all__ = ["StepRecord"]


_STATE = "svi_state"  # the `SVIState`'s leaves in the store: `svi_state_0000`, ...


def _optimizer_probe(optimizer, state) -> str:
    """A digest of the optimiser's first step from zero params along a gradient of ones (its
    hyperparameters show there), or a note that it cannot be probed."""
    try:
        params = jax.tree.map(jnp.zeros_like, optimizer.get_params(state.optim_state))
        probe = jax.tree.map(jnp.ones_like, params)
        stepped = optimizer.update(probe, optimizer.init(params), jnp.asarray(1.0))
        return f"{type(optimizer.optim).__name__} " + digest(
            *jax.tree.leaves(optimizer.get_params(stepped)))
    except Exception:  # noqa: BLE001 - an optimiser with a step of its own (`Minimize`)
        return f"{type(optimizer.optim).__name__} (not probed)"


def _loss(loss) -> str:
    settings = {k: v for k, v in sorted(vars(loss).items())
                if isinstance(v, (bool, int, float, str, type(None)))}
    return f"{type(loss).__qualname__} {settings}"


def _identity(svi, key, state, dynamic, num_steps, length, stable, forward_mode) -> dict:
    return {
        "model": _model.model_name(svi.model), "guide": _model.model_name(svi.guide),
        "loss": _loss(svi.loss),
        "optimizer (its first step on a probe)": _optimizer_probe(svi._optimizer, state),
        "rng_key": np.asarray(key).ravel().tolist(),
        "initial state (params' initial values, optimizer state)": digest(
            *jax.tree.leaves(state)),
        "state layout": layout(state),
        "data shapes": shapes(dynamic),
        "data values": digest(*dynamic),
        "num_steps": int(num_steps), "stable_update": bool(stable),
        "forward_mode_differentiation": bool(forward_mode), "chunk length": int(length),
        "jax_enable_x64": bool(internal.config_value("jax_enable_x64")),
    }


class StepRecord(Record):
    """The committed progress of one `SVI.run` (see the module's docstring): `state`, `done`
    (steps), `losses` (list of numpy arrays), `skipped`; `wait`, `stepped`, `catching`,
    `finish` are called by `SVI.run`."""

    def __init__(self, api, stopper, store, state):
        super().__init__(api, stopper, store)
        self.state, self.done, self.skipped, self.losses = state, 0, 0, []
        self._saved_at = self._progress()

    def _progress(self):
        return self.done

    @classmethod
    def open(cls, svi, checkpoint, api, *, key, state, dynamic, num_steps, length, stable,
             forward_mode):
        """A record of the run starting at `state`, or resumed from `checkpoint`.

        **Raises:** `CheckpointError` for a checkpoint of another run, a damaged one, or a path
        that is no checkpoint."""
        stopper = Stopper(api)
        if checkpoint is None:
            return cls(api, stopper, None, state)
        identity = _identity(svi, key, state, dynamic, num_steps, length, stable, forward_mode)
        store, saved = Store.open(checkpoint, "SVI", identity, api, axis=0, total=num_steps)
        store.dims = {"losses": ("step",)}
        record = cls(api, stopper, store, state)
        if saved is None:
            return record
        record.state = jax.tree.map(jnp.asarray, record._restored(state, _STATE, saved.state))
        record.done = record._saved_at = int(saved.progress["steps"])
        record.skipped = int(saved.progress["skipped"])
        if record.done:
            record.losses = [saved.arrays["losses"]]
        return record

    def stepped(self, state, done: int, losses: np.ndarray, skipped: int) -> None:
        """Commit the steps up to `done`: their `losses`, `skipped` more skipped steps."""
        self.state, self.done, self.losses, self.skipped, self._unsaved = (
            state, done, self.losses + [losses], self.skipped + skipped,
            self._unsaved + [losses])
        self._committed()

    def _save(self) -> None:
        assert self.store is not None
        appends = {"losses": np.concatenate(self._unsaved)} if self._unsaved else {}
        self.store.save({"steps": self.done, "skipped": self.skipped},
                        self._state(self.state, _STATE), appends)

    def finish(self, num_steps: int) -> None:
        """After the chunks: save what is not saved, release the checkpoint, and say what an
        interrupted run kept (an `InterruptedWarning`)."""
        if not self._end():
            return
        how = (f"The checkpoint {str(self.store.path)!r} holds them: run the same call again to "
               f"continue where it stopped (the params will be those of an uninterrupted run)."
               if self.store is not None else
               "To go on, pass `init_state=result.state` to `svi.run` (or a `checkpoint=` to "
               "make runs resumable).")
        warnings.warn(f"{self.api} was interrupted (Ctrl-C) after {self.done} of {num_steps} "
                      f"steps; the returned result holds the params and losses so far. {how}",
                      InterruptedWarning, stacklevel=4)
