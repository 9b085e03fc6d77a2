"""Log densities: `log_density` (constrained), and the unconstrained-space `potential_energy`,
`constrain_fn`, `unconstrain_fn` used by HMC (NumPyro's `numpyro.infer.util` signatures)."""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np
from numpyro.distributions.transforms import biject_to

from .. import effects as fx
from ..effects import internal
from ..primitives import SampleMsg, SiteError, param_op, sample_op, value_shape
from ._basic import check_values, occurrence_counters, site_row, substitute
from ._handler import (
    Handler,
    forward,
    forward_param,
    masked_log_prob,
    run_outermost,
    trace_model,
    weighted,
)
from ._sites import analyze, bijector, split_row, unconstrained_type
from ._trace import trace
from .enumeration import _contract
from .enumeration._enum import (
    _max_batch_ndim,
    enum,
    enumerated_in,
    enumerated_sites,
    with_site_configurator,
)


def _add_log_prob(total, msg, name, static):
    """`(total + sum(log_prob(value)), value)` at a sample site, mask and scale applied; `value`:
    what the handlers outside give it (`forward`)."""
    value = forward(msg, name=name, **static)
    lp = masked_log_prob(msg.fn, value, msg.mask, msg.scale)
    return total + jnp.sum(lp).astype(total.dtype), value


def _failed(state, when, carry, values, *, resume, message):
    """`effects.fail` inside the model (a failed ODE solve, ...): the log density will be
    `-inf` (the proposal rejected); the model goes on. The flag is the state's last leaf."""
    return resume((*state[:-1], state[-1] | when), carry)


def _total(total, failed):
    return jnp.where(failed, -jnp.inf, total)


class _LogJoint(Handler):
    """Accumulates `sum(log_prob(value))` over sample sites, with mask and scale applied
    (`-inf` after a failure, `_failed`)."""

    def params(self, *args, **kwargs):
        return _zeros(()), np.zeros((), bool)

    def clauses(self):
        @internal.forwards_static("name", "cond_indep_stack")
        def sample(state, msg, *, resume, name, **static):
            total, value = _add_log_prob(state[0], msg, name, static)
            return resume((total, state[1]), value)
        return {sample_op: sample, fx.fail_op: _failed}

    @staticmethod  # a plain function: its trace is shared by every `_LogJoint`
    def ret(state, result):
        return result, _total(*state)


def _zeros(shape):
    """Zeros of JAX's default float dtype, for a handler's initial parameters: a NumPy array (a
    constant of the traced program, as `jnp.zeros` would give after one more equation)."""
    return np.zeros(shape, jnp.result_type(float))


class _Enumerated(Exception):
    """Internal: the model has sites marked for enumeration (`_Unconstrain(without_enumeration=
    True)` found them)."""


def _takes_given(msg, static) -> bool:
    """Whether a latent site named in the entry point's values takes its value from them: unless
    it is observed, also when a handler inside the model already gave it one (`substitute`):
    the entry point's value replaces it, as NumPyro's `potential_energy` substitutes over the
    model's own handlers (as `log_density`'s `substitute` does)."""
    return msg.value is None or not static.get("is_observed", False)


