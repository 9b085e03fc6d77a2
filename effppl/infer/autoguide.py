"""`effppl.infer.autoguide`: the automatic guides (NumPyro's `numpyro.infer.autoguide`), an alias
of `effppl.inference.autoguide`."""

from ..inference.autoguide import *  # noqa: F401,F403
from ..inference.autoguide import __all__  # noqa: F401
