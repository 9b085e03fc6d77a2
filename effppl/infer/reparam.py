"""`effppl.infer.reparam`: reparameterizers for `effppl.handlers.reparam` (NumPyro's names)."""

from ._reparam import LocScaleReparam, Reparam, TransformReparam
from ._reparam_transforms import (
    CircularReparam,
    DiscreteCosineReparam,
    ExplicitReparam,
    HaarReparam,
    ProjectedNormalReparam,
    UnitJacobianReparam,
)
from .svi._neutra import NeuTraReparam

__all__ = ["Reparam", "LocScaleReparam", "TransformReparam", "NeuTraReparam",
           "UnitJacobianReparam", "HaarReparam", "DiscreteCosineReparam", "ExplicitReparam",
           "ProjectedNormalReparam", "CircularReparam"]
