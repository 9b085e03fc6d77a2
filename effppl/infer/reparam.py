"""`effppl.infer.reparam`: reparameterizers for `effppl.handlers.reparam` (NumPyro's names)."""

from .svi._neutra import NeuTraReparam
from ._reparam import LocScaleReparam, Reparam, TransformReparam

__all__ = ["Reparam", "LocScaleReparam", "TransformReparam", "NeuTraReparam"]
