"""`effppl.infer.initialization`: the init strategies, at NumPyro's module path."""

from ._init import init_to_median, init_to_uniform, init_to_value
from ._init_site import init_to_feasible, init_to_mean, init_to_sample

__all__ = ["init_to_feasible", "init_to_mean", "init_to_median", "init_to_sample",
           "init_to_uniform", "init_to_value"]
