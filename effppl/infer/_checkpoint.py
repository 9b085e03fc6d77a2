"""Checkpoints of long runs: the `checkpoint=` setting of `MCMC.run` and `SVI.run`.

A checkpoint is a folder, a zarr v3 store (`run.zarr`) holding the draws (or losses) so far, the
run's full state and a manifest with checksums. This module holds the user's setting
(`Checkpoint`), its error, what defines the layout: the format number, the checksums, the
version stamps and the atomic file write, and `Record`, what MCMC's and SVI's records of a run's
committed progress share. `_checkpoint_store.py` writes and reads the store (atomically: see
there); `mcmc/_checkpoint.py` and `svi/_checkpoint.py` say what a run saves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import EffpplError

__all__ = ["Checkpoint", "CheckpointError", "as_checkpoint", "FORMAT", "hash_bytes", "array_hash",
           "effppl_version", "versions", "write_atomic", "root_metadata", "differences", "shapes",
           "layout", "Record"]

FORMAT = 1
"""The checkpoint layout's version: bump it when the manifest, the state or the arrays change."""

ROOT = "zarr.json"  # the root group's metadata, holding the manifest
ATTR = "effppl_checkpoint"  # the root group's attribute: the manifest


class CheckpointError(EffpplError, ValueError):
    """A checkpoint of another run, a damaged one, or a path that holds something else."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Where a long run saves itself, and how often.

    **Arguments:**

    - `path`: the checkpoint's folder (by convention `*.zarr`); created if absent.
    - `every`: seconds of wall time between saves (default 10). A save happens at the end of
      the first compiled chunk past that time, at the end of the run, and when the run is
      interrupted (Ctrl-C). The interval also stretches to 40 times the last save's duration,
      so that saving costs at most about 2.5% of a run however many sites it stores. `0` saves
      after every chunk, whatever that costs.

    **Raises:** `CheckpointError` (a `ValueError`) for a negative or non-finite `every`.

    `Checkpoint(path).progress()` says how far the run saved there got.

    **References:** the Zarr v3 specification (zarr-specs, "Zarr core specification, version
    3"); Stan's CmdStan guide, "Stan CSV file format" (draws written as they are made); PyMC's
    `ZarrTrace` (traces stored in zarr while sampling).

    Example:
        >>> from effppl.infer import Checkpoint
        >>> Checkpoint("run.zarr", every=60.0)
        Checkpoint(path='run.zarr', every=60.0)
        >>> Checkpoint("no-such-folder.zarr").progress() is None
        True
    """

    path: str | os.PathLike
    every: float = 10.0

    def __post_init__(self):
        if not isinstance(self.path, (str, os.PathLike)):
            raise CheckpointError(f"`effppl.infer.Checkpoint(path=...)` expected a str or path, "
                                  f"but got {type(self.path).__name__}.")
        every = self.every
        if isinstance(every, bool) or not isinstance(every, (int, float, np.integer,
                                                             np.floating)) \
                or not np.isfinite(every) or every < 0:
            raise CheckpointError(f"`effppl.infer.Checkpoint(..., every=...)` expected seconds "
                                  f"between saves, a finite number >= 0, but got {every!r}.")

    def progress(self) -> dict | None:
        """How far the run saved at `path` got: for MCMC `{"warmup": steps, "draws": draws per
        chain}`, for SVI `{"steps": steps, "skipped": steps skipped}`; None when nothing is
        saved there yet. It reads the manifest only (`run` checks the whole checkpoint), and
        may be called while another process writes it."""
        try:
            root = json.loads((Path(self.path) / ROOT).read_text())
            return dict(root["attributes"][ATTR]["manifest"]["progress"])
        except (OSError, ValueError, KeyError, TypeError):
            return None


def as_checkpoint(value: Any, api: str) -> Checkpoint | None:
    """`value` (None, a path or a `Checkpoint`) as a `Checkpoint` or None; raises
    `CheckpointError` naming `api` for anything else."""
    if value is None or isinstance(value, Checkpoint):
        return value
    if isinstance(value, (str, os.PathLike)):
        return Checkpoint(value)
    raise CheckpointError(f"`{api}(..., checkpoint=...)` expected a path (str or os.PathLike) or "
                          f"an `effppl.infer.Checkpoint`, but got {type(value).__name__}.")


# -- what the layout's checksums and version stamps are (used by `_checkpoint_store.py`) ----------

def hash_bytes(data: bytes) -> str:
    """The checkpoint's checksum of `data` (BLAKE2b, 20 bytes, hex)."""
    return hashlib.blake2b(data, digest_size=20).hexdigest()


def array_hash(x: np.ndarray) -> str:
    """The checksum of an array's dtype, shape and bytes (C order)."""
    x = np.asarray(x, order="C")
    return hash_bytes(f"{x.dtype.str} {x.shape};".encode() + x.tobytes())


