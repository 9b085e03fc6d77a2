"""The persistent compilation cache of effppl's compiled functions (JAX's, in a user folder).

A second Python process that runs the same model on data of the same shapes loads the compiled
XLA programs (MCMC's init, warmup/sampling chunk, `Predictive`, `log_likelihood`) from disk
instead of compiling them again. This is JAX's persistent compilation cache, switched on only
*while effppl's functions run*: JAX's global settings stay as the user left them.

**Where.** `EFFPPL_CACHE_DIR`: a folder (default `$XDG_CACHE_HOME/effppl/xla`, else
`~/.cache/effppl/xla`); `0`, `off`, `false`, `no` or empty turn it off. A folder that cannot
be created or written to turns it off too, with one `CacheDirWarning` naming it. When the user has set
JAX's own cache (`jax.config.update("jax_compilation_cache_dir", ...)`), effppl leaves that in
charge and adds nothing.

**What a hit needs.** JAX keys an entry by the XLA program, the devices, the compile options
and the JAX/jaxlib versions: the same JAX and jaxlib, the same backend and devices, arguments of
the same shapes and dtypes (new values are fine), the same model code and settings (the same
jaxpr; effppl's translation is deterministic), the same `jax_enable_x64`. Anything else is a
miss: the program is compiled and stored, as without the cache.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import sys
import tempfile
import threading
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
from jax.experimental import serialize_executable

from jax.experimental.compilation_cache import compilation_cache as _jax_cache
# `jax.config` sets these options process-wide only; their context managers, which scope the
# folder to one entry point's compilations, are not exported.
from jax._src import config as _jax_config

from ...effects import internal

__all__ = ["CacheDirWarning", "cache_dir", "persistent_cache", "with_persistent_cache", "stored",
           "digest", "HIT_EVENT"]

ENV = "EFFPPL_CACHE_DIR"
_OFF = ("0", "off", "false", "no", "")
_state = threading.local()
_lock = threading.Lock()


def cache_dir() -> str | None:
    """The folder effppl's compiled programs are stored in, or `None` when the cache is off
    (`EFFPPL_CACHE_DIR`) or JAX's own persistent cache is configured (then that one serves)."""
    if _jax_config.compilation_cache_dir.value is not None and not _inside():
        return None
    value = os.environ.get(ENV)
    if value is not None:
        if value.strip().lower() in _OFF:
            return None
        path = os.path.expanduser(value)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
        path = os.path.join(base, "effppl", "xla")
    return path if _usable(path, value is not None) else None


class CacheDirWarning(UserWarning):
    """effppl's persistent compilation cache folder cannot be used: the cache is off."""


@functools.cache
def _usable(path: str, from_env: bool) -> bool:
    """Whether `path` is (or can be made) a folder we can write to; if not, warn once (per
    folder and process) that the cache is off, instead of JAX's warnings at every compile."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
        return True
    except OSError as err:
        where = f"`{ENV}={path}`" if from_env else f"the default folder {path} (set `{ENV}`)"
        warnings.warn(f"effppl: the persistent compilation cache cannot use {where}: "
                      f"{type(err).__name__}: {err.strerror or err}. Compiled programs are not "
                      f"stored on disk in this process (the cache is off). Set `{ENV}` to a "
                      f"writable folder, or to `off`.", CacheDirWarning, stacklevel=2)
        return False


def _inside() -> bool:
    return getattr(_state, "depth", 0) > 0


@contextlib.contextmanager
def persistent_cache():
    """Within this block (this thread), XLA programs compiled by JAX are looked up in and stored
    to effppl's cache folder (`cache_dir()`), whatever their compile time. Re-entrant; a no-op
    when the cache is off or JAX's own is configured."""
    if _inside():
        _state.depth += 1
        try:
            yield
        finally:
            _state.depth -= 1
        return
    path = cache_dir()
    if path is None:
        yield
        return
    with _lock:
        _jax_cache.reset_cache()  # JAX reads the folder once, when it first compiles
    _state.depth = 1
    try:
        with _jax_config.compilation_cache_dir(path), \
                _jax_config.persistent_cache_min_compile_time_secs(0.0):
            yield
    finally:
        _state.depth = 0
        with _lock:
            _jax_cache.reset_cache()  # outside, JAX's own settings apply again


def with_persistent_cache(fn):
    """`fn` run inside `persistent_cache()` (for effppl's `jax.jit`-compiled functions), with
    Python's cyclic garbage collector paused (`internal.paused_gc`: a first call traces the
    sampler's or the guide's program, and collections walking the heap slowed that tracing)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with persistent_cache(), internal.paused_gc():
            return fn(*args, **kwargs)
    return wrapped


HIT_EVENT = "/effppl/compilation_cache/cache_hits"
"""The `jax.monitoring` event recorded when `stored` loads an executable from disk (JAX's own
cache records `/jax/compilation_cache/cache_hits`)."""

_FORMAT = "effppl-executable-1"


def digest(*parts) -> str:
    """SHA-256 of `parts` as a 64-character hex `str`: strings, numbers, tuples and lists of
    them, arrays (by dtype, shape and bytes; PRNG keys by their key data) and anything else by
    its `repr`. For `stored`'s keys. Raises nothing of its own."""
    h = hashlib.sha256()

    def add(x):
        if isinstance(x, (tuple, list)):
            h.update(b"(%d" % len(x))
            for y in x:
                add(y)
            h.update(b")")
        elif isinstance(x, (jax.Array, np.ndarray, np.generic)):
            if jax.numpy.issubdtype(x.dtype, jax.dtypes.prng_key):
                h.update(str(x.dtype).encode())
                x = jax.random.key_data(x)
            a = np.ascontiguousarray(np.asarray(x))
            h.update(f"array {a.dtype} {a.shape}".encode())
            h.update(a.tobytes())
        else:
            h.update(f"{type(x).__name__} {x!r};".encode())

    for part in parts:
        add(part)
    return h.hexdigest()


