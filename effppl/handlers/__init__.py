"""`effppl.handlers`: inference patterns as effect handlers, compiled away.

Each handler wraps a model and is itself a model, with NumPyro's names and argument orders. Each
is an `effppl.effects` handler of the `sample` operation (and of `param`, `deterministic`, ...)
whose clauses do their job and re-perform the operation for the handlers outside, so they nest in
any order and the translator compiles them away, also when sites sit inside plain `lax.scan`,
`cond` or `while_loop` bodies: no handler stack is left at run time.

Example: the log joint density of a model at given latent values equals the hand-written sum.

>>> import jax.numpy as jnp
>>> from jax.scipy.stats import norm
>>> import effppl
>>> from effppl import distributions as dist
>>> from effppl.handlers import log_density
>>> def model(y):
...     mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
...     with effppl.plate("data", y.shape[0]):
...         effppl.sample("y", dist.Normal(mu, 1.0), obs=y)
>>> y = jnp.array([0.5, 1.5])
>>> lp, trace = log_density(model, (y,), {}, {"mu": 1.0})
>>> round(float(lp), 4), round(float(norm.logpdf(1.0) + norm.logpdf(y, 1.0).sum()), 4)
(-3.5068, -3.5068)
"""

from ..primitives import plate  # NumPyro binds its plate here too
from ._basic import block, condition, do, mask, replay, scale, seed, substitute
from ._collapse import CollapseError, collapse
from ._density import (
    constrain_fn,
    log_density,
    potential_energy,
    unconstrain_fn,
    unconstrained_log_density,
)
from ._infer_config import infer_config
from ._lift import LiftPriorError, lift
from ._reparam import reparam
from ._scope import scope
from ._trace import trace
from ._uncondition import uncondition
from .enumeration import InferDiscreteError, config_enumerate, enum, infer_discrete, markov

__all__ = ["block", "collapse", "CollapseError", "condition", "do", "lift", "mask", "replay",
           "reparam", "scale", "scope", "seed", "substitute", "trace", "uncondition",
           "log_density", "potential_energy", "constrain_fn", "unconstrain_fn",
           "unconstrained_log_density", "enum", "config_enumerate", "infer_config", "markov",
           "infer_discrete", "InferDiscreteError", "LiftPriorError", "plate"]
