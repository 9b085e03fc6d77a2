"""The one door from inference into the PPL: what `effppl.infer` (and any library built on
effppl's handlers) needs beyond the public handlers, under public names.

Nothing outside `effppl.handlers` imports a private module of it (`tests/test_layering.py`
checks). Like `effppl.effects.internal`, nothing here is stable API for users: it changes with
the inference code that uses it.

- **Models and their sites**: `analyze_model` (the static site analysis of a model at given
  arguments: name -> `Site`), `recorded` (the sites `trace` records), `unconstrained_type` (an
  occurrence's unconstrained shape and dtype), `is_enumerated`, `model_name`, `call_unhandled`,
  `concrete_arguments`, `check_call`.
- **Running handlers**: `substitute_exactly` (`substitute` with no per-draw run for values
  with extra leading axes: inference's own values), `run_outermost` (a handled model under the base handler, compiled),
  `run_in_blocks` (a function run whole under the eager `with` blocks, NumPyro's `scan`),
  `keep_weak_types` (a model argument's weak type, lost by tracing, back for `lax.scan`'s carry),
  `log_joint` (a model's result and log joint), `traced` (its result and trace, recording only the
  sites `keep` selects), `Unconstrain` (the handler giving latent sites unconstrained values).
- **Enumeration**: `enumerated_sites`, `check_enumerable`, `with_site_configurator`,
  `marginal_log_joint` (the log joint with the marked sites summed out), `enumerated_trace`
  (a model's or guide's sample sites traced under `enum`), `max_batch_ndim` (where `enum`'s
  dims start), `named_log_prob` (a site's `log_prob` with its enumerated and plate dims named).
- **The primitives** a guide or reparameterizer is written with (`sample`, `param`, `plate`,
  `factor`, `deterministic`, `get_mask`), and their machinery: `prng_key_op`, `raw_key` (a key from `seed`, also under eager blocks),
  `callback_site_errors`, `SiteError`, `RefusedSiteError` (a reparameterizer's), `InvalidParameterError`, and the runtime flags (`flag`, `is_set`) inference sets while it
  draws initial points (`"initialising"`) or runs a guide for the first time
  (`"guide_first_run"`).
"""

from __future__ import annotations

from .._runtime import flag, is_set
from ..primitives import (
    InvalidParameterError,
    SiteError,
    callback_site_errors,
    deterministic,
    factor,
    get_mask,
    module,
    module_param_names,
    param,
    plate,
    prng_key_op,
    raw_key,
    sample,
)
from ._basic import _analyzed as analyze_model
from ._basic import substitute_exactly
from ._density import _LogJoint, check_call, enumerated_trace, marginal_log_joint, max_batch_ndim
from ._density import _Unconstrain as Unconstrain
from ._handler import (
    call_unhandled,
    concrete_arguments,
    keep_weak_types,
    model_name,
    run_in_blocks,
    run_outermost,
)
from ._reparam import RefusedSiteError
from ._sites import unconstrained_type
from ._trace import is_enumerated, recorded, trace
from .enumeration._contract import _named as named_log_prob
from .enumeration._contract import check_common_scale
from .enumeration._enum import check_enumerable, enumerated_sites, with_site_configurator

__all__ = ["check_common_scale", "substitute_exactly", "analyze_model", "recorded", "unconstrained_type", "is_enumerated", "model_name",
           "call_unhandled", "concrete_arguments", "check_call", "run_outermost", "run_in_blocks", "keep_weak_types", "log_joint",
           "traced", "Unconstrain", "enumerated_sites", "check_enumerable",
           "with_site_configurator", "marginal_log_joint", "enumerated_trace", "max_batch_ndim",
           "named_log_prob", "prng_key_op", "raw_key", "callback_site_errors",
           "SiteError", "RefusedSiteError", "InvalidParameterError", "flag", "is_set", "sample", "param", "module", "module_param_names", "plate",
           "factor", "deterministic", "get_mask"]


def log_joint(model, *args, **kwargs):
    """`(result, log joint)` of `model(*args, **kwargs)` (a model, possibly wrapped in handlers
    that give its latent sites values): every sample site's `log_prob`, masked and scaled, summed;
    no trace is recorded."""
    return run_outermost(_LogJoint(model).handled, *args, **kwargs)


def traced(model, *args, keep=None, scores_only=False, **kwargs):
    """`(result, trace)` of `model(*args, **kwargs)` under `effppl.handlers.trace`, recording
    only the sites for which `keep(name, site)` is true (all when None); with `scores_only`, a
    sample site's record holds what its score needs (value, `log_prob`, scale), not its
    distribution."""
    tracer = trace(model)
    tracer.keep = keep
    tracer.scores_only = scores_only
    return tracer._run(*args, **kwargs)
