"""Enumerated sites inside a plain `lax.scan`: the forward algorithm, derived from the model.

`enum` traces the model to its effectful jaxpr and evaluates it equation by equation (re-binding
each one, so the handlers around `enum` see every perform as before). A `scan` whose body holds
sites marked for enumeration is replaced by a scan carrying the forward message: with the body's
enumerated sites taking one joint state `i` of K (the product of their supports) and the part of
the carry that depends on them (the *Markov carry*) being the value it had after state `j` of the
previous step, the body's log density is `lp[j, i]` and

    alpha_t[i] = logsumexp_j(alpha_{t-1}[j] + lp_t[j, i]),   log Z = logsumexp_i(alpha_T[i]),

which the rewritten scan adds to the log density as one factor site, `_enumerated_<site>`. Cost:
O(T K^2) time, O(K^2) memory per step; `lp` comes from the body traced once and evaluated under
`jax.vmap` over `(t, j, i)` (see `forward_scan`). A carry holding the enumerated values of the
last k steps (e.g. `(z_prev, z)`, NumPyro's `scan(..., history=k)`) makes a chain of order k:
`j` then ranges over the joint states of those k steps, at O(T K^(k+1)) (`_recursions`).

The body runs once per step performing its sites for the handlers outside (their values:
`substitute`, HMC's unconstrained values, `seed`; the sites that depend on the enumerated ones
masked so that no log density outside counts them, the enumerated sites at their first value;
the others counted there as any site), then as a pure function of `(t, j, i)` that computes
the `log_prob` of each site that depends on them at those values. The chain's order must be
finite: no carry may depend on its own previous value and on the enumerated sites (a running
sum of them). Enumerated sites in plates are independent chains, one message per plate
element (`_plated_chains`).

(Over 400 lines: the model's interpreter, the dependence analysis that finds the Markov carry and
checks the chain's order, and the rewrite with its backward pass share the body's structure;
apart, each would re-derive it.)
"""

from __future__ import annotations

import functools
import math
import operator
import warnings

import jax
import jax.numpy as jnp

from ...effects import internal
from ...effects.internal import perform_p
from ...primitives import SiteError, deterministic, deterministic_op, factor, sample_op
from .._handler import call_unhandled, masked_log_prob, model_name
from .._trace import is_enumerated
from ._plated_chains import chains_of, reducer
from ._recursions import backward_chains, forward_pass, log_sum_exp, order_tables


def _name(eqn):
    """The site name of a perform equation."""
    return dict(eqn.params["static"]).get("name")


def _deferred(eqn) -> bool:
    """Whether `eqn` performs a sample site marked for enumeration that still has no value."""
    if eqn.primitive is not perform_p or eqn.params["op"] is not sample_op:
        return False
    static = dict(eqn.params["static"])
    if static.get("is_observed") or not is_enumerated(static.get("infer", ())):
        return False
    msg = jax.tree_util.tree_unflatten(eqn.params["in_tree"], list(eqn.invars))[0]
    return msg.value is None


def _is_enumerated_at_top(eqn) -> bool:
    return (eqn.primitive is perform_p and eqn.params["op"] is sample_op
            and "_enumerate_dim" in dict(dict(eqn.params["static"]).get("infer", ())))


def _deferred_inside(jaxpr) -> list:
    """The names of the deferred enumerated sites anywhere inside `jaxpr`."""
    found = []
    for eqn in jaxpr.eqns:
        if _deferred(eqn):
            found.append(_name(eqn))
        for sub in internal.jaxprs_in_params(eqn.params):
            found.extend(_deferred_inside(sub))
    return found


def _read(env, v):
    return v.val if isinstance(v, internal.Literal) else env[v]


def _evaluate(jaxpr, consts, args, on_eqn):
    """Evaluate `jaxpr`; `on_eqn(index, eqn, ins)` returns an equation's outputs, or None to
    re-bind it unchanged."""
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for index, eqn in enumerate(jaxpr.eqns):
        ins = [_read(env, v) for v in eqn.invars]
        outs = on_eqn(index, eqn, ins)
        if outs is None:
            outs = internal.bind_eqn(eqn, ins)
        env.update(zip(eqn.outvars, outs))
    return [_read(env, v) for v in jaxpr.outvars]


