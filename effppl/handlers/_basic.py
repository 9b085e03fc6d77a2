"""Handlers that set or adjust a site's message and forward it: `seed`, `substitute`,
`condition`, `do`, `replay`, `block`, `mask`, `scale` (NumPyro's names and argument orders)."""

from __future__ import annotations

import copy
from collections.abc import Mapping

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from .._keys import key_data
from .._mutable import mutable_op
from .._runtime import is_set
from .._site_fns import ask
from ..effects.internal import describe_non_array, describe_non_bool, forwards_static, forwards_when
from ..primitives import (
    SiteError,
    _param_type,
    _value_type,
    deterministic_op,
    mask_scopes,
    masked_message,
    param_op,
    prng_key_op,
    sample_op,
    value_shape,
)
from ._handler import Handler, _named_like, forward, forward_param, trace_model
from ._sites import analyze


class seed(Handler):
    """Give every sample site that still needs a value its own random key.

    The key is the handler's parameter and is split at each occurrence of a site, so a site inside
    a `lax.scan` gets a fresh key per iteration.

    **Arguments:** `fn` (model), `rng_seed`: int, raw `PRNGKey` (uint32[2]) or typed key.

    **Example:** `trace(seed(model, 0)).get_trace(x)`
    """

    def __init__(self, fn=None, rng_seed=None):
        super().__init__(fn)
        self.rng_key = key_data(rng_seed, "effppl.handlers.seed(fn, rng_seed=...)")

    def params(self, *args, **kwargs):
        return self.rng_key

    def absorb(self, handled, params):
        self.rng_key = params  # the next block's site draws a new value

    def clauses(self):
        # under `uncondition` (outside this handler) observed sites get a key too: it makes them
        # latent and draws them, where NumPyro's asks this `seed` for a key at the same point
        sample = _seed_any_site if is_set("keys_for_observed") else _seed_latent_site

        def prng_key(key, *, resume, **static):
            key, sub = jax.random.split(key)
            return resume(key, sub)

        def param(key, msg, *, resume, init_fn, **static):
            if msg.decided() is not None:  # as NumPyro: a key only for an `init_value` function
                return resume(key, forward_param(msg, init_fn=init_fn, **static))
            key, sub = jax.random.split(key)
            msg = msg._replace(init=jnp.asarray(init_fn(sub, *msg.init_args)))
            return resume(key, forward_param(msg, init_fn=init_fn, **static))
        return {sample_op: sample, prng_key_op: prng_key, param_op: param}


@forwards_static("name", "cond_indep_stack")
def _seed_latent_site(key, msg, *, resume, **static):
    """`seed`'s clause: a key for a site with neither a value nor a key yet. A guide's enumerated
    site (`enum`'s `_consumes_key`) takes one too, which it does not use: NumPyro's `seed`,
    inside its `enum`, splits the key there, and the guide's later sites draw as NumPyro's."""
    if dict(static.get("infer", ())).get("_consumes_key") and msg.rng_key is None:
        key, _ = jax.random.split(key)
        return resume(key, forward(msg, **static))
    if msg.value is not None or msg.rng_key is not None:
        return resume(key, forward(msg, **static))
    key, sub = jax.random.split(key)
    return resume(key, forward(msg._replace(rng_key=sub), **static))


@forwards_static("name", "cond_indep_stack")
def _seed_any_site(key, msg, *, resume, is_observed, **static):
    """`seed`'s clause under `uncondition`: observed sites get a key too."""
    if (msg.value is not None and not is_observed) or msg.rng_key is not None:
        return resume(key, forward(msg, is_observed=is_observed, **static))
    key, sub = jax.random.split(key)
    return resume(key, forward(msg._replace(rng_key=sub), is_observed=is_observed, **static))


