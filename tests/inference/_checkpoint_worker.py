"""A process that runs a small model with a checkpoint, for the kill and Ctrl-C tests.

`python -m tests.inference._checkpoint_worker PATH OUT [float32|float64]`: runs `MCMC(NUTS(model),
...)` (or, with `svi` as a fourth argument, `SVI`) with `checkpoint=Checkpoint(PATH, every=0)`,
and on return writes the draws (or params) to `OUT` (an `.npz`) and prints `DONE <draws per
chain>`. Killed, it leaves its checkpoint; run again, it resumes. With `EFFPPL_TEST_STALL=N:MARKER`
in its environment, the save that takes it past N steps stops half-way (`stall_in_save`).
"""

import json
import os
import sys

import jax
import numpy as np

SETTINGS = {"num_warmup": 150, "num_samples": 150, "num_chains": 2, "thinning": 1}
NUM_STEPS = 400


def model(y):
    from effppl import distributions as dist
    from effppl import plate, sample

    mu = sample("mu", dist.Normal(0.0, 3.0))
    sigma = sample("sigma", dist.HalfNormal(2.0))
    with plate("n", y.shape[0]):
        sample("y", dist.Normal(mu, sigma), obs=y)


def data(dtype):
    return np.random.default_rng(0).normal(1.0, 2.0, 40).astype(dtype)


def run_mcmc(path, dtype, checkpoint=True):
    from effppl.infer import MCMC, NUTS, Checkpoint

    mcmc = MCMC(NUTS(model), progress_bar=False, **SETTINGS)
    mcmc.run(jax.random.key(3), data(dtype),
             checkpoint=Checkpoint(path, every=0) if checkpoint else None)
    return mcmc


def run_svi(path, dtype, checkpoint=True):
    import optax

    from effppl.infer import SVI, Checkpoint, Trace_ELBO
    from effppl.infer.autoguide import AutoNormal

    svi = SVI(model, AutoNormal(model), optax.adam(0.05), Trace_ELBO())
    return svi.run(jax.random.key(3), NUM_STEPS, data(dtype), progress_bar=False,
                   checkpoint=Checkpoint(path, every=0) if checkpoint else None)


def stall_in_save(path, target, marker):
    """Make the save that first takes the checkpoint past `target` steps (warmup + draws) stop
    half-way, for the test to kill it there: its arrays and state slot written, the new
    manifest's temporary file half written, the manifest in force still the previous one. The
    file `marker` says it stopped there."""
    import os
    import time
    from pathlib import Path

    from effppl.infer import _checkpoint_store

    write = _checkpoint_store.write_atomic

    def stalling(file, data):
        manifest = json.loads(data)["attributes"]["effppl_checkpoint"].get("manifest")
        if manifest and sum(manifest["progress"].values()) >= target:
            Path(f"{file}.{os.getpid()}.partial").write_bytes(data[:len(data) // 2])
            Path(marker).write_text(json.dumps(manifest["progress"]))
            time.sleep(600)
        write(file, data)

    _checkpoint_store.write_atomic = stalling


def main(path, out, dtype="float64", kind="mcmc"):
    jax.config.update("jax_enable_x64", dtype == "float64")
    if "EFFPPL_TEST_STALL" in os.environ:  # "target:marker"
        target, marker = os.environ["EFFPPL_TEST_STALL"].split(":", 1)
        stall_in_save(path, int(target), marker)
    if kind == "svi":
        result = run_svi(path, dtype)
        np.savez(out, losses=result.losses, **{f"param_{k}": np.asarray(v)
                                               for k, v in result.params.items()})
        print(f"DONE {len(result.losses)}", flush=True)
        return
    mcmc = run_mcmc(path, dtype)
    if mcmc._results is None:
        print("DONE 0", flush=True)
        return
    samples = mcmc.get_samples(group_by_chain=True)
    stats = mcmc.get_extra_fields(group_by_chain=True)
    np.savez(out, **{f"site_{k}": np.asarray(v) for k, v in samples.items()},
             **{f"stat_{k}": np.asarray(v) for k, v in stats.items()})
    print(f"DONE {samples['mu'].shape[1]}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