def _dependence(jaxpr, sources):
    """`{var: frozenset of sources}` for every variable of `jaxpr` (its own level), where
    `sources` maps invars and equation indices (for performs: their value) to source labels."""
    deps = {v: frozenset([sources[v]]) if v in sources else frozenset() for v in jaxpr.invars}
    for index, eqn in enumerate(jaxpr.eqns):
        ins = frozenset().union(*(deps.get(v, frozenset()) for v in eqn.invars
                                  if not isinstance(v, internal.Literal)))
        if eqn.primitive is perform_p and eqn.params["op"] is sample_op:
            ins = frozenset([sources[index]]) if index in sources else frozenset()
        for v in eqn.outvars:
            deps[v] = ins
    return deps


def run(fn, args, kwargs, discrete=None):
    """Run `fn(*args, **kwargs)` (inside `enum`'s context), with every `scan` that holds
    enumerated sites replaced by its forward algorithm. With `discrete=(temperature, rng_key)`
    (`infer_discrete`), each such scan also draws its enumerated sites from their conditional
    given everything else (temperature 1: forward filtering, backward sampling) or takes their
    most likely joint path (temperature 0: Viterbi), recorded as deterministic sites
    `_infer_discrete_<site>` of the sites' stacked shape."""
    closed, consts, leaves, out_tree = internal.trace_call(
        functools.partial(call_unhandled, fn), args, kwargs, model_name(fn))
    jaxpr = closed.jaxpr
    _no_deferred_at_top(jaxpr)
    if not _deferred_inside(jaxpr):
        return fn(*args, **kwargs)
    poisoned = {}   # variable -> the enumerated site it depends on (a dummy value)
    scans = []      # the enumerated scans rewritten so far (each draws with its own key)
    global_enum = {}  # variable -> a top-level enumerated site it depends on (broadcast dims)

    def on_eqn(index, eqn, ins):
        used = [v for v in eqn.invars if not isinstance(v, internal.Literal)]
        bad = next((poisoned[v] for v in used if v in poisoned), None)
        if bad is not None:
            raise SiteError(
                f"effppl.handlers.enum: a value computed from the enumerated site `{bad}` inside "
                f"a `lax.scan` (the scan's final carry or stacked outputs) is used after the "
                f"scan ({eqn.primitive.name} at {internal.summarize_source(eqn.source_info)}). "
                f"Enumerated values exist only inside the scan: use them there.")
        outer = next((global_enum[v] for v in used if v in global_enum), None)
        if _is_enumerated_at_top(eqn):
            outer = _name(eqn)
        names = _deferred_inside_eqn(eqn)
        if names and eqn.primitive.name == "handle":
            raise SiteError(
                f"effppl.handlers.enum: site `{names[0]}` is marked for enumeration inside a "
                f"`lax.scan` that the model runs under an effppl handler it applies to a "
                f"function itself ({internal.summarize_source(eqn.source_info)}, e.g. "
                f"`handlers.scale(fn, 2.0)(...)` called inside the model, or an `enum` there); "
                f"the scan's forward algorithm is derived from the model's program, which that "
                f"handler hides. Apply the handler to the whole model instead "
                f"(`handlers.scale(model, 2.0)`).")
        if names and eqn.primitive is not internal.scan_p:
            raise SiteError(
                f"effppl.handlers.enum: site `{names[0]}` is marked for enumeration inside a "
                f"`{eqn.primitive.name}` of the model; effppl enumerates sites at the model's top "
                f"level (and in plates) and inside a plain `lax.scan` only. Move it out of the "
                f"`{eqn.primitive.name}`.")
        if names and outer is not None:
            raise SiteError(
                f"effppl.handlers.enum: the `lax.scan` holding enumerated site `{names[0]}` also "
                f"uses the enumerated site `{outer}` from outside the scan; enumerating both is "
                f"not supported. Mark only one of them for enumeration.")
        if names:
            key = None
            if discrete is not None and discrete[0] != 0:
                key = jax.random.fold_in(discrete[1], len(scans))
            scans.append(eqn)
            outs, bad_outs = forward_scan(eqn, ins, names, discrete and (discrete[0], key))
            for v, out_bad in zip(eqn.outvars, bad_outs):
                if out_bad:
                    poisoned[v] = names[0]
            return outs
        if outer is not None:
            for v in eqn.outvars:
                global_enum[v] = outer
        return None

    outs = _evaluate(jaxpr, [], list(consts) + list(leaves), on_eqn)
    return jax.tree_util.tree_unflatten(out_tree, outs)


