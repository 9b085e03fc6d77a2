"""`effppl.infer.util`: NumPyro's `numpyro.infer.util` names that effppl has."""

from ..handlers import constrain_fn, log_density, potential_energy, unconstrain_fn
from ..inference import Predictive, log_likelihood

__all__ = ["Predictive", "constrain_fn", "log_density", "log_likelihood", "potential_energy",
           "unconstrain_fn"]
