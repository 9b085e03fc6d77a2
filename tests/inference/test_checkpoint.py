"""Checkpoints of `MCMC.run` and `SVI.run`: resumed runs equal uninterrupted ones bit for bit.

The oracle is always the uninterrupted run with the same key and settings (no checkpoint).
A stop is simulated by the checkpoint folder as a save left it (a copy taken right after each
save), or as a save killed half-way left it; real kills of a process are in
`test_checkpoint_kill.py`.
"""

import json
import os
import shutil
import subprocess
import sys
import warnings

import jax
import numpy as np
import optax
import pytest
import xarray as xr

from effppl import distributions as dist
from effppl import sample
from effppl.infer import (
    MCMC,
    NUTS,
    SVI,
    Checkpoint,
    CheckpointError,
    InterruptedWarning,
    Trace_ELBO,
)
from effppl.infer import _checkpoint as checkpoint_module
from effppl.infer import _checkpoint_store as store_module
from effppl.infer.autoguide import AutoNormal
from effppl.infer.mcmc import _checkpoint as mcmc_checkpoint
from effppl.infer.mcmc import _chunks as chunks_module
from effppl.infer.mcmc import _warmup as warmup_module

from . import _checkpoint_worker as worker

WARMUP, SAMPLES, CHAINS = 30, 30, 2


def _mcmc(**kw):
    settings = dict(num_warmup=WARMUP, num_samples=SAMPLES, num_chains=CHAINS, thinning=2,
                    progress_bar=False)
    settings.update(kw)
    return MCMC(NUTS(worker.model), **settings)


def _run(checkpoint=None, key=3, dtype="float64", **kw):
    mcmc = _mcmc(**kw)
    mcmc.run(jax.random.key(key), worker.data(dtype), checkpoint=checkpoint)
    return mcmc


def _assert_same_run(a, b):
    for get in ("get_samples", "get_extra_fields"):
        x, y = getattr(a, get)(group_by_chain=True), getattr(b, get)(group_by_chain=True)
        assert set(x) == set(y)
        for k in x:
            np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]), err_msg=k)


def _manifest(path):
    return json.loads((path / "zarr.json").read_text())["attributes"]["effppl_checkpoint"]


@pytest.fixture
def snapshots(monkeypatch, tmp_path):
    """Copies of the checkpoint folder as each save left it: `[(progress, path), ...]`."""
    taken = []
    save = store_module.Store.save

    def save_and_copy(self, progress, *args):
        save(self, progress, *args)
        copy = tmp_path / f"snapshot-{len(taken)}"
        shutil.copytree(self.path, copy)
        taken.append((dict(progress), copy))

    monkeypatch.setattr(store_module.Store, "save", save_and_copy)
    return taken


@pytest.fixture(scope="module")
def reference():
    return _run()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished checkpoint (saved after every chunk) and its run."""
    path = tmp_path_factory.mktemp("finished") / "run.zarr"
    return path, _run(Checkpoint(path, every=0))


def test_checkpointed_run_equals_uninterrupted_run_and_opens_in_arviz(reference, finished):
    import arviz as az

    path, mcmc = finished
    _assert_same_run(mcmc, reference)
    assert _manifest(path)["manifest"]["progress"] == {"warmup": WARMUP, "draws": SAMPLES // 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no consolidated metadata
        idata = az.InferenceData.from_datatree(xr.open_datatree(path, engine="zarr",
                                                                consolidated=False))
    samples = reference.get_samples(group_by_chain=True)
    assert set(idata.posterior.data_vars) == set(samples)
    for k, v in samples.items():
        np.testing.assert_array_equal(idata.posterior[k].values, np.asarray(v))
    stats = reference.get_extra_fields(group_by_chain=True)
    for k, v in stats.items():
        np.testing.assert_array_equal(idata.sample_stats[k].values, np.asarray(v))


_OPEN_WITHOUT_EFFPPL = """
import sys, warnings
import arviz as az, numpy as np, xarray as xr
warnings.simplefilter("ignore", RuntimeWarning)  # no consolidated metadata
idata = az.InferenceData.from_datatree(xr.open_datatree(sys.argv[1], engine="zarr",
                                                        consolidated=False))
assert not [m for m in sys.modules if m.split(".")[0] == "effppl"], "effppl was imported"
np.savez(sys.argv[2], **{f"posterior_{k}": v.values for k, v in idata.posterior.items()},
         **{f"sample_stats_{k}": v.values for k, v in idata.sample_stats.items()})
