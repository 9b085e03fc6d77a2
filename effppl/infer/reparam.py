"""`effppl.infer.reparam`: reparameterizers for `effppl.handlers.reparam` (NumPyro's names)."""

from ..inference._reparam import LocScaleReparam, Reparam, TransformReparam

__all__ = ["Reparam", "LocScaleReparam", "TransformReparam"]
