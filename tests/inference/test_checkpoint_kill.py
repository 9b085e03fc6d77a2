"""Real stops: a process running MCMC (or SVI) with a checkpoint is killed with SIGKILL at seeded
random moments, in warmup and in sampling, rerun each time, and its final draws must equal those
of an uninterrupted run bit for bit; SIGINT (Ctrl-C) must return with the draws kept and a
message, no traceback.

The oracle is the uninterrupted run (no checkpoint) in this process, on the same model, data,
settings and key (`_checkpoint_worker.py`). Each process start costs a few seconds (JAX's import;
the compiled programs come from effppl's persistent cache, on in these processes), so the fast
test kills twice (once in warmup, once in sampling) and the slow ones a dozen times (MCMC) and
twice (SVI; the in-process tests of `test_checkpoint.py` resume SVI fast); one more kills a
float32 run twice in the middle of a save.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from effppl.infer import Checkpoint

from . import _checkpoint_worker as worker

ROOT = Path(__file__).resolve().parents[2]
TOTAL = worker.SETTINGS["num_warmup"] + worker.SETTINGS["num_samples"]
CHUNK = TOTAL // 100  # steps per chunk: a run with a checkpoint goes in 100 chunks


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               EFFPPL_CACHE_DIR=str(tmp_path_factory.mktemp("compile-cache")))
    env.pop("JAX_ENABLE_CHECKS", None)  # the worker's speed, not the translator's checks
    return env


@pytest.fixture(scope="module")
def reference():
    mcmc = worker.run_mcmc(None, "float64", checkpoint=False)
    return ({f"site_{k}": np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
            | {f"stat_{k}": np.asarray(v)
               for k, v in mcmc.get_extra_fields(group_by_chain=True).items()})


def _start(path, out, env, kind="mcmc", dtype="float64"):
    return subprocess.Popen([sys.executable, "-m", "tests.inference._checkpoint_worker", str(path),
                             str(out), dtype, kind], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _progress(path, kind="mcmc") -> int:
    """Steps the checkpoint holds (warmup steps + draws, or SVI steps); -1 before the first."""
    progress = Checkpoint(path).progress()
    if progress is None:
        return -1
    return progress["steps"] if kind == "svi" else progress["warmup"] + progress["draws"]


def _kill_at(proc, path, target, delay, kind="mcmc") -> int | None:
    """SIGKILL `proc` `delay` seconds after its checkpoint holds `target` steps; the progress
    then, or None if it ended first."""
    while _progress(path, kind) < target:
        if proc.poll() is not None:
            return None
        time.sleep(0.002)
    time.sleep(delay)
    progress = _progress(path, kind)
    proc.kill()
    proc.communicate()
    return progress


def _finish(proc):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return out, err


def _kill_and_resume(tmp_path, env, targets, seed, kind="mcmc"):
    """Kill a run at each of `targets` (steps done), plus a random delay of up to a chunk or a
    save, resuming each time; returns the kills' progress and the final run's `.npz`."""
    rng = np.random.default_rng(seed)
    path, out = tmp_path / "run.zarr", tmp_path / "out.npz"
    killed = []
    for target in targets:
        proc = _start(path, out, env, kind)
        at = _kill_at(proc, path, target, rng.uniform(0, 0.03), kind)
        if at is not None:
            killed.append(at)
    _finish(_start(path, out, env, kind))
    return killed, np.load(out)


def _targets(rng, n_warmup, n_sampling):
    warmup = rng.integers(1, worker.SETTINGS["num_warmup"], n_warmup)
    sampling = rng.integers(worker.SETTINGS["num_warmup"], TOTAL - 5, n_sampling)
    return sorted(int(t) for t in np.concatenate([warmup, sampling]))


def _assert_killed_in_both_phases(killed, n):
    assert len(killed) >= n, killed
    assert any(k < worker.SETTINGS["num_warmup"] for k in killed), killed
    assert any(k >= worker.SETTINGS["num_warmup"] for k in killed), killed


def _assert_equal(result, reference):
    assert set(result.files) == set(reference)
    for k, v in reference.items():
        np.testing.assert_array_equal(result[k], v, err_msg=k)


@pytest.mark.parametrize("per_phase, min_kills, seed", [
    pytest.param(1, 2, 0, id="twice"),
    pytest.param(6, 10, 1, marks=pytest.mark.slow, id="a-dozen-times"),
])
def test_killed_run_resumes_to_the_uninterrupted_draws(tmp_path, env, reference, per_phase,
                                                       min_kills, seed):
    """Killed at `per_phase` random moments in warmup and as many in sampling; at least
    `min_kills` of the kills land before a run ends."""
    targets = _targets(np.random.default_rng(seed), per_phase, per_phase)
    killed, result = _kill_and_resume(tmp_path, env, targets, seed=seed)
    _assert_killed_in_both_phases(killed, min_kills)
    _assert_equal(result, reference)


@pytest.mark.slow
def test_killed_svi_run_resumes_to_the_uninterrupted_params(tmp_path, env):
    reference = worker.run_svi(None, "float64", checkpoint=False)
    killed, result = _kill_and_resume(tmp_path, env, [120, 300], seed=2, kind="svi")
    assert len(killed) == 2, killed
    np.testing.assert_array_equal(result["losses"], reference.losses)
    for k, v in reference.params.items():
        np.testing.assert_array_equal(result[f"param_{k}"], np.asarray(v), err_msg=k)


@pytest.mark.slow
def test_run_killed_during_its_saves_resumes_to_the_uninterrupted_draws_float32(tmp_path, env):
    """SIGKILL in the middle of a save (arrays and state slot of the new version written, the new
    manifest half written), once in warmup and once in sampling, in float32."""
    with jax.enable_x64(False):
        mcmc = worker.run_mcmc(None, "float32", checkpoint=False)
        reference = {f"site_{k}": np.asarray(v)
                     for k, v in mcmc.get_samples(group_by_chain=True).items()}
    path, out = tmp_path / "run.zarr", tmp_path / "out.npz"
    before = -1
    for target in (20, worker.SETTINGS["num_warmup"] + 40):
        marker = tmp_path / f"stalled-{target}"
        proc = _start(path, out, dict(env, EFFPPL_TEST_STALL=f"{target}:{marker}"),
                      dtype="float32")
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.01)
        proc.kill()
        proc.communicate()
        stalled = sum(json.loads(marker.read_text()).values())
        assert target <= stalled < target + CHUNK, stalled
        kept = _progress(path)  # the manifest in force: the save before the killed one
        assert before < kept == stalled - CHUNK, (before, kept, stalled)
        assert (path / f"zarr.json.{proc.pid}.partial").exists()  # killed writing the manifest
        before = kept
    _finish(_start(path, out, env, dtype="float32"))
    result = np.load(out)
    for k, v in reference.items():
        assert result[k].dtype == np.float32
        np.testing.assert_array_equal(result[k], v, err_msg=k)


@pytest.mark.slow
def test_ctrl_c_returns_with_the_draws_kept_and_says_how_to_continue(tmp_path, env, reference):
    path, out = tmp_path / "run.zarr", tmp_path / "out.npz"
    proc = _start(path, out, env)
    target = worker.SETTINGS["num_warmup"] + 30
    while _progress(path) < target:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = _finish(proc)
    kept = int(stdout.split("DONE ")[1])
    assert 30 <= kept < worker.SETTINGS["num_samples"], (stdout, stderr)
    assert "Traceback" not in stderr
    assert f"interrupted (Ctrl-C) after {kept} of 150 draws per chain" in stderr
    assert "run the same call again to continue" in stderr
    partial = np.load(out)
    for k, v in reference.items():
        np.testing.assert_array_equal(partial[k], v[:, :kept], err_msg=k)
    _finish(_start(path, out, env))
    _assert_equal(np.load(out), reference)
