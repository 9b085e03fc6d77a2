"""`effppl.distributions`: NumPyro's distributions, re-exported (we do not write our own).

NumPyro's submodules that `import numpyro.distributions as dist` binds (`dist.util.clamp_probs`,
`dist.kl.kl_divergence`, `dist.constraints`, ...) are bound here too, as the same modules."""

# a wildcard re-export on purpose: every NumPyro distribution, under NumPyro's name
from numpyro.distributions import *  # noqa: F401,F403  # pyright: ignore[reportWildcardImportFromLibrary]
from numpyro.distributions import (  # noqa: F401
    batch_util,
    censored,
    conjugate,
    constraints,
    continuous,
    copula,
    directional,
    discrete,
    distribution,
    flows,
    kl,
    mixtures,
    transforms,
    truncated,
    util,
)