class _Unconstrain(Handler):
    """Gives latent sites `params` in unconstrained space: value `t(u)` with `t =
    biject_to(fn.support)` built from the site's *current* distribution (so a support depending on
    other latents uses their current values), and returns `(result, sum of log|det J_t(u)|,
    {site: its own sum})`, each term of the total scaled like its site (the per-site sums, only
    with `per_site=True`, else `{}`, are not scaled: autoguides use them as the guide's own
    Jacobians). (NumPyro adds each term as a factor site `_{name}_log_det`;
    the sum is the same, without two more clauses per latent site to trace.)

    Unconstrained coordinates that no occurrence reads (the rows of a site in a `cond` branch
    that was not taken; the trailing coordinates of a branch whose distribution has fewer, see
    `unconstrained_type`) add a standard normal log density to that sum, so the target stays
    proper: without it HMC drifts without bound along those flat directions. Integrating them
    out leaves the model's density, and no value depends on them."""

    def __init__(self, fn, params, entry_point="potential_energy", per_site=False,
                 without_enumeration=False):
        super().__init__(fn)
        # raise `_Enumerated` (before tracing any clause) if the model has sites to enumerate:
        # the caller learns it from this handler's own analysis, not from one more model trace
        self.without_enumeration = without_enumeration
        self.values = dict(params)
        self.entry_point = entry_point  # the function the user called (errors)
        # the per-site sums only where asked (autoguides): the potential does not read them, and
        # their updates stayed in the sampler's program and its gradient
        self.per_site = per_site

    def params(self, *args, **kwargs):
        check_values(f"{self.entry_point} (unconstrained values)", self.values)
        self._sites = self.analysis()
        if self.without_enumeration and enumerated_in(self._sites):
            raise _Enumerated
        counts = occurrence_counters(self.values, self._sites, conditional=True)
        zero = _zeros(())
        # the per-site sums in one vector (a leaf per site would make tracing quadratic)
        self._index = {name: i for i, name in enumerate(self.values)} if self.per_site else {}
        return counts, zero, _zeros((len(self._index),))

    def _reads(self, *, name, **static):
        """`forwards_static`'s `reads` of the sample clause: the site's unconstrained values, and
        what else its program takes from the site: a site outside loops and `cond` branches,
        with one distribution, reads its value whole (no occurrence counter), so its program is
        shared by every such site of the same types; any other site's is its own (None)."""
        site = self._sites.get(name)
        if site is None or site.in_loop or site.conditional or len(site.keys) > 1:
            return None, self.values[name]
        facts = (site.type, site.is_observed, self.entry_point, self.per_site,
                 self._index.get(name))
        return facts, self.values[name]

    def clauses(self):
        @internal.forwards_when(lambda *, name, **_: name not in self.values)
        @internal.forwards_static("name", "cond_indep_stack", reads=self._reads)
        def sample(state, msg, *, resume, name, read, **static):
            if _takes_given(msg, static):
                state, msg = self._given(state, msg, name, read, static)
            return resume(state, forward(msg, name=name, **static))
        return {sample_op: sample, param_op: self._param_clause()}

    def _given(self, state, msg, name, read, static):
        """`(state, msg)` after latent site `name` takes its value `t(u)` from the unconstrained
        `read` (its values, `_reads`): the message carries the value, the state counts the
        occurrence and adds `log|det J_t(u)|`."""
        counts, log_det_total, per_site = state
        fn, site = msg.fn, self._sites.get(name)
        t = bijector(name, fn)
        shape = self._shape(name, fn, dict(static.get("infer", ())))
        u_shape = t.inverse_shape(shape)
        one_type = site is None or len(site.keys) <= 1  # the branch's own shape
        row_shape = u_shape if one_type else unconstrained_type(site)[0]
        row, _ = site_row(f"{self.entry_point} (unconstrained values)", name, read,
                          row_shape, counts.get(name, 0), site)
        if name in counts:
            counts = dict(counts, **{name: counts[name] + 1})
        u, unread = split_row(row, u_shape)
        value = t(u)
        log_dets = t.log_abs_det_jacobian(u, value)  # one per element of the batch
        aux = None if unread is None else jnp.sum(_std_normal(unread))
        if self.per_site:  # the site's own sum, neither masked nor scaled
            own = jnp.sum(log_dets) if aux is None else jnp.sum(log_dets) + aux
            per_site = per_site.at[self._index[name]].add(own.astype(log_det_total.dtype))
        # NumPyro adds the Jacobian as a factor site beside the site: `handlers.mask` and
        # `handlers.scale` weigh it element by element, as they weigh the site's log density
        log_det = jnp.sum(weighted(log_dets, msg.mask, msg.scale))
        if aux is not None:  # unread coordinates (`cond` branches): scaled by a scalar scale
            scalar = msg.scale is not None and jnp.ndim(msg.scale) == 0
            log_det = log_det + (aux * msg.scale if scalar else aux)
        state = counts, log_det_total + log_det.astype(log_det_total.dtype), per_site
        return state, msg._replace(value=value)

    def _param_clause(self):
        def param(state, msg, *, resume, name, **static):
            if name in self.values:  # NumPyro's constrain_fn: `biject_to(constraint)`, no Jacobian
                msg = msg._replace(value=biject_to(msg.constraint)(self.values[name]))
            return resume(state, forward_param(msg, name=name, **static))
        return param

    def _shape(self, name, fn, infer):
        """The shape of latent site `name`'s value (`primitives.value_shape`); `SiteError` for a
        site below an enumerated one whose shape without enumeration `enum` did not find."""
        parents = infer.get("_enumerated_parents")
        if parents and "_value_shape" not in infer:
            raise SiteError(
                f"{self.entry_point}: the latent site `{name}` is not enumerated, but its "
                f"distribution depends on the enumerated site(s) "
                f"{', '.join(f'`{p}`' for p in parents)}, and the model traced without "
                f"enumeration has no site `{name}` to take its shape from (NumPyro's semantics: "
                f"one value shared by every enumerated value). Give it the same name in both.")
        return value_shape(SampleMsg(fn), infer)

    def ret(self, state, result):
        counts, log_det_total, per_site = state
        per_site = {name: per_site[i] for name, i in self._index.items()}
        for name, count in counts.items():
            site = self._sites.get(name)
            if site is None or site.type != "sample" or not site.conditional or not site.bounded \
                    or not site.count:
                continue  # outside every `cond`, each occurrence reads its row
            values, row_shape = jnp.asarray(self.values[name]), unconstrained_type(site)[0]
            if values.shape not in ((*site.loops, *row_shape), (site.count, *row_shape)):
                continue  # a wrong shape: the site's clause raises the SiteError
            rows = values.reshape((site.count, -1))
            occurrence = jnp.arange(rows.shape[0])
            unread = jnp.zeros(rows.shape[0], bool).at[site.row(occurrence)].set(
                occurrence >= count)
            aux = jnp.sum(jnp.where(unread[:, None], _std_normal(rows), 0.0))
            log_det_total = log_det_total + aux.astype(log_det_total.dtype)
            if self.per_site:
                per_site = dict(per_site,
                                **{name: per_site[name] + aux.astype(log_det_total.dtype)})
        return result, log_det_total, per_site



