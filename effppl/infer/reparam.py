"""`effppl.infer.reparam`: reparameterizers for `effppl.handlers.reparam` (NumPyro's names).

The coordinate-changing ones are NumPyro's own classes (`numpyro.infer.reparam`): under
`effppl.handlers.reparam`, the `numpyro.sample`, `factor` and `param` they make are effppl's,
so any NumPyro reparameterizer, a user's included, works unchanged.
"""

from numpyro.infer.reparam import (
    CircularReparam,
    DiscreteCosineReparam,
    ExplicitReparam,
    HaarReparam,
    ProjectedNormalReparam,
    UnitJacobianReparam,
)

from ._reparam import LocScaleReparam, Reparam, TransformReparam
from .svi._neutra import NeuTraReparam

__all__ = ["Reparam", "LocScaleReparam", "TransformReparam", "NeuTraReparam",
           "UnitJacobianReparam", "HaarReparam", "DiscreteCosineReparam", "ExplicitReparam",
           "ProjectedNormalReparam", "CircularReparam"]