def site_row(handler, name, values, site_shape, count, site):
    """`(value, advance)`: the value of site `name` at its `count`-th occurrence.

    A site outside loops takes `values` whole, which must have the site's shape or broadcast to it
    (as NumPyro accepts: leading axes of size 1 are dropped); a site inside loops of lengths
    `(T1, T2, ...)` takes row `count` of `values` of shape `(T1, T2, ..., *shape)` (or broadcasting
    to it), or `(T1 * T2 * ..., *shape)`. **Raises:** `SiteError` naming the site on any other shape,
    and for a site inside a `while_loop` (no static number of occurrences to give rows for).
    """
    if site is not None and not site.bounded:
        raise SiteError(f"effppl.handlers.{handler}: site `{name}` sits inside a `while_loop`, "
                        f"so it has no static number of occurrences and a value cannot be given "
                        f"for each of them. Use `lax.scan`/`fori_loop` with a static length, or "
                        f"observe the site with `obs=` in the model.")
    values = jnp.asarray(values)
    site_shape = tuple(site_shape)
    loops = site.loops if site is not None else ()
    given = values
    if site is not None and loops:
        if values.shape != (site.count, *site_shape):
            values = _broadcast_value(values, (*loops, *site_shape))
        if values is not None:
            if site.count == 0:  # inside a loop of length 0: no occurrence ever reads a row
                return jnp.zeros(site_shape, values.dtype), True
            return values.reshape((site.count, *site_shape))[site.row(count)], True
        expected = f"{(*loops, *site_shape)} (one row per occurrence in its loops)"
    elif (fitted := _broadcast_value(values, site_shape)) is not None:
        return fitted, False
    else:
        expected = f"{site_shape}"
    raise SiteError(f"effppl.handlers.{handler}: the value given for site `{name}` has shape "
                    f"{given.shape}, but the site expects {expected}.")


def _broadcast_value(values, shape):
    """`values` broadcast to `shape` when it broadcasts there as NumPyro lets it (leading axes of
    size 1 dropped, e.g. `(1, 2)` for a site of shape `(2,)`), else None."""
    if values.shape == shape:
        return values
    try:
        out = jnp.broadcast_shapes(values.shape, shape)
    except ValueError:
        return None
    lead = len(out) - len(shape)
    if out[lead:] != shape or any(d != 1 for d in out[:lead]):
        return None
    return jnp.broadcast_to(values.reshape(values.shape[max(values.ndim - len(shape), 0):]), shape)


def check_values(api, values, sites=None):
    """Raise a `SiteError` naming the site whose value in `values` (dict name -> value, given to
    `effppl.handlers.<api>`) is not an array of real, integer or bool numbers (for a mutable site
    in `sites`, the analysis: a pytree of them)."""
    for name, value in values.items():
        site = (sites or {}).get(name)
        unused = sites is not None and site is None and isinstance(value, (dict, list, tuple))
        if unused or (site is not None and site.type == "mutable"):  # a pytree of arrays
            for leaf in jax.tree.leaves(value):
                check_values(api, {name: leaf})
            continue
        problem = describe_non_array(value)
        if problem is None and jnp.iscomplexobj(value):
            problem = f"a complex value (dtype {jnp.result_type(value)})"
        if problem is not None:
            kind = "param" if site is not None and site.type == "param" else "site"
            raise SiteError(f"effppl.handlers.{api}: the value given for {kind} `{name}` must be "
                            f"an array of numbers (real, integer or bool), but is {problem}.")


class _BatchedValues(Exception):
    """Raised from `_SetValue.params` for values with extra leading axes: `(batch, names)`."""


def _value_batch(data, sites):
    """`(B, names)` when the values in `data` of the sample and deterministic sites outside loops
    have shapes `(*B, *site_shape)` with the same `B` (axes of size 1 too: as in NumPyro, the
    value keeps them, and so does what the model computes from it), for each name in
    `names` (the others: exactly their sites' shapes), else None (one run; other shapes are
    broadcast or are errors there)."""
    batch, names = None, []
    for name, value in data.items():
        site = sites.get(name)
        if site is None or site.type not in ("sample", "deterministic"):
            continue
        if site.loops:  # rows per occurrence: no batch axes
            return None
        shape, site_shape = tuple(jnp.shape(value)), tuple(site.aval.shape)
        if shape == site_shape:
            continue
        cut = len(shape) - len(site_shape)
        if cut <= 0 or shape[cut:] != site_shape:
            return None
        if batch not in (None, shape[:cut]):
            return None
        batch = shape[:cut]
        names.append(name)
    if not batch:
        return None
    return batch, names


