"""`chain_method="sharded"` on 4 (forced host) devices gives the draws of "vectorized"."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

from . import _ppl

ROOT = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os, warnings
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    from tests.inference import _ppl, _models as m
    _ppl.install()
    from effppl.infer import MCMC, NUTS

    y = jnp.asarray(m.normal_normal_data())
    out = {"devices": jax.local_device_count()}
    draws = {}
    for method in ("vectorized", "sharded"):
        mcmc = MCMC(NUTS(m.normal_normal), num_warmup=60, num_samples=60, num_chains=4,
                    chain_method=method, progress_bar=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc.run(jax.random.key(0), y)
        samples = mcmc.get_samples(group_by_chain=True)
        draws[method] = np.asarray(samples["mu"])
        out[method + "_devices"] = len(samples["mu"].sharding.device_set)
    out["max_abs_diff"] = float(np.max(np.abs(draws["vectorized"] - draws["sharded"])))
    out["spread"] = float(np.std(draws["vectorized"]))
    print("RESULT" + json.dumps(out))
    """
)


def test_sharded_chains_match_vectorized_chains():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu",
               EFFPPL_INFERENCE_TEST_PPL=_ppl.BACKEND)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(s for s in proc.stdout.splitlines() if s.startswith("RESULT"))
    out = json.loads(line[len("RESULT"):])
    assert out["devices"] == 4
    assert out["sharded_devices"] == 4 and out["vectorized_devices"] == 1
    assert out["spread"] > 0.05
    assert out["max_abs_diff"] < 1e-8
