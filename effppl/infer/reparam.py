"""`effppl.infer.reparam`: reparameterizers for `effppl.handlers.reparam` (NumPyro's names)."""

from ..inference._neutra import NeuTraReparam
from ..inference._reparam import LocScaleReparam, Reparam, TransformReparam

__all__ = ["Reparam", "LocScaleReparam", "TransformReparam", "NeuTraReparam"]
