"""`effppl.infer`: the inference API (an alias of `effppl.inference`, as in `numpyro.infer`);
`effppl.infer.util` mirrors `numpyro.infer.util`."""

from ..inference import *  # noqa: F401,F403
from ..inference import __all__  # noqa: F401
