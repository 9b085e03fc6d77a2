"""effppl: a probabilistic programming language for JAX built on algebraic effect handlers."""

__version__ = "0.1.0"

from ._errors import EffpplError
from . import _pytree_order
_pytree_order.install_if_cached()  # before any distribution is flattened: see the module
from . import effects
from .primitives import (InvalidParameterError, SiteError, deterministic, factor, get_mask, module,
                         param, plate, plate_stack, prng_key, sample, subsample)
from ._mutable import mutable
from ._site_fns import SiteFunctionError
from numpyro.util import enable_x64, set_host_device_count, set_platform
from numpyro.distributions.distribution import enable_validation, validation_enabled
from . import distributions, handlers
from .handlers import log_density

__all__ = ["__version__", "EffpplError", "SiteError", "InvalidParameterError", "SiteFunctionError", "effects", "distributions", "handlers", "sample",
           "deterministic", "factor", "param", "module", "mutable", "plate", "plate_stack", "subsample", "log_density",
           "prng_key", "get_mask", "enable_x64", "set_host_device_count", "set_platform",
           "enable_validation", "validation_enabled"]


def __getattr__(name):
    if name in ("infer", "optim"):  # imported lazily: blackjax/arviz are heavy
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(name)
