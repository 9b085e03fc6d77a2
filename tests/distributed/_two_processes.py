"""One process of a two-process JAX run (see test_two_processes.py), 2 CPU devices each:
chains split across processes, data split across processes, reads on every process, and a
key that differs between processes. Prints `RESULT {json}`."""

import io
import json
import os
import sys
from contextlib import redirect_stdout

import effppl.distributed as ed

ed.initialize(os.environ["EFFPPL_TEST_COORDINATOR"],
              int(os.environ["EFFPPL_TEST_NUM_PROCESSES"]),
              int(os.environ["EFFPPL_TEST_PROCESS"]), heartbeat_timeout_seconds=20)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from effppl.infer import Predictive, log_likelihood  # noqa: E402
from tests.distributed import _common as c  # noqa: E402

out: dict = {"process": jax.process_index(), "processes": jax.process_count(),
             "devices": jax.device_count(), "local_devices": jax.local_device_count()}
x, y = c.data()
ref = c.draws(c.run((x, y), num_chains=2))  # this process, one device: the reference

# 8 chains over the 4 devices of both processes (2 per device).
chains = c.run((x, y), num_chains=8, chain_method="sharded", mesh=ed.make_mesh(chain=4))
eight = c.draws(chains)
out["eight"] = {k: v.tolist() for k, v in eight.items()}
out["chain_vs_ref"] = c.max_diff(eight, ref, slice(0, 2))

# The rows split over the 4 devices of both processes: each process holds its half.
mesh = ed.make_mesh(chain=1, data=4)
rows = ed.process_rows(len(y), mesh)
out["rows"] = [rows.start, rows.stop]
xs, ys = ed.shard(x[rows], mesh), ed.shard(y[rows], mesh)
sharded = c.run((xs, ys), num_chains=2, chain_method="sharded", mesh=mesh)
data = c.draws(sharded)
out["data_vs_ref"] = c.max_diff(data, ref)

# Every read works on every process, and gives the whole result.
with redirect_stdout(io.StringIO()) as printed:
    sharded.print_summary()
out["summary_has_w"] = "w[0]" in printed.getvalue()
idata = sharded.to_arviz()
out["arviz_posterior_equal"] = bool(np.array_equal(idata["posterior"]["w"].values, data["w"]))
out["arviz_loglik_shape"] = list(idata["log_likelihood"]["y"].shape)
post = {k: data[k] for k in ("w", "b")}
ll = log_likelihood(c.logistic, post, xs, ys, batch_ndims=2)["y"]
ll_ref = log_likelihood(c.logistic, post, x, y, batch_ndims=2)["y"]
out["loglik_diff"] = float(np.max(np.abs(np.asarray(ll) - np.asarray(ll_ref))))
flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in post.items()}
pred = Predictive(c.logistic, flat, mesh=mesh)(jax.random.key(5), xs)["y"]
pred_ref = Predictive(c.logistic, flat)(jax.random.key(5), x)["y"]
out["predictive_equal"] = bool(np.array_equal(np.asarray(pred), np.asarray(pred_ref)))

# A key that differs between the processes is refused, by both, naming the setting.
try:
    c.run((xs, ys), num_chains=2, chain_method="sharded", mesh=mesh, key=jax.process_index())
    out["key_error"] = None
except Exception as err:  # noqa: BLE001  (the test checks the type and message)
    out["key_error"] = [type(err).__name__, str(err)]
print("RESULT" + json.dumps(out))
sys.stdout.flush()
