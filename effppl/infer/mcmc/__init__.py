"""Markov chain Monte Carlo: `NUTS` and `HMC` on blackjax's kernels, tuned by window adaptation,
driven by `MCMC`.

- `_kernels.py`: the kernel settings objects (`NUTS`, `HMC`); `_barker.py`: `BarkerMH`;
  `_hmc_gibbs.py`: `HMCGibbs` (the user's Gibbs step, then the inner kernel's);
  `_discrete_gibbs.py`: `DiscreteHMCGibbs` (Gibbs updates of the discrete sites);
  `_mixed_hmc.py`: `MixedHMC` (discrete updates inside the HMC trajectory).
- `_sampler.py`: the compiled warmup/sampling chunk, cached by structure.
- `_driver.py`: the `MCMC` driver (initial points, chunks, results, diagnostics).
- `_window.py`: Stan's window adaptation; `_fisher.py`: nutpie's Fisher-divergence adaptation;
  `_adaptation.py`: the schemes by `mass_matrix=` name; `_warmup_check.py`: what makes a
  warmup degenerate, and the warnings naming such chains; `_mixing.py`: chains that
  disagree after the draws.
- `_checkpoint.py`: what a run has done, saved to a checkpoint and kept on Ctrl-C
  (the store itself: `effppl/infer/_checkpoint_store.py`).
"""

from ._barker import BarkerMH
from ._discrete_gibbs import DiscreteHMCGibbs
from ._driver import MCMC, DivergenceWarning, MCMCError, MCMCState
from ._hmc_gibbs import HMCGibbs
from ._kernels import HMC, NUTS, KernelSettingsError
from ._mixed_hmc import MixedHMC
from ._mixing import ChainMixingWarning
from ._warmup_check import MaxTreeDepthWarning, StuckChainWarning

__all__ = ["MCMC", "MCMCState", "MCMCError", "DivergenceWarning", "StuckChainWarning",
           "MaxTreeDepthWarning", "ChainMixingWarning", "NUTS", "HMC",
           "BarkerMH", "HMCGibbs", "DiscreteHMCGibbs", "MixedHMC", "KernelSettingsError"]