def _no_deferred_at_top(jaxpr):
    """Raise for a site marked for enumeration that reached the model's top level without its
    enumerated value: `enum` gives one to every marked site traced at the top level, so such a
    site was traced under a `jax.vmap` of the model (its batch rule performs it at the top level);
    left alone, it would be drawn, giving a random loss instead of the sum."""
    for eqn in jaxpr.eqns:
        if _deferred(eqn):
            raise SiteError(
                f"effppl.handlers.enum: site `{_name(eqn)}` is marked for enumeration inside a "
                f"`jax.vmap` of the model ({internal.summarize_source(eqn.source_info)}); effppl "
                f"cannot enumerate a site under `jax.vmap`. Declare the batch with "
                f"`effppl.plate(name, size)` instead of vmapping (the plate's sites are "
                f"enumerated independently), or do not mark the site for enumeration.")


def _deferred_inside_eqn(eqn):
    names = []
    for sub in internal.jaxprs_in_params(eqn.params):
        names.extend(_deferred_inside(sub))
    return names


def _no_nested_sites(body, names):
    for eqn in body.eqns:
        if eqn.primitive is perform_p:
            if eqn.params["op"] not in (sample_op, deterministic_op):
                raise SiteError(f"effppl.handlers.enum: the `lax.scan` holding enumerated site "
                                f"`{names[0]}` performs `{eqn.params['op'].name}`, which its "
                                f"forward algorithm cannot evaluate.")
            continue
        for sub in internal.jaxprs_in_params(eqn.params):
            inner = [_name(e) for e in internal.iter_eqns(sub) if e.primitive is perform_p]
            if inner or sub.effects:
                what = f"site `{inner[0]}`" if inner and inner[0] else "sites (or handlers)"
                raise SiteError(
                    f"effppl.handlers.enum: the `lax.scan` holding enumerated site `{names[0]}` "
                    f"has {what} inside a nested `{eqn.primitive.name}` "
                    f"({internal.summarize_source(eqn.source_info)}); its forward algorithm "
                    f"needs every site of the body at the body's top level (for a `cond`, "
                    f"compute both branches' values and select them with `jnp.where`, or mask "
                    f"the site with `effppl.handlers.mask`).")


def _markov_structure(body, n_consts, n_carry, enum_eqns, names):
    """`(markov, poisoned_ys, fixed, dependent, undefined, order)`: which carry outputs depend
    on the enumerated sites (the Markov carry), which stacked outputs do, whether the Markov
    carry depends on nothing else (no input of the step, no other site, no earlier step: the
    same function of the state at every step), the sample sites whose distribution depends on
    the enumerated sites, the deterministic sites whose value does, and the chain's order (how
    many steps' enumerated values the Markov carry holds; 0 when none does).
    **Raises:** `SiteError` for a carry whose history has no bound (one that depends on its own
    previous value and on the enumerated sites, e.g. a running sum of them)."""
    carry_in = body.invars[n_consts:n_consts + n_carry]
    sources = {i: ("v", i) for i, e in enumerate(body.eqns)
               if e.primitive is perform_p and e.params["op"] is sample_op}
    sources.update({i: ("z", i) for i in enum_eqns})
    sources.update({v: ("c", k) for k, v in enumerate(carry_in)})
    sources.update({v: ("x", k) for k, v in enumerate(body.invars[n_consts + n_carry:])})
    deps = _dependence(body, sources)

    def of(v):
        return frozenset() if isinstance(v, internal.Literal) else deps.get(v, frozenset())

    carry_out = body.outvars[:n_carry]
    orders = _orders([of(v) for v in carry_out], names)
    markov = [o > 0 for o in orders]

    def enumerated(sources):
        return any(s[0] == "z" or (s[0] == "c" and markov[s[1]]) for s in sources)

    ys = body.outvars[n_carry:]
    poisoned = [enumerated(of(v)) for v in ys]
    fixed = all(kind == "z" for v, m in zip(carry_out, markov) if m for kind, _ in of(v))
    def reads_enumerated(eqn):
        return enumerated(frozenset().union(*(of(v) for v in eqn.invars)))

    dependent = {i for i in sources if isinstance(i, int)
                 and (i in enum_eqns or reads_enumerated(body.eqns[i]))}
    undefined = {i for i, e in enumerate(body.eqns) if e.primitive is perform_p
                 and e.params["op"] is deterministic_op and reads_enumerated(e)}
    return markov, poisoned, fixed, dependent, undefined, max(orders, default=0)


