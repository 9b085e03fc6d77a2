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

import contextlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ...effects import internal
from .. import _model
from .._checkpoint_store import Store
from .._compile._persistent import digest
from .._interrupt import InterruptedWarning, Stopper

__all__ = ["StepRecord"]


def _dtype(x) -> str:
    return str(x.dtype) if hasattr(x, "dtype") else str(np.result_type(x))


def _leaf_name(i: int) -> str:
    return f"svi_state_{i:04d}"


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
    leaves, treedef = jax.tree.flatten(state)
    return {
        "model": _model.model_name(svi.model), "guide": _model.model_name(svi.guide),
        "loss": _loss(svi.loss),
        "optimizer (its first step on a probe)": _optimizer_probe(svi._optimizer, state),
        "rng_key": np.asarray(key).ravel().tolist(),
        "initial state (params' initial values, optimizer state)": digest(*leaves),
        "state layout": digest(str(treedef), [(np.shape(x), _dtype(x))
                                              for x in leaves]),
        "data shapes": [[list(np.shape(x)), _dtype(x)] for x in dynamic],
        "data values": digest(*dynamic),
        "num_steps": int(num_steps), "stable_update": bool(stable),
        "forward_mode_differentiation": bool(forward_mode), "chunk length": int(length),
        "jax_enable_x64": bool(internal.config_value("jax_enable_x64")),
    }


class StepRecord:
    """The committed progress of one `SVI.run` (see the module's docstring): `state`, `done`
    (steps), `losses` (list of numpy arrays), `skipped`; `wait`, `stepped`, `catching`,
    `finish` are called by `SVI.run`."""

    def __init__(self, api, stopper, store, state, done=0, losses=None, skipped=0):
        self.api, self.stopper, self.store = api, stopper, store
        self.state, self.done, self.skipped = state, done, skipped
        self.losses = losses or []
        self._unsaved: list = []
        self._saved_at = done

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
        leaves, treedef = jax.tree.flatten(state)
        restored = [jnp.asarray(saved.state[_leaf_name(i)]) for i in range(len(leaves))]
        record.state = jax.tree.unflatten(treedef, restored)
        record.done = record._saved_at = int(saved.progress["steps"])
        record.skipped = int(saved.progress["skipped"])
        if record.done:
            record.losses = [saved.arrays["losses"]]
        return record

    def wait(self, outputs):
        """A chunk's outputs once computed (Ctrl-C stays responsive meanwhile)."""
        return self.stopper.wait(outputs)

    @contextlib.contextmanager
    def catching(self):
        """The context the chunks run in: Ctrl-C ends it, keeping the progress; another error
        (a non-finite loss) saves the progress, releases the checkpoint and propagates."""
        try:
            with self.stopper.catching():
                yield
        except BaseException:
            try:
                self._maybe_save(force=True)
            except Exception:  # noqa: BLE001 - the run's own error is the one to raise
                pass
            finally:
                self.close()
            raise

    def stepped(self, state, done: int, losses: np.ndarray, skipped: int) -> None:
        """Commit the steps up to `done`: their `losses`, `skipped` more skipped steps."""
        self.state, self.done, self.losses, self.skipped, self._unsaved = (
            state, done, self.losses + [losses], self.skipped + skipped,
            self._unsaved + [losses])
        self._maybe_save()
        self.stopper.check()

    def _maybe_save(self, force: bool = False) -> None:
        if self.store is None or self.done == self._saved_at:
            return
        if force or self.stopper.requested or self.store.due():
            appends = {"losses": np.concatenate(self._unsaved)} if self._unsaved else {}
            state = {_leaf_name(i): np.asarray(x)
                     for i, x in enumerate(jax.tree.leaves(self.state))}
            self.store.save({"steps": self.done, "skipped": self.skipped}, state, appends)
            self._unsaved, self._saved_at = [], self.done

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    def finish(self, num_steps: int) -> None:
        """After the chunks: save what is not saved, release the checkpoint, and say what an
        interrupted run kept (an `InterruptedWarning`)."""
        try:
            self._maybe_save(force=True)
        finally:
            self.close()
        if not self.stopper.interrupted:
            return
        how = (f"The checkpoint {str(self.store.path)!r} holds them: run the same call again to "
               f"continue where it stopped (the params will be those of an uninterrupted run)."
               if self.store is not None else
               "To go on, pass `init_state=result.state` to `svi.run` (or a `checkpoint=` to "
               "make runs resumable).")
        warnings.warn(f"{self.api} was interrupted (Ctrl-C) after {self.done} of {num_steps} "
                      f"steps; the returned result holds the params and losses so far. {how}",
                      InterruptedWarning, stacklevel=4)
