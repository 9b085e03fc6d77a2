"""The checkpoint store: a zarr store that a process killed at any instant leaves whole.

A checkpoint is a folder (`run.zarr`), a zarr v3 group that xarray and arviz open without effppl
(`arviz.InferenceData.from_datatree(xarray.open_datatree("run.zarr", engine="zarr",
consolidated=False))`):

- child arrays that grow along one axis as the run goes (MCMC's `posterior/<site>` and
  `sample_stats/<statistic>`, `[chain, draw, ...]`; SVI's `losses`), in zarr chunks of about
  1 MiB, so a save writes one or two chunk files per array;
- the run's state, the root array `effppl_state`, `uint8[2, bytes]`: the bytes of its arrays in
  two slots, each save writing the one not in force;
- the root group's metadata `zarr.json`, whose attribute `effppl_checkpoint` is the *manifest*:
  the version in force, what the run has done, its identity, the state slot, and checksums
  (BLAKE2b) of the entries each save added to each array (a *segment*), of the state and of the
  manifest itself.

**Atomicity.** Saving version `n + 1` grows the arrays and writes the new entries (past version
`n`'s counts, where no reader of version `n` looks) and the state slot that version `n` does not
use, and only then replaces the root `zarr.json` (written to a temporary file, `fsync`ed, and
moved in place by one `os.replace`). A process killed at any instant leaves manifest `n` or
`n + 1`, each pointing at whole data. The one file of version `n` a save rewrites is an array's
last, partly filled chunk, with version `n`'s entries unchanged in it; zarr's `LocalStore` writes
each file by a rename (since zarr 3.1.3, the lowest version effppl takes), so that file too is
the old or the new one, and both hold version `n`'s entries. Reading checks every segment and the
state against the manifest, so a truncated, torn or bit-flipped checkpoint is refused, never
read as draws.

**Sharp edges.**
- One process writes a checkpoint at a time (an advisory lock on the folder says so).
- Against a power cut, the manifest is `fsync`ed but the arrays are not: an entry lost there makes
  the checkpoint refused as damaged, not read wrong.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import shutil
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ._checkpoint import (
    ATTR,
    FORMAT,
    ROOT,
    Checkpoint,
    CheckpointError,
    array_hash,
    differences,
    effppl_version,
    hash_bytes,
    root_metadata,
    versions,
    write_atomic,
)

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock
    fcntl = None

__all__ = ["Saved", "Store"]

_COST = 40  # a save waits at least this many times the last save's duration
_STATE = "effppl_state"  # the run's state as bytes, `uint8[2 slots, bytes]`


class Saved(NamedTuple):
    """A checkpoint's version in force: `progress` (JSON-able dict), `state` (dict name ->
    array), `arrays` (dict name -> the array's entries so far)."""

    progress: dict
    state: dict
    arrays: dict


@functools.cache
def _writers() -> concurrent.futures.ThreadPoolExecutor:
    """Threads that write the arrays of one save side by side (their I/O overlaps)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=4,
                                                 thread_name_prefix="effppl-checkpoint")


def _slice(values: np.ndarray, axis: int, start: int, end: int) -> np.ndarray:
    return values[(slice(None),) * axis + (slice(start, end),)]


_CHUNK_BYTES = 2**20  # the arrays' zarr chunks hold about this many bytes


class Store:
    """A checkpoint folder opened for one run (see the module's docstring).

    - `Store.open(checkpoint, kind, identity, api, axis, total)` -> `(store, saved)`: `saved`
      is the version in force (`Saved`), or None for a new checkpoint; `total`: the arrays'
      final length along `axis` (for their chunks' size).
    - `store.dims`: dict array name -> its axes' names (set before the first save).
    - `store.save(progress, state, appends)`: a new version; `appends` maps array names to
      their new entries (along `axis`).
    - `store.close()`: releases the lock.
    """

    def __init__(self, checkpoint: Checkpoint, kind: str, identity: dict, api: str, axis: int,
                 total: int):
        self.checkpoint, self.kind, self.identity, self.api = checkpoint, kind, identity, api
        self.path = Path(checkpoint.path)
        self.axis, self.total = axis, max(int(total), 1)
        self.dims: dict = {}
        self.sequence = 0
        self.arrays: dict = {}  # name -> {"count", "dtype", "shape", "hashes"}
        self.last_save = time.monotonic()
        self.seconds_saving = 0.0  # wall time spent saving (for benchmarks)
        self._last_duration = 0.0
        self._lock: int | None = None
        self._group = None
        self._opened: dict = {}  # name -> zarr array (None: not in the store)

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(cls, checkpoint: Checkpoint, kind: str, identity: dict, api: str, *, axis: int,
             total: int) -> tuple[Store, Saved | None]:
        store = cls(checkpoint, kind, identity, api, axis, total)
        try:
            saved = store._open()
        except BaseException:
            store.close()
            raise
        return store, saved

    def _where(self) -> str:
        return f"`{self.api}(..., checkpoint={str(self.path)!r})`"

    def _open(self) -> Saved | None:
        path = self.path
        if path.exists() and not path.is_dir():
            raise CheckpointError(f"{self._where()}: the path exists and is a file, not a "
                                  f"checkpoint folder. Give another path.")
        path.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        root = self._root_attributes()
        if root is not None and "manifest" in root:
            return self._load(root["manifest"])
        entries = sorted(p.name for p in path.iterdir())
        if entries and root is None:
            raise CheckpointError(
                f"{self._where()}: the folder is not empty and is no effppl checkpoint (it has "
                f"{entries[:5]}). Give a new or empty folder.")
        for name in entries:  # a run killed before its first save left these: start anew
            target = path / name
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        write_atomic(path / ROOT, root_metadata({"format": FORMAT}))
        return None

    def _take_lock(self) -> None:
        if fcntl is None:  # pragma: no cover
            return
        self._lock = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise CheckpointError(f"{self._where()}: another process is writing this checkpoint "
                                  f"now. Wait for it to end, or give another path.") from None

    def _root_attributes(self) -> dict | None:
        """The root group's `effppl_checkpoint` attribute; None when there is no such group
        (raises `CheckpointError`, damaged, for a root metadata that is not JSON)."""
        try:
            text = (self.path / ROOT).read_bytes()
        except OSError:
            return None
        try:
            meta = json.loads(text)
            attrs = meta["attributes"][ATTR]
            if not isinstance(attrs, dict):
                raise TypeError(type(attrs).__name__)
            return attrs
        except (ValueError, KeyError, TypeError) as err:
            if ATTR.encode() in text:
                raise self._damaged(f"its manifest (the root {ROOT}) cannot be read: "
                                    f"{type(err).__name__}") from None
            return None

    def _zarr_group(self):
        import zarr

        if self._group is None:
            self._group = zarr.open_group(str(self.path), mode="r+", zarr_format=3)
        return self._group

    def _damaged(self, what: str) -> CheckpointError:
        return CheckpointError(
            f"{self._where()}: the checkpoint is damaged ({what}); it is not resumed, so that no "
            f"wrong draw comes from it. Move it away or delete it to start the run anew.")

    def _load(self, manifest) -> Saved:
        try:
            manifest = dict(manifest)
            claimed = manifest.pop("hash")
        except (TypeError, ValueError, KeyError):
            raise self._damaged("its manifest has no checksum") from None
        if hash_bytes(json.dumps(manifest, sort_keys=True).encode()) != claimed:
            raise self._damaged("its manifest does not match its checksum")
        stamped = manifest.get("versions", {})
        if manifest.get("format") != FORMAT:
            raise CheckpointError(
                f"{self._where()}: the checkpoint was written by effppl "
                f"{stamped.get('effppl', '?')} in checkpoint format {manifest.get('format')}, "
                f"but this effppl ({effppl_version()}) reads format {FORMAT} (the layout of the "
                f"run's state changed). Finish the run with that effppl version, or give a new "
                f"path to start anew.")
        if manifest.get("kind") != self.kind:
            raise CheckpointError(
                f"{self._where()}: the checkpoint is one of {manifest.get('kind')}, not of "
                f"{self.kind}. Give another path.")
        diffs = differences(manifest.get("identity", {}), self.identity)
        if diffs:
            raise CheckpointError(
                f"{self._where()}: the checkpoint is of another run, so this run cannot resume "
                f"it. What differs: " + "; ".join(diffs) + ". Rerun with the same model, data, "
                "settings and key to resume it, or give a new path to start anew.")
        self.sequence, self.arrays = manifest["sequence"], manifest["arrays"]
        state = self._read_state(manifest["state"])
        arrays = {name: self._read(name, spec["segments"], axis=self.axis, count=spec["count"],
                                   spec=spec)
                  for name, spec in self.arrays.items()}
        return Saved(manifest["progress"], state, arrays)

    def _read_state(self, spec: dict) -> dict:
        data = self._read(_STATE, [[0, None, spec["hash"]]], axis=0, count=None,
                          index=(spec["slot"],))
        state = {}
        for leaf in spec["leaves"]:
            dtype = np.dtype(leaf["dtype"])
            size = int(np.prod(leaf["shape"], dtype=np.int64)) * dtype.itemsize
            raw = data[leaf["offset"]:leaf["offset"] + size]
            state[leaf["name"]] = np.frombuffer(raw.tobytes(), dtype).reshape(leaf["shape"])
        return state

    def _read(self, name: str, segments: list, *, axis: int, count: int | None,
              index: tuple = (), spec: dict | None = None) -> np.ndarray:
        """Array `name` (entries `[:count]` along `axis`, or `index`), checked against the
        checksums of its `segments`, `[start, end, hash]` (end None: the whole `index`)."""
        import zarr

        try:
            array = self._opened[name] = self._zarr_group()[name]
            if not isinstance(array, zarr.Array):
                raise TypeError(f"{name} is a group")
            if count is not None:
                index = (slice(None),) * axis + (slice(0, count),)
            values = np.asarray(array[index])
            if count is not None and array.shape[axis] > count:  # a save killed after growing it
                array.resize(array.shape[:axis] + (count,) + array.shape[axis + 1:])
        except Exception as err:  # zarr's and the codecs' errors: a damaged chunk or metadata
            raise self._damaged(f"its array {name} cannot be read: {type(err).__name__}: "
                                f"{str(err)[:200]}") from None
        if spec is not None:
            expected = tuple(spec["shape"][:axis]) + (count,) + tuple(spec["shape"][axis:])
            if values.shape != expected or values.dtype.str != spec["dtype"]:
                raise self._damaged(f"its array {name} has shape {values.shape} and dtype "
                                    f"{values.dtype}, but the manifest says {expected}, "
                                    f"{spec['dtype']}")
        ends = [end for _, end, _ in segments]
        if count is not None and (ends[-1:] != [count] or any(
                a[1] != b[0] for a, b in zip(segments, segments[1:])) or segments[0][0] != 0):
            raise self._damaged(f"the manifest's segments of its array {name} do not cover it")
        for start, end, claimed in segments:
            part = values if end is None else _slice(values, axis, start, end)
            if array_hash(part) != claimed:
                raise self._damaged(f"its array {name} does not match its checksums")
        return values

    # -- saving ------------------------------------------------------------------------------

    def due(self) -> bool:
        """Whether a save is due: `Checkpoint.every` seconds have passed since the last save,
        and (unless `every` is 0) `_COST` times the last save's duration, so that saving takes
        at most about 1 / `_COST` of the run's time however large the store."""
        every = self.checkpoint.every
        if every:
            every = max(every, _COST * self._last_duration)
        return time.monotonic() - self.last_save >= every

    def save(self, progress: dict, state: dict, appends: dict) -> None:
        """Write a new version: `appends` (name -> new entries along `axis`) to the arrays,
        `state` (name -> array) to the slot not in force, then the manifest."""
        start = time.perf_counter()
        arrays = {name: dict(spec, segments=list(spec["segments"]))
                  for name, spec in self.arrays.items()}
        writes = []
        for name, values in appends.items():
            values = np.asarray(values)
            if values.shape[self.axis]:
                write, arrays[name] = self._append(name, values, arrays.get(name))
                writes.append(write)
        for done in [_writers().submit(write) for write in writes]:  # zarr's I/O overlaps
            done.result()
        sequence = self.sequence + 1
        state_spec = self._write_state(state, sequence % 2)
        manifest = {
            "format": FORMAT, "kind": self.kind, "sequence": sequence,
            "identity": self.identity, "versions": versions(), "progress": progress,
            "state": state_spec, "arrays": arrays,
        }
        manifest["hash"] = hash_bytes(json.dumps(manifest, sort_keys=True).encode())
        write_atomic(self.path / ROOT, root_metadata({"format": FORMAT, "manifest": manifest}))
        self.sequence, self.arrays = sequence, arrays
        self.last_save = time.monotonic()
        self._last_duration = time.perf_counter() - start
        self.seconds_saving += self._last_duration

    def _write_state(self, state: dict, slot: int) -> dict:
        """`state`'s arrays, as bytes, into slot `slot` of the array `effppl_state`; their
        description for the manifest."""
        leaves, data, offset = [], [], 0
        for name, value in state.items():
            value = np.asarray(value, order="C")  # (not ascontiguousarray: it makes 0-d arrays 1-d)
            leaves.append({"name": name, "dtype": value.dtype.str, "shape": list(value.shape),
                           "offset": offset})
            data.append(value.tobytes())
            offset += value.nbytes
        data = np.frombuffer(b"".join(data), np.uint8)
        group = self._zarr_group()
        array = self._existing(_STATE)
        if array is not None and array.shape != (2, data.size):
            del group[_STATE]  # left by a run killed before its first save
            array = self._opened[_STATE] = None
        if array is None:
            array = self._opened[_STATE] = group.create_array(
                _STATE, shape=(2, data.size), dtype=np.uint8, chunks=(1, max(data.size, 1)),
                fill_value=0, dimension_names=("effppl_slot", "effppl_byte"))
        if data.size:
            array[slot] = data
        return {"slot": slot, "leaves": leaves, "hash": array_hash(data)}

    def _existing(self, name: str):
        """The zarr array `name`, or None; opened once per run (a save opens none)."""
        if name not in self._opened:
            group = self._zarr_group()
            self._opened[name] = group.get(name) if name in group else None
        return self._opened[name]

    def _append(self, name: str, values: np.ndarray, spec: dict | None):
        """`(write, spec)`: a function writing `values` after the array's entries so far (the
        array created if need be; no write yet), and the array's new description."""
        count = 0 if spec is None else spec["count"]
        axis, n = self.axis, values.shape[self.axis]
        trailing = values.shape[:axis] + values.shape[axis + 1:]
        group = self._zarr_group()
        shape = values.shape[:axis] + (count + n,) + values.shape[axis + 1:]
        array = self._existing(name)
        if array is not None and (array.dtype != values.dtype
                                  or array.shape[:axis] + array.shape[axis + 1:] != trailing):
            del group[name]  # left by a run killed before its first save of this array
            array = self._opened[name] = None
        if array is None:
            entry = max(values.nbytes // max(n, 1), 1)
            length = max(1, min(self.total, _CHUNK_BYTES // entry))
            chunks = values.shape[:axis] + (length,) + values.shape[axis + 1:]
            dims = self.dims.get(name) or tuple(
                f"{name.rsplit('/', 1)[-1]}_dim_{i}" for i in range(values.ndim))
            array = self._opened[name] = group.create_array(
                name, shape=shape, dtype=values.dtype, chunks=tuple(max(c, 1) for c in chunks),
                dimension_names=tuple(dims), fill_value=_fill(values))

        def write():
            if array.shape != shape:
                array.resize(shape)
            if values.size:
                array[(slice(None),) * axis + (slice(count, count + n),)] = values

        segments = ([] if spec is None else spec["segments"]) + [
            [count, count + n, array_hash(values)]]
        return write, {"count": count + n, "dtype": values.dtype.str, "shape": list(trailing),
                       "segments": segments}

    def close(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # releases the lock
            self._lock = None


def _fill(values: np.ndarray):
    if values.dtype == bool:
        return False
    if np.issubdtype(values.dtype, np.floating):
        return np.nan
    return 0