class _UnconstrainedJoint(_Unconstrain):
    """`_LogJoint(_Unconstrain(...))` in one handler: latent sites take their values from
    unconstrained `params` as `_Unconstrain` gives them, and every sample site adds its
    `log_prob` (masked and scaled) as `_LogJoint` does. Returns `((result, sum of log|det J|,
    per-site sums), log joint)`, the two handlers' results. One handler where there were two:
    the potential's elimination traces, walks and translates one handler level less."""

    def params(self, *args, **kwargs):
        return (*super().params(*args, **kwargs), _zeros(()), np.zeros((), bool))

    def _reads_any(self, *, name, **static):
        """`reads` for every sample site: a latent one's (`_reads`); an observed one, or one
        without a value here, reads nothing and shares one program per signature."""
        if name in self.values:
            return self._reads(name=name, **static)
        return ("not given",), ()

    def clauses(self):
        @internal.forwards_static("name", "cond_indep_stack", reads=self._reads_any)
        def sample(state, msg, *, resume, name, read, **static):
            *inner, total, failed = state
            if name in self.values and _takes_given(msg, static):
                inner, msg = self._given(tuple(inner), msg, name, read, static)
            total, value = _add_log_prob(total, msg, name, static)
            return resume((*inner, total, failed), value)
        return {sample_op: sample, param_op: self._param_clause(), fx.fail_op: _failed}

    def ret(self, state, result):
        *inner, total, failed = state
        return super().ret(tuple(inner), result), _total(total, failed)


def check_call(api, model_args, model_kwargs, params=None):
    """`TypeError` naming the argument of `api` (e.g. "effppl.handlers.log_density") that is not
    what NumPyro's entry points take: `model_args` a tuple (a model's data go in a tuple),
    `model_kwargs` and `params` dicts (or None)."""
    for arg, value, ok, expected in (
            ("model_args", model_args, isinstance(model_args, (tuple, list)), "a tuple"),
            ("model_kwargs", model_kwargs,
             model_kwargs is None or isinstance(model_kwargs, Mapping), "a dict"),
            ("params", params, params is None or isinstance(params, Mapping),
             "a dict site name -> value")):
        if not ok:
            raise TypeError(f"`{api}(..., {arg}=...)` expected {expected}, but got "
                            f"{type(value).__name__} {value!r:.60}"
                            + (" (for one argument: `(y,)`)." if arg == "model_args" else "."))


def _std_normal(u):
    return -0.5 * (jnp.square(u) + jnp.log(2 * jnp.pi))


def _marginal(fn, args, kwargs):
    """`(result, log joint, trace)` of `fn` (handlers that give latent values around
    `enum(model)`) with the model's sites marked for enumeration summed out (`_contract`)."""
    tracer = trace(fn)
    result, tr = tracer._run(*args, **kwargs)
    loops = {name: len(site.loops) for name, site in tracer._recorded.items()}
    return result, _contract.log_joint(tr, loops), tr


