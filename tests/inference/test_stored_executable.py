"""Executables effppl stores itself (`_persistent.stored`): found without tracing, under a key that
must change whenever the program would (the model's jaxprs, the values they close over)."""

import contextlib
import hashlib
import hmac
import os
import pathlib
import pickle
import zlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest

from effppl import factor, plate, sample
from effppl.infer import MCMC, NUTS
from effppl.infer._compile import _fns, _persistent

pytestmark = pytest.mark.skipif(os.environ.get("EFFPPL_INFERENCE_TEST_PPL") == "numpyro",
                                reason="effppl's own compiled functions")


@contextlib.contextmanager
def _events(program=None):
    """Counts of effppl's cache loads (of `program`'s executables only, when given) and of XLA
    compilations (JAX's event) in the block."""
    count = {"loads": 0, "compiled": 0}

    def on_event(event, **kw):
        if event == _persistent.HIT_EVENT and program in (None, kw.get("program")):
            count["loads"] += 1

    def on_duration(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            count["compiled"] += 1

    jax.monitoring.register_event_listener(on_event)
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    try:
        yield count
    finally:
        jax.monitoring.unregister_event_listener(on_event)
        jax.monitoring.unregister_event_duration_listener(on_duration)


def _stored_files(path):
    return sorted(p.name for p in path.iterdir() if p.name.startswith("effppl_test-"))


def _fn(x, a):
    return {"y": jnp.sin(x) * a}


def test_a_key_hits_a_new_key_misses_and_a_bad_file_is_a_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFPPL_CACHE_DIR", str(tmp_path))
    x, expected = jnp.arange(3.0), _fn(jnp.arange(3.0), 2.0)["y"]

    def run(key):
        # a new wrapper: no executable in memory, as in a new process
        return _persistent.stored(jax.jit(_fn), lambda *args: key, "test")(x, 2.0)["y"]

    with _events() as first:
        np.testing.assert_allclose(run("k1"), expected)
    # (JAX may find the compiled program in its own in-memory cache: "compiled" can be 0)
    assert first["loads"] == 0 and len(_stored_files(tmp_path)) == 1
    with _events() as again:
        np.testing.assert_allclose(run("k1"), expected)
    assert again == {"loads": 1, "compiled": 0}
    with _events() as other:
        np.testing.assert_allclose(run("k2"), expected)
    assert other["loads"] == 0 and len(_stored_files(tmp_path)) == 2
    for name in _stored_files(tmp_path):  # damaged files: misses, compiled and written anew
        (tmp_path / name).write_bytes(b"not an executable")
    with _events() as damaged:
        np.testing.assert_allclose(run("k1"), expected)
    assert damaged["loads"] == 0
    with _events() as repaired:
        np.testing.assert_allclose(run("k1"), expected)
    assert repaired["loads"] == 1
    # New argument types: another entry, whatever the key.
    stored = _persistent.stored(jax.jit(_fn), lambda *args: "k1", "test")
    np.testing.assert_allclose(stored(jnp.arange(4.0), 2.0)["y"], _fn(jnp.arange(4.0), 2.0)["y"])
    assert len(_stored_files(tmp_path)) == 3
    # `None`: not stored.
    np.testing.assert_allclose(
        _persistent.stored(jax.jit(_fn), lambda *args: None, "test")(x, 3.0)["y"], 1.5 * expected)
    assert len(_stored_files(tmp_path)) == 3


def test_cache_off_stores_nothing_and_computes_no_key(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFPPL_CACHE_DIR", "off")

    def no_key(*args):
        raise AssertionError("no key is needed with the cache off")

    out = _persistent.stored(jax.jit(_fn), no_key, "test")(jnp.arange(3.0), 2.0)
    np.testing.assert_allclose(out["y"], _fn(jnp.arange(3.0), 2.0)["y"])


class _Payload:
    """Unpickling it writes a file: what a malicious stored file could do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.write_text, (pathlib.Path(self.marker), "ran"))


def test_a_file_not_signed_with_the_users_key_is_never_unpickled(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFPPL_CACHE_DIR", str(tmp_path / "xla"))
    x, expected = jnp.arange(3.0), _fn(jnp.arange(3.0), 2.0)["y"]

    def run(key="k1"):
        with _events() as count:
            out = _persistent.stored(jax.jit(_fn), lambda *args: key, "test")(x, 2.0)["y"]
        np.testing.assert_allclose(out, expected)
        return count["loads"]

    assert run() == 0
    (file,) = (tmp_path / "xla").iterdir()
    good = file.read_bytes()
    assert run() == 1
    # One bit flipped anywhere: refused (a miss), compiled and stored again.
    for where in (len(_persistent._MAGIC) + 3, len(good) // 2, len(good) - 1):
        bad = bytearray(good)
        bad[where] ^= 1
        file.write_bytes(bytes(bad))
        assert run() == 0
        assert file.read_bytes() == good  # rewritten (the same program serializes the same)
    # A payload that runs code when unpickled, with the format's header and another key's
    # signature: never unpickled.
    marker = tmp_path / "marker"
    payload = zlib.compress(pickle.dumps(_Payload(str(marker))))
    mac = hmac.new(b"someone else's key!", payload, hashlib.sha256).digest()
    file.write_bytes(_persistent._MAGIC + mac + payload)
    assert run() == 0 and not marker.exists()
    # A signed file of another program, copied to this program's name: refused.
    assert run("k2") == 0
    other = next(p for p in (tmp_path / "xla").iterdir() if p != file)
    file.write_bytes(other.read_bytes())
    assert run() == 0
    assert run() == 1


def test_a_program_calling_python_is_not_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFPPL_CACHE_DIR", str(tmp_path / "xla"))

    def with_callback(x):
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x) * 2.0

    out = _persistent.stored(jax.jit(with_callback), None, "test")(jnp.arange(3.0))
    np.testing.assert_allclose(out, 2.0 * np.sin(np.arange(3.0)))
    assert not (tmp_path / "xla").exists() or not any((tmp_path / "xla").iterdir())


class _HMCLike(NamedTuple):
    position: object
    logdensity: object


class _BarkerLike(NamedTuple):
    position: object
    logdensity: object


def test_programs_of_one_text_with_other_result_types_are_stored_apart(tmp_path, monkeypatch):
    """Keyed by their lowered text alone, two programs returning the same arrays in different
    pytree types (blackjax's `HMCState` and `BarkerState`) shared one stored executable: the
    second got the first's result type (a `BarkerMH` chain started as an `HMCState`)."""
    monkeypatch.setenv("EFFPPL_CACHE_DIR", str(tmp_path / "xla"))
    x = jnp.arange(3.0)
    first = _persistent.stored(jax.jit(lambda x: _HMCLike(x, x.sum())), None, "test")(x)
    second = _persistent.stored(jax.jit(lambda x: _BarkerLike(x, x.sum())), None, "test")(x)
    assert type(first) is _HMCLike and type(second) is _BarkerLike
    assert len(_stored_files(tmp_path / "xla")) == 2


def test_the_signing_key_is_made_once_readable_by_the_user_only(tmp_path, monkeypatch):
    key_file = tmp_path / "config" / "cache-key"
    monkeypatch.setenv("EFFPPL_CACHE_KEY_FILE", str(key_file))
    monkeypatch.setenv("EFFPPL_CACHE_DIR", str(tmp_path / "xla"))
    _persistent._signing_key_at.cache_clear()
    assert _persistent.cache_dir() == str(tmp_path / "xla")
    assert key_file.stat().st_mode & 0o077 == 0 and len(key_file.read_bytes()) == 32
    # A key file others may read turns the cache off, with a warning naming it.
    other = tmp_path / "shared-key"
    other.write_bytes(b"k" * 32)
    other.chmod(0o644)
    monkeypatch.setenv("EFFPPL_CACHE_KEY_FILE", str(other))
    with pytest.warns(_persistent.CacheDirWarning, match="shared-key"):
        assert _persistent.cache_dir() is None
    _persistent._signing_key_at.cache_clear()


def _normal_model(prior_scale):
    def model(y):
        mu = sample("mu", dist.Normal(1.0, prior_scale))
        with plate("n", y.shape[0]):
            sample("y", dist.Normal(mu, 1.5), obs=y)
    return model


def _posterior_mean(y, prior_scale):
    precision = 1 / prior_scale**2 + len(y) / 1.5**2
    return (1.0 / prior_scale**2 + np.sum(y) / 1.5**2) / precision


def _run(model, y):
    mcmc = MCMC(NUTS(model), num_warmup=100, num_samples=400, progress_bar=False)
    with _events("chunk") as count:
        mcmc.run(jax.random.key(0), y)
    return float(np.mean(mcmc.get_samples()["mu"])), count["loads"]


def test_the_sampler_is_loaded_only_for_the_same_model_program(tmp_path, monkeypatch):
    """The sampler's chunk is loaded for another function object with the same program and new
    data, and never for a model that differs only in a constant."""
    monkeypatch.setenv("EFFPPL_CACHE_DIR", str(tmp_path))
    y = np.random.default_rng(0).normal(2.5, 1.5, 20).astype(np.float32)
    mean, loads = _run(_normal_model(2.0), y)
    assert loads == 0 and abs(mean - _posterior_mean(y, 2.0)) < 0.2
    mean, loads = _run(_normal_model(2.0), y + 3.0)  # a new function object, new data
    assert loads == 1 and abs(mean - _posterior_mean(y + 3.0, 2.0)) < 0.2
    mean, loads = _run(_normal_model(0.1), y)  # the prior's scale differs: another program
    assert loads == 0 and abs(mean - _posterior_mean(y, 0.1)) < 0.05


def _fingerprint(model, y):
    fns, dynamic = _fns.prepare("test", model, (y,), {})
    return fns.fingerprint({"mu": jax.ShapeDtypeStruct((), jnp.float32)}, dynamic)


def test_fingerprint_follows_closed_over_values_and_gradient_rules():
    y = np.zeros(5, np.float32)
    weights = np.ones(5, np.float32)

    def global_model(y):
        mu = sample("mu", dist.Normal(0.0, 1.0))
        sample("y", dist.Normal(mu * weights, 1.0).to_event(1), obs=y)

    before = _fingerprint(global_model, y)
    assert _fingerprint(global_model, y + 1.0) == before  # data are arguments, not the program
    weights[0] = 2.0  # a global array the model closes over changed
    assert _fingerprint(global_model, y) != before

    # The same through a `jax.jit` function: its constants stay inside the jit equation's
    # jaxpr, whose text gives their type only (found by a tester: a stale program was loaded).
    # (A new model and function each time, as in a new process, which traces them afresh.)
    def jit_model(value):
        shifts = np.full(5, value, np.float32)

        @jax.jit
        def shift(mu):
            return mu + shifts

        def model(y):
            mu = sample("mu", dist.Normal(0.0, 1.0))
            sample("y", dist.Normal(shift(mu), 1.0).to_event(1), obs=y)
        return model

    assert _fingerprint(jit_model(0.0), y) == _fingerprint(jit_model(0.0), y)
    assert _fingerprint(jit_model(0.0), y) != _fingerprint(jit_model(5.0), y)

    # User code behind JAX's own rules: `custom_gradient`'s backward function, `custom_root`'s
    # tangent solve (found by a tester: a rule defined in JAX's files had been taken as JAX's).
    def gradient_model(c):
        @jax.custom_gradient
        def f(x):
            return x, lambda g: (g * c,)

        def model(y):
            mu = sample("mu", dist.Normal(0.0, 1.0))
            with plate("n", y.shape[0]):
                sample("y", dist.Normal(f(mu), 1.0), obs=y)
        return model

    def root_model(c):
        def model(y):
            mu = sample("mu", dist.Normal(0.0, 1.0))
            root = jax.lax.custom_root(lambda x: x - mu, 0.0, lambda g, x0: x0 - g(x0),
                                       lambda g, b: b / g(1.0) * c)
            with plate("n", y.shape[0]):
                sample("y", dist.Normal(root, 1.0), obs=y)
        return model

    for variant in (gradient_model, root_model):
        assert _fingerprint(variant(1.0), y) == _fingerprint(variant(1.0), y) is not None
        assert _fingerprint(variant(1.0), y) != _fingerprint(variant(3.0), y)

    def callback_model(y):  # a Python function in the program: nothing shows it, not stored
        mu = sample("mu", dist.Normal(0.0, 1.0))
        mu = jax.pure_callback(np.asarray, jax.ShapeDtypeStruct((), jnp.float32), mu)
        sample("y", dist.Normal(jnp.broadcast_to(mu, y.shape), 1.0).to_event(1), obs=y)

    assert _fingerprint(callback_model, y) is None

    def with_rule(slope):
        @jax.custom_jvp
        def g(x):
            return x * x

        @g.defjvp
        def g_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return g(x), slope * x * t

        def model(y):
            mu = sample("mu", dist.Normal(0.0, 1.0))
            factor("f", g(mu))
            with plate("n", y.shape[0]):
                sample("y", dist.Normal(mu, 1.0), obs=y)
        return model

    # The same value, another derivative: the jaxpr of the potential alone is the same text.
    assert _fingerprint(with_rule(2.0), y) != _fingerprint(with_rule(3.0), y)
    assert _fingerprint(with_rule(2.0), y) == _fingerprint(with_rule(2.0), y)