def effppl_version() -> str:
    try:
        return importlib.metadata.version("effppl")
    except importlib.metadata.PackageNotFoundError:  # a checkout on the path, not installed
        return "unknown"


def versions() -> dict:
    """The versions stamped on each save (for the message refusing another layout)."""
    import jax

    return {"effppl": effppl_version(), "jax": jax.__version__}


# -- files ---------------------------------------------------------------------------------------

def write_atomic(path: Path, data: bytes) -> None:
    """`data` into `path` by a rename: `path` is either its old contents or `data`."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.partial")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _sync_dir(path.parent)


def _sync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def root_metadata(manifest: dict) -> bytes:
    """The root group's `zarr.json` holding `manifest` as its attribute `ATTR`."""
    return json.dumps({"zarr_format": 3, "node_type": "group",
                       "attributes": {ATTR: manifest}}, sort_keys=True).encode()


def _dtype(x) -> str:
    return str(x.dtype) if hasattr(x, "dtype") else str(np.result_type(x))


def shapes(tree) -> list:
    """`[[shape], dtype]` of each leaf of `tree` (a run's identity: its data's shapes)."""
    import jax

    return [[list(np.shape(x)), _dtype(x)] for x in jax.tree.leaves(tree)]


def layout(tree) -> str:
    """A digest of `tree`'s structure and its leaves' shapes and dtypes (a run's identity)."""
    import jax

    from ._compile._persistent import digest

    leaves, treedef = jax.tree.flatten(tree)
    return digest(str(treedef), [(tuple(np.shape(x)), _dtype(x)) for x in leaves])


def differences(saved: dict, wanted: dict) -> list[str]:
    """`"name: checkpoint <saved>, this run <wanted>"` for each entry that differs."""
    def show(v):
        text = json.dumps(v, sort_keys=True)
        return text if len(text) <= 120 else text[:117] + "..."

    return [f"{name}: checkpoint {show(saved.get(name))}, this run {show(wanted.get(name))}"
            for name in sorted(set(saved) | set(wanted)) if saved.get(name) != wanted.get(name)]


# -- a run's record ------------------------------------------------------------------------------

class Record:
    """The committed progress of one chunked run, saved to `store` (a `Store`, or None without a
    checkpoint) and kept on Ctrl-C (`stopper`, a `Stopper`). Subclasses (`RunRecord`,
    `StepRecord`) say what progress is (`_progress`) and how it saves (`_save`)."""

    def __init__(self, api, stopper, store):
        self.api, self.stopper, self.store = api, stopper, store
        self._unsaved: list = []  # what the chunks since the last save added to the arrays
        self._saved_at = None  # `_progress()` at the last save (or at the start)

    def _progress(self):
        raise NotImplementedError

    def _save(self) -> None:
        raise NotImplementedError

    @staticmethod
    def _state(tree, prefix: str) -> dict:
        """The leaves of `tree` as numpy arrays, by their slot names in the store."""
        import jax

        return {f"{prefix}_{i:04d}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(tree))}

    @staticmethod
    def _restored(tree, prefix: str, state: dict):
        """`tree` with its leaves read from a saved `state` (`_state`'s names)."""
        import jax

        leaves, treedef = jax.tree.flatten(tree)
        return jax.tree.unflatten(treedef, [state[f"{prefix}_{i:04d}"]
                                            for i in range(len(leaves))])

    def wait(self, outputs):
        """A chunk's outputs once computed (Ctrl-C stays responsive meanwhile)."""
        return self.stopper.wait(outputs)

    @contextlib.contextmanager
    def catching(self):
        """The context the chunks run in: Ctrl-C ends it, with the run's progress kept; another
        error saves that progress, releases the checkpoint and propagates."""
        try:
            with self.stopper.catching():
                yield
        except BaseException:
            try:
                self._maybe_save(force=True)  # keep what the run did before the error
            except Exception:  # noqa: BLE001 - the run's own error is the one to raise
                pass
            finally:
                self.close()
            raise

    def _committed(self) -> None:
        """After a chunk's progress is committed: save if due, stop if Ctrl-C was pressed."""
        self._maybe_save()
        self.stopper.check()

    def _maybe_save(self, force: bool = False) -> None:
        if self.store is None or self._progress() == self._saved_at:
            return
        if force or self.stopper.requested or self.store.due():
            with self.stopper.shielded():  # (cut here, the next save would append twice)
                self._save()
                self._unsaved, self._saved_at = [], self._progress()

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    def _end(self) -> bool:
        """After the chunks: save what is not saved and release the checkpoint; whether the
        run was interrupted."""
        try:
            self._maybe_save(force=True)
        finally:
            self.close()
        return self.stopper.interrupted