def log_density(model, model_args=(), model_kwargs=None, params=None):
    """The log joint density of `model` at constrained values `params`, and its trace.

    **Arguments:** `model`; `model_args` (tuple), `model_kwargs` (dict): its arguments;
    `params`: dict site name -> constrained value (stacked rows for sites inside loops).

    **Returns:** `(log_joint, trace)`: a scalar (float of JAX's default float dtype), and the trace
    (`effppl.handlers.trace`'s dict). Sites marked `infer={"enumerate": "parallel"}` (see
    `effppl.infer.config_enumerate`) are summed out exactly, as NumPyro's funsor-based
    `log_density` does; in the trace they hold their enumerated support.

    **Raises:** `SiteError` naming a latent site with no value, or a shape mismatch;
    `TypeError` when `model_args` is not a tuple, or `model_kwargs` or `params` not a dict.

    **References:** NumPyro's `numpyro.infer.util.log_density`; Obermeyer et al. (2019), "Tensor
    Variable Elimination for Plated Factor Graphs" (enumeration).
    """
    check_call("effppl.handlers.log_density", model_args, model_kwargs, params)
    model_kwargs = model_kwargs or {}
    enumerated = enumerated_sites(model, model_args, model_kwargs)
    given = substitute(enum(model) if enumerated else model, data=params or {})
    given.entry_point = "log_density"
    if not all(enumerated.values()):  # sites outside scans: sum-product over the trace's factors
        _, log_joint, tr = _marginal(given, model_args, model_kwargs)
        return log_joint, tr
    # no enumerated site, or inside scans only (each scan's forward algorithm adds its own
    # factor): the log joint is summed as the model runs, so it reads nothing of the trace (whose
    # gradient would pass through every row of the record)
    joint = _LogJoint(given)
    (_, log_joint), tr = trace(joint)._run(*model_args, **(model_kwargs or {}))
    return log_joint, tr


def unconstrained_log_density(model, model_args, model_kwargs, params):
    """The log density in unconstrained space, `log p(t(u)) + log|det J_t(u)|` (a scalar), with
    the sites marked for enumeration summed out."""
    check_call("effppl.handlers.unconstrained_log_density", model_args, model_kwargs, params)
    kwargs = model_kwargs or {}
    try:  # the common case first: nothing to enumerate (found by the handler's own analysis)
        return _joint(model, params, model_args, kwargs, without_enumeration=True)
    except _Enumerated:
        pass
    if all(enumerated_sites(model, model_args, kwargs).values()):
        # inside scans only: each scan's forward algorithm adds its own factor
        return _joint(enum(model), params, model_args, kwargs)
    # sites outside scans: sum-product over the trace's factors
    (_, log_det, _), log_joint, _ = _marginal(_Unconstrain(enum(model), params), model_args,
                                           kwargs)
    return log_joint + log_det


def _joint(model, params, args, kwargs, **options):
    """`log p(t(u)) + log|det J_t(u)|` of `model` at unconstrained `params`, no enumeration."""
    joint = _UnconstrainedJoint(model, params, **options)
    (_, log_det, _), log_joint = run_outermost(joint.handled, *args, **kwargs)
    return log_joint + log_det


def potential_energy(model, model_args, model_kwargs, params):
    """HMC's potential: minus the log density in unconstrained space.

    **Arguments:** `params`: dict latent site name -> unconstrained array (stacked along loop
    axes for sites inside loops).

    **Returns:** a scalar. **Raises:** as `log_density`. **References:** Stan Reference Manual,
    "Variable transforms"; NumPyro's `numpyro.infer.util.potential_energy`.
    """
    check_call("effppl.handlers.potential_energy", model_args, model_kwargs, params)
    return -unconstrained_log_density(model, model_args, model_kwargs, params)


def constrain_fn(model, model_args, model_kwargs, params, return_deterministic=False):
    """Map unconstrained `params` to constrained values, transforming each site with the support
    given by the current values of the others. Returns a dict (plus deterministic sites when
    `return_deterministic`)."""
    check_call("effppl.handlers.constrain_fn", model_args, model_kwargs, params)
    if enumerated_sites(model, model_args, model_kwargs or {}):
        model = enum(model)  # the enumerated sites take their support; deterministic sites broadcast
    tracer = trace(_Unconstrain(model, params, "constrain_fn"))
    tracer.values_only = True
    tracer.keep = lambda name, site: name in params or (return_deterministic
                                                        and site.type == "deterministic")
    tr = tracer.get_trace(*model_args, **(model_kwargs or {}))
    return {name: site["value"] for name, site in tr.items()
            if name in params or (return_deterministic and site["type"] == "deterministic")}