def occurrence_counters(names, sites, conditional=False):
    """`{name: int32(0)}`, an occurrence counter for each site in `names` that sits in a loop (or,
    with `conditional`, in a `cond` branch: whether it ran). A site outside loops reads its value
    whole and needs none; a counter per site would lengthen the handler's parameters by one leaf
    per site, which every clause passes along (tracing quadratic in the number of sites)."""
    def needs(site):
        return site is not None and (site.in_loop or (conditional and site.conditional))
    return {name: jnp.int32(0) for name in names if needs(sites.get(name))}


def _analyzed(fn, args, kwargs):
    return analyze(trace_model(fn, *args, **kwargs))


class _SetValue(Handler):
    """Sets the value of sites named in `data`; the n-th occurrence of a site in a loop reads row n
    of `data[name]` (leading axes: the loops' lengths)."""

    observe = False
    intervene = False
    sets_deterministic = False
    entry_point: str | None = None  # the function the user called, if not this handler
    # values with extra leading axes run the model per draw (`handled`): a user's `substitute`
    # or `condition` only; density entry points and inference's own use need exact shapes
    batch_values = True

    def __init__(self, fn=None, data=None, substitute_fn=None):
        super().__init__(fn)
        api = f"effppl.handlers.{type(self).__name__}"
        if data is None and substitute_fn is None:
            raise TypeError(f"{api}(fn, data) needs `data` (or a function giving sites' values).")
        if data is not None and not isinstance(data, Mapping):
            raise TypeError(f"{api}(fn, data=...) expected a dict site name -> value, but got "
                            f"{type(data).__name__} {data!r:.60}.")
        if data is not None and substitute_fn is not None:
            raise ValueError(f"{api}(fn, ...): only one of `data` or "
                             f"`{type(self).__name__}_fn` should be provided (as in NumPyro).")
        if substitute_fn is not None and not callable(substitute_fn):
            raise TypeError(f"{api}(fn, {type(self).__name__}_fn=...) expected a callable "
                            f"`fn(msg) -> value or None`, but got {substitute_fn!r:.60}.")
        bad = next((k for k in (data or {}) if not isinstance(k, str)), None)
        if bad is not None:
            raise TypeError(f"{api}(fn, data=...) expected str site names as keys, but got "
                            f"{type(bad).__name__} {bad!r:.60}.")
        # a site given `None` is left alone, as in NumPyro (e.g. `condition(model, {"y": None})`)
        self.data = {name: value for name, value in (data or {}).items() if value is not None}
        self.substitute_fn = substitute_fn

    def params(self, *args, **kwargs):
        self._sites = self.analysis()
        check_values(self.entry_point or type(self).__name__, self.data, self._sites)
        batch = (_value_batch(self.data, self._sites)
                 if self.batch_values and self.entry_point is None else None)
        if batch:
            raise _BatchedValues(batch)
        return occurrence_counters(self.data, self._sites)

    def handled(self, *args, **kwargs):
        """Run under this handler. Values in `data` with extra leading axes `B` (the same for
        each, beyond their sites' shapes; sites outside loops), posterior
        draws say, run the model under nested `jax.vmap`s over `B`: every site and the return
        value gain the leading axes `B`, as NumPyro's broadcasting of such values gives in a
        model written for batches; the other values of such sites are broadcast along `B`."""
        try:
            return super().handled(*args, **kwargs)
        except _BatchedValues as batched:
            batch, names = batched.args[0]
        sites, model = self._sites, self.fn
        data = dict(self.data)
        for name, value in self.data.items():
            site = sites.get(name)
            if name not in names and site is not None \
                    and site.type in ("sample", "deterministic"):
                data[name] = jnp.broadcast_to(value, (*batch, *site.aval.shape))

        def per_draw(*a, **kw):
            run = lambda _: model(*a, **kw)  # noqa: E731
            for _ in batch:
                run = jax.vmap(run)
            return run(jnp.zeros(batch))

        h = copy.copy(self)
        h.fn, h.data = _named_like(model)(per_draw), data
        return Handler.handled(h, *args, **kwargs)

    def value_hint(self, kind, name):
        return self.data.get(name) if self.sets_deterministic else None

    def scope_params(self):  # a `with` block: which sites sit in loops is known only later
        return {name: jnp.int32(0) for name in self.data}

    def scope_consts(self):
        check_values(self.entry_point or type(self).__name__, self.data)
        return self.data

    def with_scope_consts(self, consts):
        h = copy.copy(self)
        h.data = dict(consts)
        return h

    def scope_setup(self, eqns):
        return analyze(eqns)

    def clauses(self):
        def given(counts, name, shape):
            """The value in `data` for this occurrence of site `name`, and the new counters."""
            value, advance = site_row(self.entry_point or type(self).__name__, name,
                                      self.data[name], shape, counts.get(name, 0),
                                      self._site(name))
            if advance:
                counts = dict(counts, **{name: counts[name] + 1})
            return value, counts

        def untouched(*, name, **static):  # a site neither `data` nor the function gives
            return name not in self.data and self.substitute_fn is None

        @forwards_when(untouched)
        def sample(counts, msg, *, resume, name, **static):
            shape = value_shape(msg, static.get("infer", ()))
            value = None
            if name in self.data and _short_series(self._site(name), self.data[name], shape):
                value, counts = self._series_head(counts, msg, name)
            elif name in self.data:
                value, counts = given(counts, name, shape)
            elif self.substitute_fn is not None:
                value = self._ask(static.get("site_type", "sample"), name, static, msg)
                if value is not None:
                    value = self._returned(name, value, shape)
            if value is None:
                return resume(counts, forward(msg, name=name, **static))
            if self.intervene:  # the site stays as it was for the handlers outside; the model
                forward(msg, name=name, **static)  # goes on with the intervention
                return resume(counts, jnp.asarray(value, _value_type(msg).dtype))
            static = dict(static, is_observed=static["is_observed"] or self.observe)
            value = jnp.asarray(value, _value_type(msg).dtype)  # e.g. 1.0 for a Bernoulli site
            return resume(counts, forward(msg._replace(value=value), name=name, **static))

        @forwards_when(lambda *, name, **static: name not in self.data)
        def deterministic(counts, value, *, resume, name, **static):
            if name in self.data:
                fixed, counts = given(counts, name, value.shape)
                value = fixed.astype(value.dtype)
            return resume(counts, deterministic_op(value, name=name, **static))

        @forwards_when(untouched)
        def param(counts, msg, *, resume, name, **static):
            value = None
            if name in self.data:
                value = self.data[name]
            elif self.substitute_fn is not None:
                value = self._ask("param", name, static, msg)
                problem = None if value is None else describe_non_array(value)
                if problem is not None:
                    raise SiteError(f"effppl.handlers.{self.entry_point or type(self).__name__}: "
                                    f"the function giving sites' values returned {problem} for "
                                    f"param `{name}`; return an array, or None to leave the "
                                    f"param alone.")
            if value is not None:
                shape = _param_type(msg, name=name, **static)
                value = jnp.asarray(value, shape.dtype)
                if value.shape != shape.shape:
                    raise SiteError(f"effppl.handlers.{self.entry_point or type(self).__name__}: "
                                    f"the value given for param `{name}` has shape {value.shape}, "
                                    f"but its init_value has shape {shape.shape}.")
                msg = msg._replace(value=value)
            return resume(counts, forward_param(msg, name=name, **static))

        @forwards_when(lambda *, name, **static: name not in self.data)
        def mutable(counts, value, *, resume, name, final, **static):
            if not final and name in self.data:  # the value it is created with
                value = _given_mutable(self.entry_point or type(self).__name__, name,
                                       self.data[name], value)
            return resume(counts, mutable_op(value, name=name, final=final, **static))

        clauses: dict = {sample_op: sample}
        if self.sets_deterministic:  # substitute: also deterministic, param, mutable (NumPyro)
            clauses.update({deterministic_op: deterministic, param_op: param,
                            mutable_op: mutable})
        return clauses

    def _ask(self, kind, name, static, msg):
        """What `substitute_fn` (`condition_fn`) answers for the site: a value, or None."""
        api = self.entry_point or type(self).__name__
        return ask(f"effppl.handlers.{api}(fn, {type(self).__name__}_fn=...)",
                   self.substitute_fn, kind, name, static, msg)

    def _returned(self, name, value, shape):
        """`value`, returned by `substitute_fn`/`condition_fn` for site `name`, as an array
        broadcast to the site's `shape` (as `data` values are), or a `SiteError` naming the
        site."""
        api = f"effppl.handlers.{self.entry_point or type(self).__name__}"
        problem = describe_non_array(value)
        if problem is not None:
            raise SiteError(f"{api}: the function giving sites' values returned {problem} for "
                            f"site `{name}`; return an array, or None to leave the site alone.")
        value = jnp.asarray(value)
        try:
            return jnp.broadcast_to(value, tuple(shape))
        except ValueError:
            raise SiteError(f"{api}: the function giving sites' values returned a value of shape "
                            f"{value.shape} for site `{name}`, but the site expects "
                            f"{tuple(shape)}.") from None

    def _site(self, name):
        """The static description (`_sites.Site`) of site `name`, None if unknown (a `with`
        block's sites come from the block's own analysis)."""
        return (self._sites if self.fn is not None else self._scope_info or {}).get(name)

    def _series_head(self, counts, msg, name):
        """As NumPyro's `scan`: a series shorter than the site's loop gives its first rows; later
        occurrences are drawn (with the key `seed` attached, or one asked of an outer `seed`)."""
        values = jnp.asarray(self.data[name])
        i = counts[name]
        site = self._site(name)
        if site is None:
            raise SiteError(f"Site `{name}` is unknown to `{type(self).__name__}` (no site "
                            f"analysis holds it).")
        key = msg.rng_key if msg.rng_key is not None else prng_key_op(
            name=name, rows=(values.shape[0], site.count))
        drawn = msg.fn.sample(key)
        head = values[jnp.minimum(i, values.shape[0] - 1)].astype(drawn.dtype)
        return jnp.where(i < values.shape[0], head, drawn), dict(counts, **{name: i + 1})


