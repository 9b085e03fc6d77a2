"""`effppl.infer.reparam`: reparameterizers for `effppl.handlers.reparam` (NumPyro's names)."""

from ._reparam import LocScaleReparam, Reparam, TransformReparam
from .svi._neutra import NeuTraReparam

__all__ = ["Reparam", "LocScaleReparam", "TransformReparam", "NeuTraReparam"]
