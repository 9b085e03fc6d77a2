"""effppl's persistent compilation cache: a second process loads the compiled programs from disk."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpyro.distributions as dist
import pytest

from effppl.infer import MCMC, NUTS
from effppl.infer._compile import _persistent

from . import _models as m

_SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from effppl.infer import MCMC, NUTS
from tests.inference import _models as m

# "compiled": JAX's compile events; "loads": effppl's loads of stored executables, by program.
events = {"compiled": 0, "loads": {}}
def on_duration(event, duration, **kw):
    if event == "/jax/core/compile/backend_compile_duration":
        events["compiled"] += 1
def on_event(event, **kw):
    if event == "/effppl/compilation_cache/cache_hits":
        events["loads"][kw["program"]] = events["loads"].get(kw["program"], 0) + 1
jax.monitoring.register_event_duration_secs_listener(on_duration)
jax.monitoring.register_event_listener(on_event)

out = []
for n, shift in [(20, float(sys.argv[1])), (int(sys.argv[2]), 0.0)]:
    y, key = jnp.asarray(m.normal_normal_data(n=n) + shift), jax.random.key(0)
    mcmc = MCMC(NUTS(m.normal_normal), num_warmup=50, num_samples=100, progress_bar=False)
    events.update(compiled=0, loads={})
    mcmc.run(key, y)
    run_events = dict(events)
    mean, _ = m.normal_normal_posterior(np.asarray(y, np.float64))
    out.append(dict(run_events, error=float(abs(np.mean(mcmc.get_samples()["mu"]) - mean))))
print(json.dumps(out))
"""


def _run(cache, shift, second_n, hash_seed):
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "EFFPPL_CACHE_DIR": str(cache), "PYTHONPATH": str(root),
           "PYTHONHASHSEED": str(hash_seed)}
    env.pop("JAX_ENABLE_CHECKS", None)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(shift), str(second_n)], cwd=root,
                          env=env, check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(os.environ.get("EFFPPL_INFERENCE_TEST_PPL") == "numpyro",
                    reason="the cache serves effppl's own compiled functions")
def test_second_process_loads_programs_from_disk_and_a_new_shape_misses(tmp_path):
    cache = tmp_path / "xla"
    # First process: nothing on disk, every program compiled and stored.
    # The two processes hash strings differently (as two processes without a fixed
    # PYTHONHASHSEED do; these two seeds once gave different programs, numpyro's leaf order).
    first, first_again = _run(cache, 0.0, 20, hash_seed=3)
    stored = sorted(p.name.split("-")[0] for p in cache.iterdir())
    assert first["loads"] == {} and first["compiled"] >= len(stored), (first, stored)
    assert {"effppl_chunk", "effppl_start", "effppl_potential_and_grad"} <= set(stored), stored
    assert first_again["compiled"] == 0, first_again  # same shapes, same process: in memory
    # Without the stored sampler, a process compiles it afresh and stores it again.
    for chunk in cache.glob("effppl_chunk-*"):
        chunk.unlink()
    rebuilt, _ = _run(cache, 2.0, 20, hash_seed=4)
    assert "chunk" not in rebuilt["loads"] and rebuilt["error"] < 0.5, rebuilt
    assert len(list(cache.glob("effppl_chunk-*"))) == 1
    # Second process, new data of the same shapes: every program stored is loaded (the new
    # data are used); then a new shape misses and compiles.
    second, new_shape = _run(cache, 5.0, 21, hash_seed=6)
    assert sum(second["loads"].values()) == len(stored), (second, stored)
    assert second["compiled"] < first["compiled"] - len(stored) + 1, (first, second)
    assert second["error"] < 0.5 and first["error"] < 0.5, (first, second)
    assert "chunk" not in new_shape["loads"] and new_shape["compiled"] >= 3, new_shape


