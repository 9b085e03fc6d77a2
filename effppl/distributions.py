"""`effppl.distributions`: NumPyro's distributions, re-exported (we do not write our own)."""

from numpyro.distributions import *  # noqa: F401,F403
from numpyro.distributions import constraints, transforms  # noqa: F401