def _given_mutable(api, name, given, value):
    """`given`, the value given for the mutable site `name`, as the model's `value` (same keys,
    shapes and dtypes), or a `SiteError` naming the site."""
    leaves, tree = jax.tree.flatten(given)
    expected, expected_tree = jax.tree.flatten(value)
    if tree != expected_tree or [jnp.shape(x) for x in leaves] != [x.shape for x in expected]:
        raise SiteError(f"effppl.handlers.{api}: the value given for the mutable site `{name}` "
                        f"is {jax.tree.map(jnp.shape, given)}, but its init_value is "
                        f"{jax.tree.map(jnp.shape, value)} (keys and shapes must agree).")
    return expected_tree.unflatten([jnp.asarray(x, e.dtype) for x, e in zip(leaves, expected)])


def _short_series(site, values, shape):
    """Whether `values` is a series of rows of `shape`, shorter than the single, forward loop
    around `site` (a forecast past the data, NumPyro's `scan`)."""
    shape = tuple(shape)
    return (site is not None and len(site.loops) == 1 and site.bounded and not any(site.reverse)
            and jnp.ndim(values) == len(shape) + 1 and jnp.shape(values)[1:] == shape
            and 0 < jnp.shape(values)[0] < site.count)


class substitute(_SetValue):
    """Set sites' values from `data` (dict name -> array), or from `substitute_fn(msg)` (`None`:
    leave the site alone). As in NumPyro, every site named takes the value: a latent site stays
    latent, an observed site (`obs=` or an inner `condition`) stays observed at the new value, and
    deterministic, param and mutable sites named in `data` take it too.

    `substitute_fn` is asked about sample, param and subsampled plate sites (NumPyro also asks
    about deterministic and mutable sites), with NumPyro's message (`effppl._site_fns.
    numpyro_message`: a param's `value` is None until a handler gives one, its `init_value` is
    `args[0]`). It is called while the model is traced: the message's arrays are tracers.

    Inside loops, `data[name]` stacks one row per occurrence (shape `(T, ...)`, nested loops
    `(T_outer, T_inner, ...)`). **Raises:** `SiteError` on a shape mismatch, naming the site;
    `SiteFunctionError` when `substitute_fn` needs the Python value of a traced array.
    """

    sets_deterministic = True


