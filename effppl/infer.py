"""`effppl.infer`: the inference API (an alias of `effppl.inference`, as in `numpyro.infer`)."""

from .inference import *  # noqa: F401,F403
from .inference import __all__  # noqa: F401

import sys as _sys

from .inference import autoguide  # noqa: E402,F401  `effppl.infer.autoguide`, as NumPyro's

_sys.modules[__name__ + ".autoguide"] = autoguide
