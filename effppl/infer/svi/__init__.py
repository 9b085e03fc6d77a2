"""Stochastic variational inference: `SVI` on optax, the ELBOs, the automatic guides
(`autoguide/`) and `NeuTraReparam`.

- `_svi.py`: the `SVI` driver (compiled, chunked updates; NumPyro's API).
- `_checkpoint.py`: what a run has done, saved to a checkpoint and kept on Ctrl-C.
- `_elbo.py`: `Trace_ELBO`, `TraceMeanField_ELBO`, `TraceEnum_ELBO`, `RenyiELBO`.
- `_optim.py`: optax transformations and NumPyro-style optimisers behind one interface.
- `_neutra.py`: neural-transport reparametrization with a fitted `AutoContinuous` guide.
"""

from ._elbo import ELBOError, RenyiELBO, Trace_ELBO, TraceEnum_ELBO, TraceMeanField_ELBO
from ._neutra import NeuTraReparam
from ._optim import OptimizerError
from ._svi import SVI, SVIError, SVIRunResult, SVIState

__all__ = ["SVI", "SVIState", "SVIRunResult", "SVIError", "Trace_ELBO", "TraceMeanField_ELBO",
           "TraceEnum_ELBO", "RenyiELBO", "ELBOError", "OptimizerError", "NeuTraReparam"]