def _orders(carry_sources, names):
    """Each carry output's order: 1 if it depends on the step's enumerated sites, one more than
    the highest order of the carry inputs it depends on, 0 if neither (a fixed point over the
    carry's dependence graph)."""
    n_carry = len(carry_sources)
    orders = [0] * n_carry
    for _ in range(n_carry + 1):  # a path without cycles has at most n_carry edges
        new = [max([int(any(kind == "z" for kind, _ in srcs))]
                   + [orders[c] + 1 for kind, c in srcs if kind == "c" and orders[c]])
               for srcs in carry_sources]
        if new == orders:
            return orders
        orders, changed = new, [k for k in range(n_carry) if new[k] != orders[k]]
    k = changed[0]
    raise SiteError(
        f"effppl.handlers.enum: in the `lax.scan` holding enumerated site `{names[0]}`, carry "
        f"element {k} depends on its own previous value and on the enumerated site: its history "
        f"is unbounded (e.g. a running sum of enumerated values). effppl marginalises chains of "
        f"finite order only (the carry may hold the enumerated values of the last few steps, "
        f"or functions of them); enumerate by hand otherwise.")


def _no_reparam_of_dependent(body, dependent, names):
    """Raise for a site that depends on the enumerated sites and is reparametrized (`reparam`
    around the model or a `with reparam(...)` block in the body replaces it by auxiliary sites
    and a deterministic site marked `reparametrized`): the forward algorithm cannot give the
    deterministic site's value a density over the enumerated values. (Other handlers change a
    site's value, which pass 2 reads from pass 1, or its mask and scale, which the message
    carries.)"""
    for index in sorted(dependent):
        eqn = body.eqns[index]
        static = dict(eqn.params.get("static", ()))
        if static.get("reparametrized") or dict(static.get("infer", ())).get("_reparametrized"):
            raise SiteError(
                f"effppl.handlers.enum: site `{_name(eqn)}` in the `lax.scan` holding enumerated "
                f"site `{names[0]}` depends on it and is reparametrized (by `reparam`); the "
                f"forward algorithm cannot reparametrize a site that depends on an enumerated "
                f"one. Reparametrize only sites that do not depend on the enumerated sites, or "
                f"write the reparametrization in the model (a standard-normal site and the "
                f"deterministic location-scale transform of it).")