def substitute_exactly(fn=None, data=None, substitute_fn=None):
    """`substitute` whose values must have their sites' shapes: no per-draw run for values with
    extra leading axes (a shape error names the site). Inference's own use (`Predictive`, SVI's
    initial values), where such axes are a caller's mistake, not posterior draws."""
    h = substitute(fn, data=data, substitute_fn=substitute_fn)
    h.batch_values = False
    return h


class condition(_SetValue):
    """Observe sites at the values in `data` (dict name -> array): they become observed. Or, as
    in NumPyro, `condition_fn(msg)` gives a sample site's value (`None`: leave the site alone),
    asked as `substitute` asks `substitute_fn` (traced message; `SiteFunctionError` when it needs
    a Python value)."""

    observe = True

    def __init__(self, fn=None, data=None, condition_fn=None):
        super().__init__(fn, data, substitute_fn=condition_fn)


class do(_SetValue):
    """Intervene (NumPyro's and Pyro's `do`): the model goes on with the values in `data` at the
    sites named there, as if they were hard-coded, while each of those sites stays a fresh sample
    site, drawn (`seed`), given a value (`substitute`) and counted in the log density as before,
    whose value does not propagate."""

    intervene = True


def replay(fn=None, trace=None):
    """Reuse the values of a trace's latent sample sites (`effppl.handlers.trace`), and the
    indices of its subsampled plates, as NumPyro's `replay`: a plate of the same name takes them
    (a full plate, `plate(name, size)`, becomes subsampled at those indices).

    **Raises:** `TypeError` when `trace` is not a trace (a dict site name -> site dict)."""
    if not isinstance(trace, Mapping) or not all(
            isinstance(site, Mapping) and {"type", "value"} <= set(site) for site in trace.values()):
        raise TypeError(f"effppl.handlers.replay(fn, trace) expected a trace, the dict site name -> "
                        f"site that `effppl.handlers.trace(...).get_trace(...)` returns, but got "
                        f"{type(trace).__name__} {trace!r:.60}.")
    data = {name: site["value"] for name, site in trace.items()
            if site["type"] == "sample" and not site["is_observed"]}
    # a subsampled plate's indices too, as NumPyro's (a full plate of that name then takes them)
    data.update({name: site["value"] for name, site in trace.items() if _subsampled(site)})
    return substitute(fn, data=data)


