"""Markov chain Monte Carlo: `NUTS` and `HMC` on blackjax's kernels, tuned by window adaptation,
driven by `MCMC`.

- `_kernels.py`: the kernel settings objects (`NUTS`, `HMC`).
- `_sampler.py`: the compiled warmup/sampling chunk, cached by structure.
- `_driver.py`: the `MCMC` driver (initial points, chunks, results, diagnostics).
- `_checkpoint.py`: what a run has done, saved to a checkpoint and kept on Ctrl-C
  (the store itself: `effppl/infer/_checkpoint_store.py`).
"""

from ._driver import MCMC, DivergenceWarning, MCMCError, MCMCState
from ._kernels import HMC, NUTS, KernelSettingsError

__all__ = ["MCMC", "MCMCState", "MCMCError", "DivergenceWarning", "NUTS", "HMC",
           "KernelSettingsError"]
