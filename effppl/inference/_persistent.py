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
import os
import tempfile
import threading
import warnings
from pathlib import Path

from jax.experimental.compilation_cache import compilation_cache as _jax_cache
# `jax.config` sets these options process-wide only; their context managers, which scope the
# folder to one entry point's compilations, are not exported.
from jax._src import config as _jax_config

from ..effects import internal

__all__ = ["CacheDirWarning", "cache_dir", "persistent_cache", "with_persistent_cache"]

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