def _subsampled(site) -> bool:
    """Whether a trace entry is a subsampled plate's (`args`: `(size, subsample_size)`)."""
    args = tuple(site.get("args", ()))
    return site["type"] == "plate" and len(args) == 2 and args[1] < args[0]


class block(Handler):
    """Hide sites from the handlers outside, as NumPyro's `block`: `hide_fn(msg)` (a NumPyro
    message: `type`, `name`, `fn`, `value`, `is_observed`, `infer`, `scale`, `mask`,
    `cond_indep_stack`, `args`, `kwargs`), `hide` (names), `expose_types` (site types kept),
    `expose` (names kept), or `hide_types` (site types hidden), the first one given; by default
    every site is hidden. `hide_fn` is called while the model is traced (the message's arrays are
    tracers; `SiteFunctionError` when it needs a Python value of one). A hidden latent site with no value is drawn here, from the key an inner
    `seed` attached or, as in NumPyro, a key it asks an outer `seed` for."""

    def __init__(self, fn=None, hide_fn=None, hide=None, expose_types=None, expose=None,
                 hide_types=None):
        super().__init__(fn)
        if hide_fn is not None and not callable(hide_fn):
            raise TypeError(f"effppl.handlers.block(fn, hide_fn=...) expected a callable "
                            f"`hide_fn(msg) -> bool`, but got {hide_fn!r:.60}.")
        for arg, names in (("hide", hide), ("expose", expose), ("expose_types", expose_types),
                           ("hide_types", hide_types)):
            if isinstance(names, str) or (names is not None and not all(
                    isinstance(n, str) for n in names)):
                raise TypeError(f"effppl.handlers.block(fn, {arg}=...) expected a list of site "
                                f"names, but got {names!r:.60} (for one site: {arg}=[name]).")
        if hide_fn is not None:
            self.hide_fn = hide_fn
        elif hide is not None:
            self.hide_fn = lambda msg: msg["name"] in hide
        elif expose_types is not None:
            self.hide_fn = lambda msg: msg["type"] not in expose_types
        elif expose is not None:
            self.hide_fn = lambda msg: msg["name"] not in expose
        elif hide_types is not None:
            self.hide_fn = lambda msg: msg["type"] in hide_types
        else:
            self.hide_fn = lambda msg: True

    def hidden(self, kind, name, msg, static):
        """Whether `hide_fn` hides this site, asked with NumPyro's message for it."""
        return bool(ask("effppl.handlers.block(fn, hide_fn=...)", self.hide_fn, kind, name,
                        static, msg))

    def clauses(self):
        def sample(params, msg, *, resume, name, **static):
            if not self.hidden(static.get("site_type", "sample"), name, msg, static):
                return resume(params, forward(msg, name=name, **self._plates_hidden(static)))
            value = msg.value
            if value is None:  # drawn here, with a key from the nearest `seed` (NumPyro)
                key = msg.rng_key if msg.rng_key is not None else prng_key_op(name=name)
                value = msg.fn.sample(key)
            return resume(params, value)

        def deterministic(params, value, *, resume, name, **static):
            if not self.hidden("deterministic", name, value, static):
                value = deterministic_op(value, name=name, **self._plates_hidden(static))
            return resume(params, value)

        def param(params, msg, *, resume, name, init_fn, **static):
            if not self.hidden("param", name, msg, dict(static, init_fn=init_fn)):
                return resume(params, forward_param(msg, name=name, init_fn=init_fn, **static))
            value = msg.decided()
            if value is None:
                value = jnp.asarray(init_fn(prng_key_op(name=name), *msg.init_args))
            return resume(params, value)

        def mutable(params, value, *, resume, name, **static):
            if not self.hidden("mutable", name, value, static):
                value = mutable_op(value, name=name, **static)
            return resume(params, value)
        return {sample_op: sample, deterministic_op: deterministic, param_op: param,
                mutable_op: mutable}

    def _plates_hidden(self, static):
        """`static` noting, in `hidden_plates`, the enclosing (unsubsampled) plates this block
        hides: a trace outside then leaves out their entries, as NumPyro's block hides a plate's
        own message."""
        hidden = tuple(f.name for f in static.get("cond_indep_stack", ())
                       if self.hidden("plate", f.name, None, {}))
        if not hidden:
            return static
        return dict(static, hidden_plates=tuple(sorted(
            set(static.get("hidden_plates", ())) | set(hidden))))


