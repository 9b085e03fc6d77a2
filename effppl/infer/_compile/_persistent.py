"""effppl's persistent cache of compiled programs: a second process loads them from disk.

Every XLA program effppl compiles for inference (MCMC's initial points and warmup/sampling chunk,
`Predictive`, `log_likelihood`, ...) is kept as a serialized executable in a user folder, and a
later Python process that runs the same model on data of the same shapes loads it instead of
compiling it again. JAX's own persistent compilation cache is not used and none of JAX's
settings is touched: the process's JAX stays as the user set it.

**Where.** `EFFPPL_CACHE_DIR`: a folder (default `$XDG_CACHE_HOME/effppl/xla`, else
`~/.cache/effppl/xla`); `0`, `off`, `false`, `no` or empty turn it off. A folder that cannot
be created or written to turns it off too, with one `CacheDirWarning` naming it. When the user has
set JAX's own cache (`jax.config.update("jax_compilation_cache_dir", ...)`), effppl leaves that in
charge and stores nothing itself.

**Keys.** A program is stored under the digest of its key, its argument types and what else
decides it (`_setup`: the Python, JAX, jaxlib, blackjax and NumPyro versions, effppl's source,
the devices, JAX's settings, `XLA_FLAGS`, and the mesh's devices, in order, for a program
sharded over a mesh of one process's devices; programs spanning processes are not stored). The key is the text of the lowered program, or, for
the sampler's chunk, a key effppl computes without tracing it (`ModelFns.fingerprint`). Anything
else than a hit compiles and stores, as without the cache.

**Signed files.** A stored executable is loaded by unpickling (JAX's `deserialize_and_load`
unpickles too), and unpickling a file someone else wrote can run any code. So each file is
signed with HMAC-SHA256 under a key of the user's own (`EFFPPL_CACHE_KEY_FILE`, default
`$XDG_CONFIG_HOME/effppl/cache-key`, else `~/.config/effppl/cache-key`: 32 random bytes, made on
first use, readable by the user only), and the signature is checked before anything is
unpickled: a file that is not signed with it (damaged, tampered with, written by another user,
or a copy of another program's file) is a miss, never loaded. A key file that cannot be made or
read turns the cache off, with a `CacheDirWarning` naming it.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import pickle
import secrets
import stat
import sys
import tempfile
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import blackjax
import jax
import jax.core
import jaxlib.version
import numpy as np
import numpyro
from jax.experimental import serialize_executable

from ..._cache_env import ENV, requested_cache_dir
from ...effects import internal

__all__ = ["CacheDirWarning", "cache_dir", "stored", "digest", "HIT_EVENT"]

KEY_ENV = "EFFPPL_CACHE_KEY_FILE"


def cache_dir() -> str | None:
    """The folder effppl's compiled programs are stored in, or `None` when the cache is off
    (`EFFPPL_CACHE_DIR`, an unusable folder or key file) or JAX's own persistent cache is
    configured (then that one serves)."""
    if internal.config_value("jax_compilation_cache_dir") is not None:
        return None
    path, from_env = requested_cache_dir()
    if path is None:
        return None
    return path if _usable(path, from_env) and _signing_key() is not None else None


class CacheDirWarning(UserWarning):
    """effppl's persistent compilation cache folder (or its signing key) cannot be used: the
    cache is off."""


@functools.cache
def _usable(path: str, from_env: bool) -> bool:
    """Whether `path` is (or can be made) a folder we can write to; if not, warn once (per
    folder and process) that the cache is off."""
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
                      f"writable folder, or to `off`.", CacheDirWarning, stacklevel=3)
        return False


def _key_file() -> str:
    value = os.environ.get(KEY_ENV)
    if value:
        return os.path.expanduser(value)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return os.path.join(base, "effppl", "cache-key")


@functools.cache
def _signing_key_at(path: str) -> bytes | None:
    """The user's signing key in `path` (made, mode 0600, when absent), or None with one
    `CacheDirWarning` when it cannot be made or read, or others may read it."""
    try:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".key-")
            with os.fdopen(fd, "wb") as f:  # mkstemp's file: 0600, the user's only
                f.write(secrets.token_bytes(32))
            try:
                os.link(tmp, path)  # no overwrite: a process that made it first wins
            except FileExistsError:
                pass
            finally:
                os.remove(tmp)
            fd = os.open(path, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            key = f.read()
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PermissionError(f"others may read or write it (mode {oct(mode & 0o777)}); "
                                  f"`chmod 600 {path}`")
        if len(key) < 16:
            raise ValueError("it holds fewer than 16 bytes")
        return key
    except (OSError, ValueError) as err:
        warnings.warn(f"effppl: the persistent compilation cache's signing key {path} (set "
                      f"`{KEY_ENV}` to choose another file) cannot be used: {err}. Compiled "
                      f"programs are not stored on disk in this process (the cache is off).",
                      CacheDirWarning, stacklevel=4)
        return None


def _signing_key() -> bytes | None:
    return _signing_key_at(_key_file())


HIT_EVENT = "/effppl/compilation_cache/cache_hits"
"""The `jax.monitoring` event recorded when `stored` loads an executable from disk, with the
keyword `program` (the name given to `stored`: `"chunk"`, `"start"`, ...)."""

_FORMAT = "effppl-executable-2"


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
    config = tuple(sorted((k, repr(v)) for k, v in jax.config.values.items() if "cache" not in k))
    devices = tuple((d.platform, d.device_kind, d.id) for d in jax.devices())
    return (_FORMAT, sys.version, jax.__version__, jaxlib.version.__version__, blackjax.__version__,
            numpyro.__version__, _source_digest(), devices, config,
            os.environ.get("XLA_FLAGS", ""))


def _types(args) -> tuple:
    leaves, treedef = jax.tree.flatten(args)
    return (str(treedef), tuple(
        (str(jax.typeof(x)), getattr(x, "weak_type", False), str(getattr(x, "sharding", None)))
        for x in leaves))


def _devices(args):
    """The devices a program of arguments `args` runs on, in the order of its device assignment:
    `None` when no argument is on a device; `(device,)` for one device; a mesh's devices (row
    major) when the arrays on several devices all lie on one `NamedSharding` mesh of this
    process's devices; `False` otherwise (another layout, or devices of other processes: such
    programs are not stored)."""
    arrays = [x for x in jax.tree.leaves(args) if isinstance(x, jax.Array)]
    devices = {d for x in arrays for d in x.sharding.device_set}
    if len(devices) <= 1:
        return None if not devices else tuple(devices)
    meshes = {x.sharding.mesh for x in arrays if len(x.sharding.device_set) > 1
              and isinstance(x.sharding, jax.sharding.NamedSharding)}
    if len(meshes) != 1 or any(len(x.sharding.device_set) > 1
                               and not isinstance(x.sharding, jax.sharding.NamedSharding)
                               for x in arrays):
        return False
    mesh_devices = getattr(meshes.pop(), "devices", None)  # (an abstract mesh has none)
    if mesh_devices is None:
        return False
    order = tuple(mesh_devices.flat)
    if not devices <= set(order) or any(d.process_index != jax.process_index() for d in order):
        return False
    return order


def _layout(devices) -> tuple:
    """What of `devices` (`_devices`) keys a program: the mesh's devices in order (a program
    compiled for one mesh is never loaded for another)."""
    return () if devices is None else tuple((d.platform, d.id) for d in devices)


def stored(jitted, program_key: Callable[..., str | None] | None, name: str,
           static_argnums: tuple[int, ...] = ()) -> Callable:
    """`jitted` (a `jax.jit` function), compiled once per argument types and kept; while the
    persistent cache is on, its executable is stored on disk (serialized, signed) under a key, from
    which a later process loads it.

    **Arguments:** `program_key(*args)`: a string that, with the argument types and `_setup()`,
    determines the program `jitted` traces to (everything it closes over that can change), computed
    without tracing it; `None` from it means "do not store" (a program that calls back into
    Python). `program_key=None`: the key is the text of the lowered program (`jitted` is traced
    and lowered, not compiled, to look it up). `name`: the files' prefix. `static_argnums`:
    `jitted`'s static arguments (hashable), which key the program by their values.

    Called with tracers (inside another transformation), with the cache off, or with arrays on
    several devices other than one mesh of this process's devices, it is `jitted` itself. A
    program on a mesh is keyed by the mesh's devices in order (`_layout`). A file that cannot be read, or is not signed with the
    user's key (`_signing_key`), or does not hold this program, is a miss (compiled and written
    anew); an executable that cannot be serialized is only kept in memory. Each load records
    `HIT_EVENT` with `program=name`.

    **Returns:** a function of the same arguments and results as `jitted` (`__wrapped__` is
    `jitted`). **Raises:** what `jitted`'s tracing, compilation or execution raises; nothing
    about the cache (an unreadable folder or file is a miss, an unwritable one keeps the
    executable in memory). **Method:** executables (de)serialized with
    `jax.experimental.serialize_executable`, signed with HMAC-SHA256 (RFC 2104).
    """
    compiled: dict = {}

    @functools.wraps(jitted)  # `call.__wrapped__` is `jitted`
    def call(*args, **kwargs):
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs))):
            return jitted(*args, **kwargs)
        static = tuple(args[i] for i in static_argnums)
        dyn = tuple(a for i, a in enumerate(args) if i not in static_argnums)
        types = (_types((dyn, kwargs)), repr(static))
        exe = compiled.get(types)
        if exe is not None:
            return exe(*dyn, **kwargs)
        path, devices = cache_dir(), _devices((dyn, kwargs))
        if path is None or devices is False:
            return jitted(*args, **kwargs)
        lowered = None
        if program_key is None:
            with internal.paused_gc():
                lowered = jitted.lower(*args, **kwargs)
            text = lowered.as_text()
            if "callback" in text:  # a Python function in the program: another process lacks it
                return jitted(*args, **kwargs)
            # the text, and the results' structure: programs of one text may return different
            # pytree types (blackjax's `HMCState` and `BarkerState` hold the same arrays)
            key = text + repr(lowered.out_tree)
        else:
            key = program_key(*args, **kwargs)
            if key is None:
                return jitted(*args, **kwargs)
        identity = digest(key, types, _setup(), _layout(devices))
        file = os.path.join(path, f"effppl_{name}-{identity}")
        exe = _load(file, identity, (dyn, kwargs), devices, name)
        if exe is None:
            with internal.paused_gc():
                if lowered is None:
                    lowered = jitted.lower(*args, **kwargs)
                exe = lowered.compile()
            _store(file, identity, exe)
        compiled[types] = exe
        return exe(*dyn, **kwargs)

    return call


_MAGIC = b"effppl-signed-1\n"


def _load(file: str, identity: str, args, devices, name: str):
    """The executable stored in `file` for the program `identity`, or None: absent, unreadable,
    not signed with the user's key (checked before anything is unpickled), or of another
    program."""
    key = _signing_key()
    try:
        with open(file, "rb") as f:
            data = f.read()
        if key is None or not data.startswith(_MAGIC):
            return None
        mac, payload = data[len(_MAGIC):len(_MAGIC) + 32], data[len(_MAGIC) + 32:]
        if not hmac.compare_digest(mac, hmac.new(key, payload, hashlib.sha256).digest()):
            return None  # not ours: never unpickled
        fmt, stored_identity, serialized, in_tree, out_tree = pickle.loads(zlib.decompress(payload))
        if fmt != _FORMAT or stored_identity != identity or in_tree != jax.tree.structure(args):
            return None  # a signed file of another program, copied to this one's name
        internal.initialize_cpu_linalg()  # else its LAPACK calls segfault (never lowered here)
        exe = serialize_executable.deserialize_and_load(
            serialized, in_tree, out_tree,
            execution_devices=None if devices is None else list(devices))
    except Exception:  # noqa: BLE001  (absent, partly written, damaged or stale: a miss)
        return None
    jax.monitoring.record_event(HIT_EVENT, program=name)
    return exe


def _store(file: str, identity: str, exe) -> None:
    key = _signing_key()
    tmp = None
    try:
        serialized, in_tree, out_tree = serialize_executable.serialize(exe)
        payload = zlib.compress(pickle.dumps((_FORMAT, identity, serialized, in_tree, out_tree)),
                                1)
        mac = hmac.new(key, payload, hashlib.sha256).digest()
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(file), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + mac + payload)
        os.chmod(tmp, 0o644)  # readable, as JAX's entries; only the key's owner can sign
        os.replace(tmp, file)  # atomic: a reader sees a whole file or none
    except Exception:  # noqa: BLE001  (cannot serialize or write: kept in memory only)
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
