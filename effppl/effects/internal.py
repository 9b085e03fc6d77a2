"""`effppl.effects.internal`: the semi-public layer a library built on `effppl.effects` uses.

effppl's PPL (`effppl.handlers`, `effppl.infer`, `effppl.primitives`) imports from the effects
library only its public API (`effppl.effects`) and this module, never a private `_module`. What is
here is stable within a release but, unlike the public API, may change between releases: it reads
and traces jaxprs, so it moves with JAX. `README.md` beside this file has a short tour.

- Reading programs: `iter_performs` (each perform with its loops, `cond` branches and source;
  control flow is named nowhere else), `iter_eqns`, `exclusive`, `Perform`, `Loop`, `SiteKey`,
  `perform_p` (to recognise a perform equation).
- Tracing: `trace_call` (a function at the types of its array arguments), `split_traced_args`
  (which arguments are traced), `trace_to_jaxpr`, `abstractify`, `weaken` (an array weakly
  typed, as a Python scalar),
  `check_no_leaked_tracers`, `trace_context` (JAX's settings a trace depends on), `dce`,
  `current_trace`, `outside_transformations` (no JAX
  transformation in progress), `vmap_index`, `paused_gc` (tracing a
  large program without cyclic garbage collection); `config_value` (a JAX setting in force,
  a context manager's too); `recording_sources`, `source_values` (the
  concrete value a traced argument passed on unchanged stands for), `stands_for_weak` (a traced
  argument was weakly typed, a Python float).
- Interpreting jaxprs: `bind_eqn`, `jaxpr_as_fun`, `jaxprs_in_params`, `Literal`,
  `summarize_source`, `scan_counts`, `scan_p` (`effppl.handlers.enum` rewrites a `scan` into its
  forward algorithm: the one place outside the translator that must know a loop primitive).
- Clauses: `forwards_static` (a clause that only passes a static argument, e.g. a site name, on
  is traced once per signature, not once per site; with `reads`, one that also reads an array
  per site, e.g. the value given for it, gets it as an input of one shared jaxpr);
  `forwards_when` (the performs a clause only passes on, told by their static arguments, skip
  the handler: no clause traced for them).
- Argument checks and messages: `describe_non_array`, `describe_non_bool`, `callable_name`.
- Translation rules: `register` adds the rule of a primitive (a `Rule`) to the translator's
  table, so a library can make the translator see through a higher-order primitive of its own;
  a rule translates the primitive's sub-jaxprs with `run`, or inlines a region with `inline`
  (`rules/_call.py` is the smallest example). A higher-order primitive with no rule whose
  sub-jaxprs perform operations is an `UnsupportedHandlerError` naming it.
"""

from ._api import callable_name
from ._clauses import forwards_static, forwards_when
from ._compat import (
    Literal,
    abstractify,
    bind_eqn,
    check_no_leaked_tracers,
    config_value,
    current_trace,
    dce,
    initialize_cpu_linalg,
    jaxpr_as_fun,
    jaxprs_in_params,
    outside_transformations,
    scan_counts,
    scan_p,
    split_traced_args,
    summarize_source,
    trace_call,
    trace_context,
    trace_to_jaxpr,
    vmap_index,
    vmap_indices,
    weaken,
)
from ._core import SiteKey, perform_p
from ._sources import recording_sources, source_values, stands_for_weak
from ._translate import Rule, inline, paused_gc, register, run
from ._values import describe_non_array, describe_non_bool
from ._walk import Loop, Perform, exclusive, iter_eqns, iter_performs

__all__ = [
    "forwards_static", "forwards_when", "paused_gc", "iter_performs", "iter_eqns", "exclusive", "Perform", "Loop",
    "SiteKey", "perform_p", "trace_call", "split_traced_args",
    "trace_to_jaxpr", "trace_context", "abstractify",
    "check_no_leaked_tracers", "dce",
    "current_trace", "outside_transformations", "vmap_index", "vmap_indices", "bind_eqn", "jaxpr_as_fun", "jaxprs_in_params", "Literal",
    "summarize_source", "scan_counts", "scan_p", "describe_non_array", "describe_non_bool",
    "callable_name", "recording_sources", "source_values", "stands_for_weak", "register", "Rule", "run", "inline",
    "config_value", "initialize_cpu_linalg", "weaken",
]
