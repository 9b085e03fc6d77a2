"""The automatic guides (NumPyro's `numpyro.infer.autoguide` names, params and semantics),
public as `effppl.infer.autoguide`.

- `_base.py`: what every guide shares (the model's latent sites from its site analysis, the map
  from unconstrained draws to the model's supports); `_sites.py`, `_plates.py`, `_prototype.py`
  and `_postprocess.py` its parts (sites, subsampled plates, first run, fitted values).
- `_per_site.py`: one param set per latent site (`AutoNormal`, `AutoDelta`).
- `_continuous.py`, `_laplace.py`: one flat vector of every latent site (`AutoContinuous` and its
  normal guides, `AutoLaplaceApproximation`).
- `_batched.py`: that flat vector viewed as a batch of independent normals
  (`AutoBatchedMultivariateNormal`, `AutoBatchedLowRankMultivariateNormal`).
- `_flows.py`: normalizing flows over that vector (`AutoIAFNormal`, `AutoBNAFNormal`).
- `_dais.py`: annealed HMC from a base normal (`AutoDAIS` over that vector, `AutoSemiDAIS` over
  the local latent sites of a subsampled plate); `_dais_surrogate.py`: `AutoDAIS` towards a
  user's surrogate model (`AutoSurrogateLikelihoodDAIS`).
- `_list.py`: `AutoGuideList`, a guide made of parts.
"""

from ._base import AutoGuide
from ._batched import AutoBatchedLowRankMultivariateNormal, AutoBatchedMultivariateNormal
from ._continuous import (
    AutoContinuous,
    AutoDiagonalNormal,
    AutoLowRankMultivariateNormal,
    AutoMultivariateNormal,
)
from ._dais import AutoDAIS, AutoSemiDAIS
from ._dais_surrogate import AutoSurrogateLikelihoodDAIS
from ._errors import AutoGuideError, MissingParamError, ParamTypeError
from ._flows import AutoBNAFNormal, AutoIAFNormal
from ._laplace import AutoLaplaceApproximation
from ._list import AutoGuideList
from ._per_site import AutoDelta, AutoNormal

__all__ = ["AutoGuide", "AutoNormal", "AutoDelta", "AutoContinuous", "AutoDiagonalNormal",
           "AutoMultivariateNormal", "AutoLowRankMultivariateNormal",
           "AutoBatchedMultivariateNormal", "AutoBatchedLowRankMultivariateNormal",
           "AutoLaplaceApproximation", "AutoIAFNormal", "AutoBNAFNormal", "AutoDAIS",
           "AutoSemiDAIS", "AutoSurrogateLikelihoodDAIS", "AutoGuideList",
           "AutoGuideError", "MissingParamError", "ParamTypeError"]