def test_cache_off_and_jax_settings_untouched(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFPPL_CACHE_DIR", "off")
    assert _persistent.cache_dir() is None
    monkeypatch.setenv("EFFPPL_CACHE_DIR", str(tmp_path / "c"))
    assert _persistent.cache_dir() == str(tmp_path / "c")
    monkeypatch.delenv("EFFPPL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _persistent.cache_dir() == os.path.join(str(tmp_path), "effppl", "xla")
    # A run with the cache on touches none of JAX's settings (JAX's own cache is not used).
    monkeypatch.setenv("EFFPPL_CACHE_DIR", str(tmp_path / "c"))
    before = dict(jax.config.values)
    mcmc = MCMC(NUTS(m.normal_normal), num_warmup=10, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.key(0), m.normal_normal_data(n=7))
    assert dict(jax.config.values) == before
    assert any((tmp_path / "c").iterdir())


@pytest.mark.slow
def test_distribution_leaf_order_is_the_same_in_every_process_when_the_cache_is_on():
    """numpyro gathers a distribution's fields in a set; with its persistent cache on, effppl
    sorts them, so the leaves (and the programs built from them) do not depend on the process's
    string hashing; with the cache off, NumPyro is left as it is."""
    script = ("import effppl, jax, numpyro.distributions as dist\n"
              "d = dist.StudentT(3.0, 1.0, 2.0).mask(True).to_event(0)\n"
              "print(jax.tree_util.tree_leaves(d))")
    root = Path(__file__).resolve().parents[2]

    def leaves(seed, cache):
        env = {**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(root),
               "EFFPPL_CACHE_DIR": cache}
        return subprocess.run([sys.executable, "-c", script], cwd=root, check=True, text=True,
                              capture_output=True, env=env).stdout

    assert len({leaves(seed, "/tmp/effppl-unused-cache") for seed in range(6)}) == 1
    # With the cache off, NumPyro's own order is left alone (it follows the string hashing).
    assert len({leaves(seed, "off") for seed in range(6)}) > 1
    d = dist.StudentT(3.0, 1.0, 2.0)  # flatten and unflatten agree: the parameters stay put
    back = jax.tree_util.tree_unflatten(*reversed(jax.tree_util.tree_flatten(d)))
    assert (back.df, back.loc, back.scale) == (3.0, 1.0, 2.0)


def test_unusable_cache_folder_warns_once_and_turns_the_cache_off(tmp_path, monkeypatch):
    import warnings
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    monkeypatch.setenv("EFFPPL_CACHE_DIR", str(a_file / "xla"))  # under a file: cannot exist
    _persistent._usable.cache_clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _persistent.cache_dir() is None
        assert _persistent.cache_dir() is None
        mcmc = MCMC(NUTS(m.normal_normal), num_warmup=10, num_samples=10, progress_bar=False)
        mcmc.run(jax.random.key(1), m.normal_normal_data(n=5))
    ours = [w for w in caught if issubclass(w.category, UserWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]  # once; none of JAX's cache warnings
    assert ours[0].category is _persistent.CacheDirWarning
    assert "EFFPPL_CACHE_DIR=" in str(ours[0].message) and "cache is off" in str(ours[0].message)


_LINALG_SCRIPT = """
import json, jax, numpy as np
from effppl.infer import MCMC, NUTS
from tests.inference import _models as m

loads = []
jax.monitoring.register_event_listener(
    lambda event, **kw: loads.append(kw.get("program")) if "cache_hits" in event else None)
X, y = m.regression_data()
mcmc = MCMC(NUTS(m.regression, mass_matrix="{mass_matrix}"), num_warmup=120, num_samples=100,
            progress_bar=False)
mcmc.run(jax.random.key(0), X, y)
print(json.dumps(dict(loads=loads, beta=np.asarray(mcmc.get_samples()["beta"]).mean(0).tolist())))
"""


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("EFFPPL_INFERENCE_TEST_PPL") == "numpyro",
                    reason="the cache serves effppl's own compiled functions")
@pytest.mark.parametrize("mass_matrix", ["low_rank", "dense"])
def test_a_loaded_program_with_linear_algebra_runs_in_a_fresh_process(tmp_path, mass_matrix):
    """A stored sampler whose adaptation calls LAPACK (an SVD for `low_rank`, a Cholesky
    factor for `dense`), loaded in a process that lowers no linear algebra itself: jaxlib sets
    its LAPACK kernels up only while lowering, so the loaded program once ran on null pointers
    (a segmentation fault of the second process). Oracle: the first process's draws."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "EFFPPL_CACHE_DIR": str(tmp_path / "xla"), "PYTHONPATH": str(root)}
    env.pop("JAX_ENABLE_CHECKS", None)

    def run():
        proc = subprocess.run([sys.executable, "-c", _LINALG_SCRIPT.format(mass_matrix=mass_matrix)],
                              cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["loads"] == [] and "chunk" in second["loads"], (first, second)
    assert second["beta"] == first["beta"]
