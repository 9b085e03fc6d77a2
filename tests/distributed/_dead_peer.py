"""One process of a two-process JAX run whose process 1 dies after the run has started (see
test_two_processes.py)."""

import os
import sys

import effppl.distributed as ed

ed.initialize(os.environ["EFFPPL_TEST_COORDINATOR"], 2, int(os.environ["EFFPPL_TEST_PROCESS"]),
              heartbeat_timeout_seconds=3)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from tests.distributed import _common as c  # noqa: E402

mesh = ed.make_mesh(chain=1, data=4)
rows = ed.process_rows(c.N, mesh)
x, y = c.data()
xs, ys = ed.shard(x[rows], mesh), ed.shard(y[rows], mesh)
print("sharded", float(jax.jit(lambda v: v.sum())(ys)), flush=True)
if jax.process_index() == 1:
    os._exit(3)  # dies without a word, as a killed or crashed process does
c.run((xs, ys), num_chains=2, chain_method="sharded", mesh=mesh)
print("UNEXPECTED: the run finished", np.nan, flush=True)
sys.exit(0)
