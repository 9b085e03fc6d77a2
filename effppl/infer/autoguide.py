"""`effppl.infer.autoguide`, NumPyro's module path for the autoguides of
`effppl.inference.autoguide`."""

from ..inference.autoguide import *  # noqa: F401,F403
from ..inference.autoguide import __all__  # noqa: F401
