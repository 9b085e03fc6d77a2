"""Inference for effppl models: NUTS and HMC on blackjax, the MCMC driver, predictive draws, and
SVI on optax (`SVI`, the ELBOs, `autoguide`).

Exported as `effppl.infer`. Samplers are blackjax's (`blackjax.nuts`, `blackjax.hmc`), tuned by
blackjax's window adaptation (Stan's schedule); diagnostics and `InferenceData` come from arviz and
`numpyro.diagnostics`. Compiled functions are cached by structure, with the model data as their
arguments, so repeated runs on new data of the same shapes do not recompile.
"""

from ..handlers import InferDiscreteError, config_enumerate, infer_discrete
from . import autoguide  # noqa: F401  (effppl.infer.autoguide, as NumPyro's module)
from ._checkpoint import Checkpoint, CheckpointError
from ._compile._arguments import ModelArgumentError
from ._compile._cache import UnhashableArgumentError, clear_cache
from ._compile._fns import StaticArgumentWarning
from ._init import (
    InitializationError,
    InitStrategy,
    init_to_median,
    init_to_uniform,
    init_to_value,
)
from ._init_site import init_to_feasible, init_to_mean, init_to_sample
from ._interrupt import InterruptedWarning
from ._model import PPLUnavailableError
from ._predictive import Predictive, PredictiveError, log_likelihood
from ._util import initialize_model
from .mcmc._barker import BarkerMH
from .mcmc._discrete_gibbs import DiscreteHMCGibbs
from .mcmc._driver import MCMC, DivergenceWarning, MCMCError, MCMCState
from .mcmc._ecs import ECSError
from .mcmc._hmc_gibbs import HMCGibbs
from .mcmc._hmcecs import HMCECS
from .mcmc._kernels import HMC, NUTS, KernelSettingsError
from .mcmc._mixed_hmc import MixedHMC
from .mcmc._mixing import ChainMixingWarning
from .mcmc._sa import SA
from .mcmc._unsupported import (
    AIES,
    ESS,
    UnsupportedKernelError,
)
from .mcmc._warmup_check import MaxTreeDepthWarning, StuckChainWarning
from .svi._elbo import ELBOError, RenyiELBO, Trace_ELBO, TraceEnum_ELBO, TraceMeanField_ELBO
from .svi._optim import OptimizerError
from .svi._svi import SVI, SVIError, SVIRunResult, SVIState
from .svi._tracegraph import TraceGraph_ELBO

__all__ = [
    "MCMC",
    "Checkpoint",
    "CheckpointError",
    "InterruptedWarning",
    "initialize_model",
    "NUTS",
    "HMC",
    "Predictive",
    "SVI",
    "SVIState",
    "SVIRunResult",
    "Trace_ELBO",
    "TraceMeanField_ELBO",
    "TraceEnum_ELBO",
    "TraceGraph_ELBO",
    "RenyiELBO",
    "SVIError",
    "ELBOError",
    "OptimizerError",
    "log_likelihood",
    "init_to_uniform",
    "init_to_median",
    "init_to_value",
    "init_to_feasible",
    "init_to_mean",
    "init_to_sample",
    "InitStrategy",
    "MCMCState",
    "InitializationError",
    "MCMCError",
    "KernelSettingsError",
    "PredictiveError",
    "UnhashableArgumentError",
    "ModelArgumentError",
    "PPLUnavailableError",
    "DivergenceWarning",
    "StuckChainWarning",
    "MaxTreeDepthWarning",
    "ChainMixingWarning",
    "StaticArgumentWarning",
    "clear_cache",
    "config_enumerate",
    "infer_discrete",
    "InferDiscreteError",
    "SA",
    "HMCECS",
    "ECSError",
    "HMCGibbs",
    "DiscreteHMCGibbs",
    "MixedHMC",
    "BarkerMH",
    "AIES",
    "ESS",
    "UnsupportedKernelError",
]