@functools.cache
def _source_digest() -> str:
    """Digest of effppl's own source files (they build the stored programs)."""
    root = Path(__file__).resolve().parents[1]
    files = sorted(root.rglob("*.py"))
    return digest(*[(str(f.relative_to(root)), f.read_bytes().hex()) for f in files])


def _setup() -> tuple:
    """What else decides an executable: versions, devices, JAX's settings, XLA's flags."""
    import blackjax
    import numpyro
    from jax.version import _version as jax_version
    from jaxlib.version import __version__ as jaxlib_version

    config = tuple(sorted((k, repr(v)) for k, v in jax.config.values.items() if "cache" not in k))
    devices = tuple((d.platform, d.device_kind, d.id) for d in jax.devices())
    return (_FORMAT, sys.version, jax_version, jaxlib_version, blackjax.__version__,
            numpyro.__version__, _source_digest(), devices, config,
            os.environ.get("XLA_FLAGS", ""))


def _types(args) -> tuple:
    leaves, treedef = jax.tree.flatten(args)
    return (str(treedef), tuple(
        (str(jax.typeof(x)), getattr(x, "weak_type", False), str(getattr(x, "sharding", None)))
        for x in leaves))


def _device(args):
    """The one device the arrays among `args` are on (`None`: no array on a device), or
    `False` when they span several (such programs are left to JAX's cache)."""
    devices = {d for x in jax.tree.leaves(args) if isinstance(x, jax.Array)
               for d in x.sharding.device_set}
    return False if len(devices) > 1 else next(iter(devices), None)


def stored(jitted, program_key: Callable[..., str | None], name: str) -> Callable:
    """`jitted` (a `jax.jit` function), compiled once per argument types and kept; while the
    persistent cache is on, its executable is stored on disk (serialized) under a key computed
    without tracing `jitted`, from which a later process loads it.

    **Arguments:** `program_key(*args)`: a string that, with the argument types and `_setup()`,
    determines the program `jitted` traces to (everything it closes over that can change), or
    `None` for "do not store" (then JAX's cache serves, as for `with_persistent_cache`). `name`:
    the files' prefix.

    Arguments on several devices are left to JAX's cache. A file that cannot be read or loaded is
    a miss (compiled and written anew); an executable that cannot be serialized is only kept in
    memory. Each load records `HIT_EVENT`.

    **Returns:** a function of the same arguments and results as `jitted` (`__wrapped__` is
    `jitted`). **Raises:** what `jitted`'s tracing, compilation or execution raises; nothing
    about the cache (an unreadable folder or file is a miss, an unwritable one keeps the
    executable in memory). **Method:** JAX's persistent compilation cache, keyed here without
    tracing; executables (de)serialized with `jax.experimental.serialize_executable`.
    """
    compiled: dict = {}

    @functools.wraps(jitted)  # `call.__wrapped__` is `jitted`, as for `with_persistent_cache`
    def call(*args):
        types = _types(args)
        exe = compiled.get(types)
        if exe is not None:
            return exe(*args)
        path, device = cache_dir(), _device(args)
        key = program_key(*args) if path is not None and device is not False else None
        if path is None or key is None:
            with persistent_cache(), internal.paused_gc():
                return jitted(*args)
        file = os.path.join(path, f"effppl_{name}-{digest(key, types, _setup())}")
        exe = _load(file, args, device)
        if exe is None:
            with internal.paused_gc(), _without_jax_cache():
                exe = jitted.lower(*args).compile()
            _store(file, exe)
        compiled[types] = exe
        return exe(*args)

    return call


@contextlib.contextmanager
def _without_jax_cache():
    """JAX's persistent cache off in this block: `stored` compiles afresh and serializes the
    result (an XLA:CPU executable that JAX loaded from its cache, serialized again, cannot run
    once loaded), and each program is stored once, by effppl."""
    with _lock:
        _jax_cache.reset_cache()  # JAX decides whether its cache is used once, after a reset
    try:
        with _jax_config.enable_compilation_cache(False):
            yield
    finally:
        with _lock:
            _jax_cache.reset_cache()


def _load(file: str, args, device):
    try:
        with open(file, "rb") as f:
            fmt, serialized, in_tree, out_tree = pickle.loads(zlib.decompress(f.read()))
        if fmt != _FORMAT or in_tree != jax.tree.structure((args, {})):
            return None
        exe = serialize_executable.deserialize_and_load(
            serialized, in_tree, out_tree, execution_devices=None if device is None else [device])
    except Exception:  # noqa: BLE001  (absent, partly written, damaged or stale: a miss)
        return None
    jax.monitoring.record_event(HIT_EVENT)
    return exe


def _store(file: str, exe) -> None:
    tmp = None
    try:
        serialized, in_tree, out_tree = serialize_executable.serialize(exe)
        data = zlib.compress(pickle.dumps((_FORMAT, serialized, in_tree, out_tree)), 1)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(file), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # as JAX's entries (mkstemp's files are the owner's only)
        os.replace(tmp, file)  # atomic: a reader sees a whole file or none
    except Exception:  # noqa: BLE001  (cannot serialize or write: kept in memory only)
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
