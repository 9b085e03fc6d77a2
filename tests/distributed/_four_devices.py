"""Run with 4 forced CPU devices (see test_sharded.py): chains and data on a mesh, against the
one-device run. Prints `RESULT {json}`."""

import json
import os
import sys

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import effppl.distributed as ed  # noqa: E402
from effppl.infer import (  # noqa: E402
    MCMC,
    NUTS,
    SVI,
    MCMCError,
    Predictive,
    Trace_ELBO,
    log_likelihood,
)
from effppl.infer.autoguide import AutoNormal  # noqa: E402
from tests.distributed import _common as c  # noqa: E402

DUMP = os.environ["EFFPPL_TEST_DUMP"]
out: dict = {"devices": jax.device_count()}
x, y = c.data()

# One device, two chains: the reference. Every sharded layout below runs two chains per device.
ref = c.draws(c.run((x, y), num_chains=2))

# Chains on 4 devices (8 chains, 2 per device), compiled once, no collective in the sampler.
before = c.dumped(DUMP)
mesh4 = ed.make_mesh(chain=4)
chains = c.run((x, y), num_chains=8, chain_method="sharded", mesh=mesh4)
chunk = c.new_modules(DUMP, before, "chunk")
out["chain_chunks"] = list(chunk.values())
out["chain_start_compiles"] = len(c.new_modules(DUMP, before, "start"))
eight = c.draws(chains)
out["chain_sharding"] = str(chains.get_samples(group_by_chain=True)["w"].sharding.spec)
out["chain_vs_ref"] = c.max_diff(eight, ref, slice(0, 2))
# 2 devices x 2 chains: chains 0..3 of the 8-chain run (keys split(key)[c] whatever the count)
half = c.draws(c.run((x, y), num_chains=4, chain_method="sharded",
                     mesh=ed.make_mesh(chain=2, devices=jax.devices()[:2])))
out["half_vs_eight"] = c.max_diff(half, eight, slice(0, 4))
out["spread"] = float(np.std(ref["w"]))
before = c.dumped(DUMP)
chains.run(jax.random.key(1), x, y)  # a second run: nothing compiles
out["second_run_modules"] = sorted(f.split(".")[1] for f in c.dumped(DUMP) if f not in before)

# Data split over 4 devices (rows sharded), 2 chains on one chain slot.
mesh_d = ed.make_mesh(chain=1, data=4)
xs, ys = ed.shard(x, mesh_d), ed.shard(y, mesh_d)
before = c.dumped(DUMP)
sharded_data = c.run((xs, ys), num_chains=2, chain_method="sharded", mesh=mesh_d)
out["data_chunks"] = list(c.new_modules(DUMP, before, "chunk").values())
out["data_vs_ref"] = c.max_diff(c.draws(sharded_data), ref)
ll_ref = log_likelihood(c.logistic, {k: ref[k] for k in ("w", "b")}, x, y, batch_ndims=2)["y"]
before = c.dumped(DUMP)
ll = log_likelihood(c.logistic, {k: ref[k] for k in ("w", "b")}, xs, ys, batch_ndims=2,
                    mesh=mesh_d)["y"]
out["loglik_modules"] = c.modules_since(DUMP, before)
out["loglik_diff"] = float(np.max(np.abs(np.asarray(ll) - np.asarray(ll_ref))))
idata = sharded_data.to_arviz()
out["arviz_loglik_shape"] = list(idata["log_likelihood"]["y"].shape)
post = {k: ref[k].reshape((-1,) + ref[k].shape[2:]) for k in ("w", "b")}
pred_ref = Predictive(c.logistic, post)(jax.random.key(2), x)["y"]
before = c.dumped(DUMP)
pred = Predictive(c.logistic, post, mesh=mesh4)(jax.random.key(2), x)["y"]
out["predictive_modules"] = c.modules_since(DUMP, before)
out["predictive_diff"] = float(np.max(np.abs(np.asarray(pred) - np.asarray(pred_ref))))

# SVI on sharded data equals SVI on the whole data on one device.
losses = []
for args, mesh in (((x, y), None), ((xs, ys), mesh_d)):
    svi = SVI(c.logistic, AutoNormal(c.logistic), __import__("optax").adam(0.05), Trace_ELBO(),
              mesh=mesh)
    before = c.dumped(DUMP)
    losses.append(svi.run(jax.random.key(3), 30, *args, progress_bar=False).losses)
    if mesh is not None:
        out["svi_modules"] = c.modules_since(DUMP, before)
out["svi_diff"] = float(np.max(np.abs(losses[0] - losses[1])))

# Refused: latent per-row sites and subsampling on sharded data; chains that do not divide.
errors = {}
for name, call in {
    "local_latent": lambda: MCMC(NUTS(c.local_latent), num_warmup=2, num_samples=2,
                                 chain_method="sharded", mesh=mesh_d,
                                 progress_bar=False).run(jax.random.key(0), xs, ys),
    "subsample": lambda: SVI(c.subsampled, AutoNormal(c.subsampled),
                             __import__("optax").adam(0.05), Trace_ELBO()).run(
        jax.random.key(0), 2, xs, ys, progress_bar=False),
    "indivisible": lambda: MCMC(NUTS(c.logistic), num_warmup=2, num_samples=2, num_chains=3,
                                chain_method="sharded", mesh=mesh4).run(jax.random.key(0), x, y),
    "mesh_vectorized": lambda: MCMC(NUTS(c.logistic), num_warmup=2, num_samples=2, mesh=mesh4),
}.items():
    try:
        call()
        errors[name] = None
    except Exception as err:  # noqa: BLE001  (the test checks the type and message)
        errors[name] = [type(err).__name__, [b.__name__ for b in type(err).__mro__], str(err)]
out["errors"] = errors

# The persistent cache keys a program on a mesh by the mesh's devices in order.
from effppl.infer._compile import _persistent  # noqa: E402

meshes = [ed.make_mesh(chain=1, data=4),
          jax.sharding.Mesh(np.asarray(jax.devices()[::-1]).reshape(1, 4), ("chain", "data")),
          ed.make_mesh(chain=1, data=2, devices=jax.devices()[:2])]
out["layouts"] = [list(map(list, _persistent._layout(_persistent._devices(
    ed.shard(np.arange(8.0), m))))) for m in meshes]
assert MCMCError  # (imported for the reader: the mesh/vectorized error is one)
print("RESULT" + json.dumps(out))
sys.stdout.flush()