def forward_scan(eqn, ins, names, discrete=None):
    """The outputs of the scan `eqn` on `ins` with its enumerated sites summed out by the
    forward algorithm, and which outputs are dummies (depend on the enumerated sites).
    `discrete=(temperature, key)`: also draw the sites (see `run`); temperature 0 runs the
    max-product recursion instead.

    Three passes: (1) the scan itself, performing the body's sites for the handlers outside
    (the Markov carry held at its initial value, the enumerated sites at their first value),
    recording every site's value, and counting there the sites that do not depend on the
    enumerated ones (so handlers scoped inside the body, e.g. `reparam`, act on them as usual);
    (2) every step's table `lp[t, j, i, *chains]` of the sites that do depend on them,
    vectorised over `(t, j, i)` (one chain per element of the enumerated sites' plates, see
    `_plated_chains`); (3) the recursion over `t`, a scan as light as a hand-written one."""
    params = eqn.params
    n_consts, n_carry = internal.scan_counts(params)
    closed = params["jaxpr"]
    body = closed.jaxpr
    _no_nested_sites(body, names)
    enum_eqns = [i for i, e in enumerate(body.eqns) if _deferred(e)]
    sites = [i for i, e in enumerate(body.eqns)
             if e.primitive is perform_p and e.params["op"] is sample_op]
    markov, poisoned_ys, fixed, dependent, undefined, order = _markov_structure(
        body, n_consts, n_carry, enum_eqns, names)
    _no_reparam_of_dependent(body, dependent | undefined, names)
    if discrete is None:  # (`infer_discrete` substitutes its draws and runs the model again)
        _warn_undefined(body, undefined, names)
    chains = chains_of(body, enum_eqns)
    reducers = {i: reducer(body.eqns[i], chains, names[0]) for i in sorted(dependent)}
    consts, init, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
    supports, shapes = _supports(body, enum_eqns)
    sizes = [s.shape[0] for s in supports]
    num_states = math.prod(sizes)
    states = jnp.stack(jnp.unravel_index(jnp.arange(num_states), sizes), -1)  # (K, n_sites)
    markov_init = [c for c, m in zip(init, markov) if m]
    length, reverse = params["length"], params["reverse"]

    def state_value(k, state):  # every chain of enumerated site k at `state`
        return jnp.broadcast_to(supports[k][state], shapes[k])

    def merged(markov_values, carry):
        rows = iter(markov_values)
        return [next(rows) if m else c for m, c in zip(markov, carry)]

    def body_fn(perform, carry, x):
        return _evaluate(body, closed.consts, list(consts) + list(carry) + list(x), perform)

    def step(carry, x):  # pass 1: the sites' values, from the handlers outside
        values = {}

        def perform(index, e, e_ins):
            if index in undefined:  # its value at the first state would pass for the value
                return internal.bind_eqn(e, [_undefined_like(x) for x in e_ins])
            if e.primitive is not perform_p or e.params["op"] is not sample_op:
                return None
            msg = jax.tree_util.tree_unflatten(e.params["in_tree"], e_ins)[0]
            if index in dependent:  # counted in pass 2, not outside
                msg = msg._replace(mask=jnp.zeros((), bool))
            if index in enum_eqns:
                msg = msg._replace(value=state_value(enum_eqns.index(index), 0))
            values[index] = sample_op(msg, **dict(e.params["static"]))
            return [values[index]]

        outs = body_fn(perform, merged(markov_init, carry), x)
        new_carry = merged(markov_init, outs[:n_carry])
        return new_carry, (outs[n_carry:], carry, [values[i] for i in sites])

    carry, (ys, carries, values) = jax.lax.scan(step, list(init), list(xs), length=length,
                                                reverse=reverse)
    if discrete is not None:
        _record_states(discrete, body, enum_eqns, supports, shapes, states, length, None)
    if length == 0:
        return list(carry) + list(ys), list(markov) + list(poisoned_ys)
    steps = (carries, list(xs), values)
    if reverse:  # processing order
        steps = jax.tree.map(lambda a: a[::-1], steps)

    def log_density(step_inputs, markov_values, i):  # pass 2: lp[t, j, i, *chains]
        carry_t, x_t, values_t = step_inputs
        given = dict(zip(sites, values_t))
        chained = [jnp.zeros(chains.shape)]

        def perform(index, e, e_ins):
            if e.primitive is not perform_p:
                return None
            if e.params["op"] is deterministic_op:
                return list(e_ins)
            if index not in dependent:  # counted outside, in pass 1
                return [given[index]]
            msg = jax.tree_util.tree_unflatten(e.params["in_tree"], e_ins)[0]
            if index in enum_eqns:
                k = enum_eqns.index(index)
                value = state_value(k, states[i, k])
            else:
                value = given[index]
            chained.append(reducers[index](masked_log_prob(msg.fn, value, msg.mask, msg.scale)))
            return [value]

        outs = body_fn(perform, merged(markov_values, carry_t), x_t)
        total = functools.reduce(operator.add, chained)  # the step's log densities
        return total, [o for o, m in zip(outs[:n_carry], markov) if m]

    every_state = jnp.arange(num_states)
    over_states = jax.vmap(log_density, (None, None, 0))
    if order == 1 and fixed:  # the Markov carry after state i is the same at every step
        first = jax.tree.map(lambda a: a[0], steps)
        lp0, after = over_states(first, markov_init, every_state)
        later = jax.tree.map(lambda a: a[1:], steps)
        lp = jax.vmap(jax.vmap(over_states, (None, 0, None)), (0, None, None))(
            later, after, every_state)[0]
        lp = jnp.concatenate([jnp.broadcast_to(lp0, (1, num_states, *lp0.shape)), lp])
    elif order:  # lp[t, p, i]: p the states of the `order` steps before t
        lp = order_tables(log_density, steps, markov_init, num_states, order)
    else:  # no carry depends on the enumerated sites: lp[t, i], the same for every j
        lp = jax.vmap(jax.vmap(log_density, (None, None, 0)), (0, None, None))(
            steps, [], every_state)[0][:, None]

    viterbi = discrete is not None and discrete[0] == 0
    reduce = (lambda a, axis: jnp.max(a, axis=axis)) if viterbi else log_sum_exp
    alpha, alphas = forward_pass(lp, max(order, 1), num_states, reduce, discrete is not None)
    if discrete is not None:
        temperature, key = discrete
        path = backward_chains(alphas, lp, chains, temperature, key, num_states)
        _record_states(discrete, body, enum_eqns, supports, shapes, states, length,
                       path[::-1] if reverse else path)
    factor(f"_enumerated_{names[0]}", jnp.sum(reduce(alpha, axis=0)))
    return list(carry) + list(ys), list(markov) + list(poisoned_ys)