def unconstrain_fn(model, model_args, model_kwargs, params):
    """Map constrained `params` to unconstrained space (inverse of `constrain_fn`); a `param`
    site by the inverse of `biject_to` of its constraint, as NumPyro's."""
    check_call("effppl.handlers.unconstrain_fn", model_args, model_kwargs, params)
    if enumerated_sites(model, model_args, model_kwargs or {}):
        model = enum(model)
    given = substitute(model, data=params)
    given.entry_point = "unconstrain_fn"
    tracer = trace(given)
    tracer.record_unconstrained = tracer.values_only = True
    tracer.keep = lambda name, site: name in params
    tr = tracer.get_trace(*model_args, **(model_kwargs or {}))
    return {name: biject_to(tr[name]["kwargs"]["constraint"]).inv(tr[name]["value"])
            if tr[name]["type"] == "param" else tr[name]["unconstrained"] for name in params}


def marginal_log_joint(model, args, kwargs, values, first_available_dim):
    """`log p` of `model` at `values` with its sites marked for enumeration summed out; without
    recording a trace when no enumerated site needs the sum-product over plates (scans carry
    their forward message and add its normaliser as a factor). A subsampled plate's scale
    multiplies its summed term, as in NumPyro's `TraceEnum_ELBO`, which scores a model with it."""
    enumerated = enumerated_sites(model, args, kwargs)
    given = substitute(enum(model, first_available_dim) if enumerated else model, data=values)
    given.entry_point = "log_density"
    if all(enumerated.values()):  # none, or inside scans only
        _, log_p = run_outermost(_LogJoint(given).handled, *args, **kwargs)
        return log_p
    tracer = trace(given)
    tracer.keep = lambda name, site: site.type == "sample"  # what the contraction reads
    tracer.scores_only = True
    _, tr = tracer._run(*args, **kwargs)
    loops = {name: len(site.loops) for name, site in tracer._recorded.items()}
    return _contract.log_joint(tr, loops, scale_outside=True)  # as NumPyro's TraceEnum_ELBO


def enumerated_trace(model, args, kwargs, values, first_available_dim, draws_dependents=False,
                     sample_sites_only=True, replayed=None, taken_dims=frozenset()):
    """`(trace, loops)`: the sample sites of `model` run under `enum` (its marked sites' supports
    along dims from `first_available_dim` leftwards) with `values` given, recorded with their
    values, `log_prob` (masked, not scaled), `scale`, plates and `infer` (`_enumerate_dim`: a
    site's dim); `loops`: site -> the number of leading loop axes of its record.

    `draws_dependents` (a guide's enumeration, NumPyro's `TraceEnum_ELBO`): a latent site whose
    distribution depends on enumerated sites is drawn once per enumerated value (its whole batch
    shape), not one value shared by all of them. Without `sample_sites_only`, every site is
    recorded (plates' subsamples, params). `replayed`: `{site: value}` given to latent sites
    as they are performed (as NumPyro's `replay`), values that hold a guide's enumerated dims,
    so not of the site's own shape (`substitute` checks it); sites outside loops only.
    `taken_dims`: the dims those values enumerate (no site of `model` is given them)."""
    if replayed:
        def replay(name, msg, infer, is_observed):
            if name in replayed and not is_observed:
                msg = msg._replace(value=jnp.asarray(replayed[name]))
            return msg, infer

        model = with_site_configurator(model, replay)
    enumerated = enum(model, first_available_dim)
    enumerated.draws_dependents = draws_dependents
    enumerated.taken_dims = frozenset(taken_dims)
    given = substitute(enumerated, data=values)
    given.entry_point = "log_density"
    tracer = trace(given)
    if sample_sites_only:
        tracer.keep = lambda name, site: site.type == "sample"
    _, tr = tracer._run(*args, **kwargs)
    return tr, {name: len(site.loops) for name, site in tracer._recorded.items()}


def max_batch_ndim(model, args, kwargs) -> int:
    """The most batch dims (plates included) any sample site of `model` has, traced without
    enumeration: `enum`'s default enumeration dims start left of that many."""
    return _max_batch_ndim(analyze(trace_model(model, *args, **kwargs)))
