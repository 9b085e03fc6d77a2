"""`effppl.infer.autoguide`: the automatic guides, at NumPyro's module path
(`numpyro.infer.autoguide`); they live in `effppl.infer.svi.autoguide`."""

from .svi.autoguide import *  # noqa: F403
from .svi.autoguide import __all__  # noqa: F401