def _warn_undefined(body, undefined, names):
    """Warn (while tracing) about the deterministic sites of the enumerated scan whose value
    depends on its enumerated sites: summed out, they have no value, so the site is recorded
    as NaN (the least integer for an integer site), not as its value at one state."""
    if undefined:
        sites = ", ".join(f"`{_name(body.eqns[i])}`" for i in sorted(undefined))
        warnings.warn(
            f"effppl.handlers.enum: deterministic site(s) {sites} in the `lax.scan` holding "
            f"enumerated site `{names[0]}` depend on it, which is summed out here (log density, "
            f"MCMC): they are recorded as NaN. To get their values, draw `{names[0]}` with "
            f"`Predictive(model, samples, infer_discrete=True)` (or "
            f"`effppl.infer.infer_discrete`).", UserWarning, stacklevel=2)


def _undefined_like(x):
    """NaN of `x`'s shape, or the least value of its integer type (True for bool)."""
    dtype = jnp.result_type(x)
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.full(jnp.shape(x), jnp.nan, dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.full(jnp.shape(x), jnp.iinfo(dtype).min, dtype)
    return jnp.ones(jnp.shape(x), dtype)


def _record_states(discrete, body, enum_eqns, supports, shapes, states, length, path):
    """Record the enumerated sites' values along `path` (joint state per step and chain, `(T,
    *chains)`, index order) as deterministic sites `_infer_discrete_<site>` of shape `(T,
    *site_shape)`; zeros of that shape when `path` is None (the empty scan; for the analysis of
    a scan of length 0 the sites must exist either way)."""
    if path is None and length:
        return
    for k, index in enumerate(enum_eqns):
        name = dict(body.eqns[index].params["static"])["name"]
        values = (supports[k][states[path, k]].reshape((length, *shapes[k])) if path is not None
                  else jnp.zeros((0, *shapes[k]), supports[k].dtype))
        deterministic(f"_infer_discrete_{name}", values)


def _supports(body, enum_eqns):
    """`(supports, shapes)`: each enumerated site's support, `(K, *event_shape)`, from its
    distribution's type, and the shape of its value at one step."""
    out, shapes = [], []
    for index in enum_eqns:
        e = body.eqns[index]
        msg = jax.tree_util.tree_unflatten(e.params["in_tree"], [v.aval for v in e.invars])[0]
        fn = msg.fn
        support = _support_of(fn)
        out.append(support.reshape((support.shape[0],) + tuple(fn.event_shape)))
        shapes.append(tuple(fn.batch_shape) + tuple(fn.event_shape))
    return out, shapes


def _support_of(fn_avals):
    """`enumerate_support(expand=False)` of a distribution whose leaves are avals: its values do
    not depend on the parameters' values (e.g. `arange(K)`), so evaluate it on zeros."""
    leaves, tree = jax.tree_util.tree_flatten(fn_avals)
    zeros = [jnp.zeros(a.shape, a.dtype) for a in leaves]
    return jax.tree_util.tree_unflatten(tree, zeros).enumerate_support(expand=False)
