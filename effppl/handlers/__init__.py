"""`effppl.handlers`: inference patterns as effect handlers, compiled away (DESIGN §2).

Each handler wraps a model and is itself a model, with NumPyro's names and argument orders.
"""

from ._basic import block, condition, do, mask, replay, scale, seed, substitute
from ._density import (constrain_fn, log_density, potential_energy, unconstrain_fn,
                       unconstrained_log_density)
from ._discrete import InferDiscreteError, infer_discrete
from ._enum import config_enumerate, enum
from ._lift import lift
from ._reparam import reparam
from ._scope import scope
from ._trace import trace
from ._uncondition import uncondition

__all__ = ["block", "condition", "do", "lift", "mask", "replay", "reparam", "scale", "scope",
           "seed", "substitute", "trace", "uncondition",
           "log_density", "potential_energy", "constrain_fn", "unconstrain_fn",
           "unconstrained_log_density", "enum", "config_enumerate",
           "infer_discrete", "InferDiscreteError"]
