"""`effppl.distributions`: NumPyro's distributions, re-exported (we do not write our own)."""

# a wildcard re-export on purpose: every NumPyro distribution, under NumPyro's name
from numpyro.distributions import *  # noqa: F401,F403  # pyright: ignore[reportWildcardImportFromLibrary]
from numpyro.distributions import constraints, transforms  # noqa: F401
