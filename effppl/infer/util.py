"""`effppl.infer.util`: NumPyro's `numpyro.infer.util` entry points for effppl models."""

from numpyro.infer.util import transform_fn  # NumPyro's: a dict of transforms applied by name

from ..handlers import constrain_fn, log_density, potential_energy, unconstrain_fn
from ._init import init_to_uniform, init_to_value
from ._predictive import Predictive, log_likelihood
from ._util import ModelInfo, ParamInfo, compute_log_probs, initialize_model

__all__ = ["initialize_model", "ModelInfo", "ParamInfo", "compute_log_probs", "log_density",
           "potential_energy", "constrain_fn", "unconstrain_fn", "Predictive", "log_likelihood",
           "init_to_uniform", "init_to_value", "transform_fn"]