class mask(Handler):
    """Mask sites' log densities with the boolean array `mask` (broadcast to the batch shape).

    Wraps a model (`mask(model, mask=m)`) or, as in NumPyro, scopes a block of sample statements
    (`with mask(mask=m): ...`)."""

    def __init__(self, fn=None, mask=True):
        problem = describe_non_bool(mask)
        if problem is not None:
            raise TypeError(f"effppl.handlers.mask(fn, mask=...) expected a bool array (as "
                            f"NumPyro's), but got {problem}.")
        self.mask = mask
        super().__init__(fn)

    def __enter__(self):
        out = super().__enter__()
        mask_scopes().append(self.mask)  # for `get_mask`
        return out

    def __exit__(self, *exc):
        mask_scopes().pop()
        return super().__exit__(*exc)

    def handled(self, *args, **kwargs):
        mask_scopes().append(self.mask)
        try:
            return super().handled(*args, **kwargs)
        finally:
            mask_scopes().pop()

    def adjust_message(self, msg):
        return masked_message(msg, self.mask)

    def clauses(self):
        @forwards_static("name", "cond_indep_stack")
        def sample(params, msg, *, resume, **static):
            return resume(params, forward(self.adjust_message(msg), **static))
        return {sample_op: sample}


class scale(Handler):
    """Multiply sites' log densities by `scale` (a positive scalar or array); wraps a model or
    scopes a block (`with scale(scale=10.0): ...`)."""

    def __init__(self, fn=None, scale=1.0):
        problem = describe_non_array(scale)
        if problem is not None or jnp.iscomplexobj(scale):
            raise TypeError(f"effppl.handlers.scale(fn, scale=...) expected a positive real "
                            f"scalar or array, but got {problem or repr(scale)}.")
        if not isinstance(scale, jax.core.Tracer) and not np.all(np.asarray(scale) > 0):
            raise ValueError(f"effppl.handlers.scale(fn, scale={scale!r}) expected a positive "
                             f"scale.")
        self.scale = scale
        super().__init__(fn)

    def adjust_message(self, msg):
        s = jnp.asarray(self.scale)
        return msg._replace(scale=s if msg.scale is None else s * msg.scale)

    def clauses(self):
        @forwards_static("name", "cond_indep_stack")
        def sample(params, msg, *, resume, **static):
            return resume(params, forward(self.adjust_message(msg), **static))
        return {sample_op: sample}