"""


def test_checkpoint_opens_in_arviz_in_a_process_without_effppl(finished, reference, tmp_path):
    path, out = finished[0], tmp_path / "draws.npz"
    subprocess.run([sys.executable, "-c", _OPEN_WITHOUT_EFFPPL, str(path), str(out)],
                   check=True, cwd=tmp_path, env={k: v for k, v in os.environ.items()
                                                 if k != "PYTHONPATH"})
    opened = np.load(out)
    expected = {f"posterior_{k}": v for k, v in reference.get_samples(True).items()} | {
        f"sample_stats_{k}": v for k, v in reference.get_extra_fields(True).items()}
    assert set(opened.files) == set(expected)
    for k, v in expected.items():
        np.testing.assert_array_equal(opened[k], np.asarray(v), err_msg=k)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_resume_after_a_stop_in_warmup_or_sampling_gives_the_same_draws(snapshots, tmp_path,
                                                                         dtype, request):
    with jax.enable_x64(dtype == "float64"):
        reference = request.getfixturevalue("reference") if dtype == "float64" else \
            _run(dtype=dtype)
        _run(Checkpoint(tmp_path / "run.zarr", every=0), dtype=dtype)
        assert len(snapshots) == WARMUP + SAMPLES // 2  # one chunk is one step or one draw
        stops = [snapshots[0], snapshots[WARMUP // 2], snapshots[WARMUP - 1],
                 snapshots[WARMUP + 3]]
        assert [p for p, _ in stops] == [{"warmup": 1, "draws": 0}, {"warmup": 16, "draws": 0},
                                         {"warmup": WARMUP, "draws": 0},
                                         {"warmup": WARMUP, "draws": 4}]
        for _, path in stops:
            resumed = _run(Checkpoint(path, every=0), dtype=dtype)
            _assert_same_run(resumed, reference)
            assert resumed.get_samples()["mu"].dtype == np.dtype(dtype)


def test_resume_after_a_save_killed_half_way(snapshots, tmp_path, reference):
    """The arrays (their last chunk rewritten) and the state slot of version n + 1 written, the
    manifest still version n."""
    _run(Checkpoint(tmp_path / "run.zarr", every=0))
    (_, before), (_, after) = snapshots[WARMUP + 2], snapshots[WARMUP + 3]
    shutil.copy(before / "zarr.json", after / "zarr.json")
    assert _manifest(after)["manifest"]["progress"]["draws"] == 3
    _assert_same_run(_run(Checkpoint(after)), reference)


def test_finished_checkpoint_gives_its_draws_again(finished, reference):
    path, _ = finished
    _assert_same_run(_run(Checkpoint(path)), reference)


def test_long_interval_saves_at_the_end_only(snapshots, tmp_path, reference):
    _assert_same_run(_run(Checkpoint(tmp_path / "run.zarr", every=3600)), reference)
    assert [p for p, _ in snapshots] == [{"warmup": WARMUP, "draws": SAMPLES // 2}]


def test_timed_chunks_grow_to_the_target_time_and_cover_the_steps(monkeypatch):
    """A fake clock: each transition takes 1 ms, so a chunk of 0.5 s is 500 transitions; from
    the first chunk's 10 the sizes grow at most 4x a chunk, stay within `cap`, and cover the
    steps once, in order. `seconds=0` (a checkpoint's `every=0`) keeps the first size."""
    now = [0.0]
    monkeypatch.setattr(chunks_module.time, "perf_counter", lambda: now[0])

    def run(chunks, start, end, cap=None):
        spans = []
        for at, num in chunks.spans(start, end, cap):
            spans.append((at, num))
            now[0] += 1e-3 * num
        return spans

    timed = chunks_module.Chunks(10, seconds=0.5)
    spans = run(timed, 0, 3000)
    assert [n for _, n in spans] == [10, 40, 160, 500, 500, 500, 500, 500, 290]
    assert [a for a, _ in spans] == list(np.cumsum([0] + [n for _, n in spans])[:-1])
    assert [n for _, n in run(timed, 3000, 4000, cap=300)] == [300, 300, 300, 100]
    assert run(chunks_module.Chunks(10), 5, 40) == [(5, 10), (15, 10), (25, 10), (35, 5)]
    assert run(chunks_module.Chunks(10, seconds=0.5), 7, 7) == []


def test_resume_after_a_warmup_that_restarted_a_chain_gives_the_same_draws(
        snapshots, tmp_path, reference, monkeypatch):
    """A restarted chain samples with new keys: a run stopped in sampling after such a warmup
    resumes with them (they were its original keys before), and one stopped in the warmup
    restarts the chain again from the same point. The warmup's check flags chain 1 once per
    run; the oracle is the uninterrupted run with that restart."""
    calls = []
    real = warmup_module.degenerate_chains

    def flag_chain_1_once(chain, num_warmup):
        calls.append(num_warmup)
        return {1} if len(calls) == 1 else real(chain, num_warmup)

    monkeypatch.setattr(warmup_module, "degenerate_chains", flag_chain_1_once)
    restarted = _run()
    mu, mu_unrestarted = (np.asarray(m.get_samples(group_by_chain=True)["mu"])
                          for m in (restarted, reference))
    np.testing.assert_array_equal(mu[0], mu_unrestarted[0])  # chain 0 repeats its warmup
    assert not np.any(mu[1] == mu_unrestarted[1])
    calls.clear()
    _run(Checkpoint(tmp_path / "run.zarr", every=0))
    in_warmup, in_sampling = snapshots[WARMUP // 2], snapshots[WARMUP + 2]
    assert in_warmup[0] == {"warmup": WARMUP // 2 + 1, "draws": 0}
    assert in_sampling[0] == {"warmup": WARMUP, "draws": 3, "restarts": [[[1], 1]]}
    for _, path in (in_warmup, in_sampling):
        calls.clear()
        _assert_same_run(_run(Checkpoint(path, every=0)), restarted)


@pytest.mark.parametrize("change, differs", [
    (dict(num_samples=SAMPLES + 2), "num_samples"),
    (dict(key=4), "rng_key"),
    (dict(thinning=1), "thinning"),
    (dict(dtype="float32"), "data shapes"),
])
def test_checkpoint_of_another_run_is_refused_naming_what_differs(finished, change, differs):
    path, _ = finished
    key, dtype = change.pop("key", 3), change.pop("dtype", "float64")
    with pytest.raises(CheckpointError, match=f"another run.*{differs}: checkpoint"):
        _run(Checkpoint(path), key=key, dtype=dtype, **change)


def test_checkpoint_of_other_data_values_or_model_is_refused(finished):
    path, _ = finished
    mcmc = _mcmc()
    with pytest.raises(CheckpointError, match="data values: checkpoint"):
        mcmc.run(jax.random.key(3), worker.data("float64") + 1.0, checkpoint=path)

    def other(y):
        mu = sample("mu", dist.Normal(0.0, 3.0))
        sigma = sample("sigma", dist.HalfNormal(2.0))
        sample("y", dist.StudentT(4.0, mu, sigma), obs=y)

    mcmc = MCMC(NUTS(other), num_warmup=WARMUP, num_samples=SAMPLES, num_chains=CHAINS,
                thinning=2, progress_bar=False)
    with pytest.raises(CheckpointError, match="model program: checkpoint"):
        mcmc.run(jax.random.key(3), worker.data("float64"), checkpoint=path)


def _damage(path, how):
    if how == "truncated block":
        block = path / "posterior" / "mu" / "c" / "0" / "0"
        block.write_bytes(block.read_bytes()[:5])
    elif how == "bit-flipped block":
        block = path / "posterior" / "sigma" / "c" / "0" / "0"
        data = bytearray(block.read_bytes())
        data[len(data) // 2] ^= 0x10
        block.write_bytes(bytes(data))
    elif how == "deleted block":
        (path / "sample_stats" / "lp" / "c" / "0" / "0").unlink()
    elif how == "bit-flipped state":
        block = path / "effppl_state" / "c" / "1" / "0"
        data = bytearray(block.read_bytes())
        data[-3] ^= 0x01
        block.write_bytes(bytes(data))
    elif how == "bit-flipped manifest":
        text = (path / "zarr.json").read_text()
        (path / "zarr.json").write_text(text.replace('"draws": 15', '"draws": 14'))
    elif how == "truncated manifest":
        text = (path / "zarr.json").read_text()
        (path / "zarr.json").write_text(text[:len(text) // 2])


@pytest.mark.parametrize("how", ["truncated block", "bit-flipped block", "deleted block",
                                 "bit-flipped state", "bit-flipped manifest",
                                 "truncated manifest"])
def test_damaged_checkpoint_is_refused(finished, tmp_path, how):
    path = tmp_path / "run.zarr"
    shutil.copytree(finished[0], path)
    _damage(path, how)
    with pytest.raises(CheckpointError, match="is damaged"):
        _run(Checkpoint(path))


def test_checkpoint_of_another_layout_version_is_refused(finished, tmp_path):
    path = tmp_path / "run.zarr"
    shutil.copytree(finished[0], path)
    root = json.loads((path / "zarr.json").read_text())
    manifest = root["attributes"]["effppl_checkpoint"]["manifest"]
    manifest.pop("hash")
    manifest["format"] = checkpoint_module.FORMAT + 1
    manifest["hash"] = checkpoint_module.hash_bytes(json.dumps(manifest, sort_keys=True).encode())
    (path / "zarr.json").write_text(json.dumps(root))
    with pytest.raises(CheckpointError, match=f"checkpoint format {checkpoint_module.FORMAT + 1}"):
        _run(Checkpoint(path))


def test_path_holding_something_else_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not empty and is no effppl checkpoint"):
        _run(Checkpoint(tmp_path))
    with pytest.raises(CheckpointError, match="is a file"):
        _run(Checkpoint(tmp_path / "notes.txt"))
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_second_writer_is_refused(tmp_path):
    store, _ = store_module.Store.open(Checkpoint(tmp_path / "run.zarr"), "MCMC", {}, "test",
                                       axis=1, total=1)
    try:
        with pytest.raises(CheckpointError, match="another process is writing"):
            _run(Checkpoint(tmp_path / "run.zarr"))
    finally:
        store.close()


def test_bad_checkpoint_arguments_are_refused():
    with pytest.raises(CheckpointError, match="expected a path"):
        _mcmc().run(jax.random.key(0), worker.data("float64"), checkpoint=3)
    with pytest.raises(CheckpointError, match="finite number >= 0"):
        Checkpoint("run.zarr", every=-1)


def _interrupt_after(monkeypatch, chunks, second=False):
    """Ctrl-C pressed while the `chunks`-th sampling chunk runs (`second`: pressed twice)."""
    wait, seen = mcmc_checkpoint.RunRecord.wait, []

    def wait_and_interrupt(self, outputs):
        outputs = wait(self, outputs)
        if self.warmup_done == WARMUP:  # a sampling chunk
            seen.append(1)
            if len(seen) == chunks:
                if second:
                    raise KeyboardInterrupt
                self.stopper.requested = True
        return outputs

    monkeypatch.setattr(mcmc_checkpoint.RunRecord, "wait", wait_and_interrupt)


@pytest.mark.parametrize("second", [False, True])
def test_ctrl_c_keeps_the_draws_and_the_rerun_continues(monkeypatch, tmp_path, reference, second):
    path = tmp_path / "run.zarr"
    _interrupt_after(monkeypatch, chunks=5, second=second)
    kept = 4 if second else 5  # a second Ctrl-C drops the chunk in flight
    with pytest.warns(InterruptedWarning, match=f"after {kept} of 15 draws per chain"):
        mcmc = _run(Checkpoint(path, every=0))  # chunks of one step (timed ones would grow)
    expected = reference.get_samples(group_by_chain=True)["mu"][:, :kept]
    np.testing.assert_array_equal(mcmc.get_samples(group_by_chain=True)["mu"], expected)
    assert _manifest(path)["manifest"]["progress"] == {"warmup": WARMUP, "draws": kept}
    monkeypatch.undo()
    _assert_same_run(_run(Checkpoint(path)), reference)


def test_ctrl_c_without_checkpoint_keeps_the_draws(monkeypatch, reference):
    _interrupt_after(monkeypatch, chunks=1)  # the progress bar's chunks: 3 steps each
    with pytest.warns(InterruptedWarning, match="after 3 of 15 draws.*Without a checkpoint"):
        mcmc = _run(progress_bar=True)
    expected = reference.get_samples(group_by_chain=True)["mu"][:, :3]
    np.testing.assert_array_equal(mcmc.get_samples(group_by_chain=True)["mu"], expected)


# -- SVI -------------------------------------------------------------------------------------

_GUIDE, _ADAM = AutoNormal(worker.model), {0.05: optax.adam(0.05), 0.01: optax.adam(0.01)}


def _svi(lr=0.05):  # one guide and optimiser object: their compiled steps are re-used
    return SVI(worker.model, _GUIDE, _ADAM[lr], Trace_ELBO())


def _fit(checkpoint=None, lr=0.05, num_steps=40):
    return _svi(lr).run(jax.random.key(3), num_steps, worker.data("float64"),
                        progress_bar=False, checkpoint=checkpoint)


def test_svi_resume_gives_the_same_params(snapshots, tmp_path):
    reference = _fit()
    first = _fit(Checkpoint(tmp_path / "fit.zarr", every=0))
    assert [p for p, _ in snapshots[:2]] == [{"steps": 1, "skipped": 0},
                                             {"steps": 2, "skipped": 0}]
    assert len(snapshots) == 40
    for result in [first] + [_fit(Checkpoint(snapshots[i][1])) for i in (0, 29)]:
        for k, v in reference.params.items():
            np.testing.assert_array_equal(np.asarray(result.params[k]), np.asarray(v))
        np.testing.assert_array_equal(result.losses, reference.losses)


def test_svi_checkpoint_of_another_optimizer_is_refused(tmp_path):
    _fit(Checkpoint(tmp_path / "fit.zarr"), num_steps=10)
    with pytest.raises(CheckpointError, match="optimizer"):
        _fit(Checkpoint(tmp_path / "fit.zarr"), lr=0.01, num_steps=10)
    with pytest.raises(CheckpointError, match="one of SVI, not of MCMC"):
        _run(Checkpoint(tmp_path / "fit.zarr"))
