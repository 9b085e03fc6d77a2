"""`TraceEnum_ELBO` with sites enumerated in the guide (NumPyro's semantics): a guide site marked
`infer={"enumerate": "parallel"}` takes its whole support along a fresh dim (`enum`), the guide's
sites below it are drawn once per value, and the model, run on those values, enumerates its own
marked sites left of the guide's dims. Then

    ELBO = sum over cost terms c of  sum_{z, plates} q(z_c) c(z_c),

`z_c` the guide's enumerated variables a term holds, `q(z_c)` their marginal under the guide
(exact: the guide's enumerated factors, summed over the variables upstream of `z_c` the term
lacks). The terms: `-log q` of each guide site; `log p` of each model site that holds no
variable the model enumerates; and, for each group of model sites joined through such variables,
their contraction (funsor's `sum_product`, the plates not shared by the whole group eliminated),
as NumPyro's `TraceEnum_ELBO` groups them. Drawn guide sites that cannot be reparameterised
weight each term by their scores (NumPyro's Rao-Blackwellised surrogate); a guide that enumerates
nothing but draws such sites, beside a model that enumerates or not, is the degenerate case
(every `q(z_c)` one), `TraceEnum_ELBO`'s route to NumPyro's gradient there.

Not supported (an `ELBOError` naming the site): guide sites enumerated inside a loop of the
guide, model sites enumerated inside a loop or `markov` frames together with guide enumeration,
a site drawn (not enumerated, not reparameterised) inside a loop of the guide together with
guide enumeration, a guide site drawn (not enumerated, not reparameterised) whose distribution depends on an
enumerated one, a term holding an enumerated variable without that variable's plates, and, as
NumPyro raises, model enumeration more global than the guide's (a group of model sites summed
over a plate in which a guide variable it holds is enumerated).
"""

from __future__ import annotations

import functools
import operator
from collections import OrderedDict

import jax
import jax.numpy as jnp
import numpyro.distributions as dist

from ... import handlers
from ...handlers.internal import (
    check_common_scale,
    enumerated_sites,
    enumerated_trace,
    max_batch_ndim,
    named_log_prob,
    substitute_exactly,
    with_site_configurator,
)
from ._elbo_error import ELBOError
from ._provenance import dependencies


def _funsor():
    import funsor
    import funsor.optimizer  # noqa: F401  (`funsor.optimizer.apply_optimizer` below)
    import funsor.sum_product  # noqa: F401

    if funsor.get_backend() != "jax":
        funsor.set_backend("jax")
    return funsor


def _error(message):
    return ELBOError(f"effppl.infer.TraceEnum_ELBO: {message}")


def enumerated_guide_sites(guide, args, kwargs) -> dict:
    """`{name: in a loop}` for the guide's sites marked for enumeration."""
    return enumerated_sites(guide, args, kwargs)


class _Factor:
    """A site's `log_prob` as a funsor Tensor, its dims named: enumerated sites' `_enum_<site>`
    (`variables`), plates' by the plate's name (`plates`)."""

    def __init__(self, site, loops, dims, scaled, measure=False, dice=False):
        funsor = _funsor()
        lp = _unmasked_log_prob(site) if measure else site["log_prob"]
        if dice:  # a drawn site's measure (the "DiCE" factor): zero, its gradient the score
            lp = lp - jax.lax.stop_gradient(lp)
        if scaled and site.get("scale") is not None:
            lp = lp * site["scale"]
        if loops:
            lp = jnp.sum(lp, axis=tuple(range(loops)))
        lp, names = named_log_prob(lp, dims, site["cond_indep_stack"])
        inputs = OrderedDict((n, funsor.Bint[size]) for n, size in zip(names, lp.shape))
        self.tensor = funsor.Tensor(lp, inputs)
        self.variables = frozenset(n for n in names if n in dims.values())
        self.plates = frozenset(names) - self.variables


def _unmasked_fn(fn):
    while isinstance(fn, (dist.MaskedDistribution, dist.ExpandedDistribution)):
        fn = fn.base_dist
    return fn


def _unmasked_log_prob(site):
    """An enumerated site's log measure, as NumPyro's: its `log_prob` without the masks (of
    `mask` handlers or a masked distribution), broadcast to the masked one's shape."""
    if site["fn"] is None:  # not recorded (different distribution families): the masked one
        return site["log_prob"]
    lp = _unmasked_fn(site["fn"]).log_prob(site["value"])
    return jnp.broadcast_to(lp, jnp.broadcast_shapes(jnp.shape(lp), jnp.shape(site["log_prob"])))


def _var(name):
    return f"_enum_{name}"


def elbo(rng_key, param_map, model, guide, args, kwargs, max_plate_nesting, model_values,
         fallback=None):
    """The ELBO of one particle (a scalar) for a guide with enumerated sites, or with drawn sites
    that cannot be reparameterised (with or without enumerated ones: none is the degenerate
    case, every `q(z_c)` one). Its gradient for those drawn sites is NumPyro's
    Rao-Blackwellised score-function estimator: each cost term is weighted, beside `q(z_c)`, by
    the zero-valued factor `exp(sum_d (log q(d) - stop_gradient(log q(d))))` over the drawn sites
    `d` it depends on (found by provenance, `_provenance.dependencies`), each summed over the plates
    the term is not in. `model`: the model with the guide's latent sites no longer marked for
    enumeration; `model_values(param_map, guide_trace)`: what it is given. `fallback`: for a
    guide that enumerates nothing, a thunk whose result is returned instead where the model
    enumerates sites inside a loop or `markov` frames, or where the guide draws such a site
    inside a loop (provenance is by site, not by iteration); without it, or with guide
    enumeration, those raise an `ELBOError`."""
    looped = [n for n, in_loop in enumerated_guide_sites(guide, args, kwargs).items() if in_loop]
    if looped:
        raise _error(f"guide site `{looped[0]}` is marked for enumeration inside a loop of the "
                     f"guide (a `lax.scan`, `fori_loop`, `cond` or `jit`); guide enumeration is "
                     f"supported at the guide's top level only (plates included).")
    k_model, k_guide = jax.random.split(rng_key)
    if max_plate_nesting == float("inf"):
        first = -max(max_batch_ndim(guide, args, kwargs), max_batch_ndim(model, args, kwargs)) - 1
    else:
        first = -max_plate_nesting - 1
    seeded = handlers.seed(substitute_exactly(guide, data=param_map), k_guide)
    guide_tr, guide_loops = enumerated_trace(seeded, args, kwargs, {}, first,
                                             draws_dependents=True, sample_sites_only=False)
    latent = {n: s for n, s in guide_tr.items() if s["type"] == "sample" and not s["is_observed"]}
    guide_dims = {s["infer"]["_enumerate_dim"]: _var(n) for n, s in latent.items()
                  if s["infer"].get("_enumerate_dim") is not None}
    fallback = fallback if not guide_dims else None
    looped = [n for n, s in latent.items() if guide_loops.get(n) and s["fn"] is not None
              and not s["fn"].has_rsample and _var(n) not in guide_dims.values()]
    if looped and fallback is not None:
        return fallback()
    if looped:
        raise _error(f"guide site `{looped[0]}` is drawn from a "
                     f"{type(latent[looped[0]]['fn']).__name__}, which cannot be "
                     f"reparameterised, inside a loop of the guide, and the guide enumerates "
                     f"sites: not supported together. Draw it outside the loop (e.g. in a "
                     f"plate), or enumerate it.")
    model = handlers.seed(model, k_model)
    model_enum = enumerated_sites(model, args, kwargs)
    looped = [n for n, in_loop in model_enum.items() if in_loop]
    if looped and fallback is not None:
        return fallback()
    if looped:
        raise _error(f"model site `{looped[0]}` is enumerated inside a loop of the model, and "
                     f"the guide enumerates sites too: not supported together. Enumerate the "
                     f"guide's sites in the model, or leave the loop's site to the model alone.")
    values, replayed = _split_values(model_values(param_map, guide_tr), latent, guide_loops,
                                     guide_dims)
    model_tr, model_loops = enumerated_trace(model, args, kwargs, values, first,
                                             replayed=replayed, taken_dims=guide_dims)
    model_tr = {n: s for n, s in model_tr.items() if s["type"] == "sample"}
    model_dims = {}
    for name, site in model_tr.items():
        infer = site["infer"]
        if infer.get("_markov_dims") and fallback is not None:
            return fallback()
        if infer.get("_markov_dims"):
            raise _error(f"model site `{name}` is enumerated inside `markov` frames, and the "
                         f"guide enumerates sites too: not supported together.")
        if infer.get("_enumerate_dim") is not None:
            model_dims[infer["_enumerate_dim"]] = _var(name)
    dims = {**guide_dims, **model_dims}

    measures = {_var(n): _Factor(s, guide_loops.get(n, 0), guide_dims, scaled=False,
                                 measure=True)
                for n, s in latent.items() if _var(n) in guide_dims.values()}
    costs = _guide_costs(latent, guide_loops, guide_dims, measures)
    costs += _model_costs(model_tr, model_loops, dims, measures)
    drawn = {n: s for n, s in latent.items()
             if _var(n) not in measures and s["fn"] is not None and not s["fn"].has_rsample}
    dice, deps = {}, ({}, {})
    if drawn:
        dice = {n: _Factor(s, guide_loops.get(n, 0), guide_dims, scaled=False, measure=True,
                           dice=True) for n, s in drawn.items()}
        # by provenance, the model and guide run without enumeration
        deps = dependencies(rng_key, param_map, _plain(model), _plain(guide), args, kwargs,
                            {n: jax.lax.stop_gradient(s["value"]) for n, s in drawn.items()},
                            model_values)
    total = jnp.zeros(())
    for names, is_model, cost in costs:
        upstream = frozenset().union(*(deps[0 if is_model else 1].get(n, ()) for n in names))
        total = total + _weighted(cost, names[0], measures,
                                  [dice[d] for d in sorted(upstream & dice.keys())])
    return total


def _plain(fn):
    """`fn` with none of its sites marked for enumeration (each drawn from its distribution)."""
    def configure(name, msg, infer, is_observed):
        if "enumerate" in infer:
            infer = {k: v for k, v in infer.items() if k != "enumerate"}
        return msg, infer

    return with_site_configurator(fn, configure)


def _split_values(values, latent, loops, guide_dims):
    """`(values, replayed)`: the model's values, those holding the guide's enumerated dims
    (given to the model's sites as they are performed) apart."""
    replayed = {}
    for name, site in latent.items():
        shape = jnp.shape(site["value"])[loops.get(name, 0):]  # an occurrence's
        dims = [d for d in guide_dims if -d <= len(shape) and shape[d] != 1]
        if not dims:
            continue
        if loops.get(name):
            raise _error(f"guide site `{name}` sits inside a loop of the guide and depends on "
                         f"its enumerated site `{guide_dims[dims[0]].removeprefix('_enum_')}`: "
                         f"not supported.")
        replayed[name] = values.pop(name)
    return values, replayed


def _guide_costs(latent, loops, guide_dims, measures):
    """`[((site,), False, -log q)]` for the guide's latent sites (scaled)."""
    funsor = _funsor()
    costs = []
    for name, site in latent.items():
        factor = _Factor(site, loops.get(name, 0), guide_dims, scaled=True)
        fn = site["fn"]
        if _var(name) not in measures and factor.variables and fn is not None \
                and not fn.has_rsample:
            raise _error(f"guide site `{name}` is drawn (not enumerated) from a "
                         f"{type(fn).__name__}, which cannot be reparameterised, and its "
                         f"distribution depends on the guide's enumerated site(s) "
                         f"{_names(factor.variables)}: not supported. Enumerate it too (`infer="
                         f"{{'enumerate': 'parallel'}}`), or draw those sites.")
        costs.append(((name,), False, factor.tensor * funsor.Number(-1.0)))
    return costs


def _model_costs(model_tr, loops, dims, measures):
    """`[(sites, True, log p)]`: each model site that holds no variable the model enumerates
    (scaled), and each group of sites joined through such variables contracted (times the
    group's scale, as NumPyro's; the scale of its first site); `sites`: those of the term not
    enumerated, whose dependencies on the guide's drawn sites are the term's (NumPyro's)."""
    funsor = _funsor()
    factors, summed, scales = {}, {}, {}
    for name, site in model_tr.items():
        enumerated = site["infer"].get("_enumerate_dim") is not None
        factors[name] = _Factor(site, loops.get(name, 0), dims, scaled=False,
                                measure=enumerated)  # NumPyro's log measure: not masked
        scales[name] = site.get("scale")
        if enumerated:
            summed[_var(name)] = name
    costs = []
    for names in _groups(factors, summed):
        sums = frozenset(_var(n) for n in names if _var(n) in summed)
        if not sums:
            (name,) = names
            site = model_tr[name]
            costs.append(((name,), True,
                          _Factor(site, loops.get(name, 0), dims, scaled=True).tensor))
            continue
        group = [factors[n] for n in names]
        plates = frozenset().union(*(f.plates for f in group))
        outermost = frozenset.intersection(*(f.plates for f in group))
        eliminated = plates - outermost
        _check_no_more_global(names, group, eliminated, measures)
        with funsor.interpretations.normalize:
            cost = funsor.sum_product.sum_product(
                funsor.ops.logaddexp, funsor.ops.add, tuple(f.tensor for f in group),
                plates=plates, eliminate=sums | eliminated)
        cost = funsor.optimizer.apply_optimizer(cost)
        check_common_scale({n: scales[n] for n in names})
        scale = next((scales[n] for n in names if scales[n] is not None), None)
        if scale is not None:
            cost = cost * funsor.Tensor(jnp.ravel(jnp.asarray(scale))[0])
        costs.append((tuple(sorted(n for n in names if _var(n) not in summed)), True, cost))
    return costs


def _groups(factors, summed):
    """The model's sites in groups joined through the variables it enumerates (NumPyro's
    `_partition`): each group holding a site that is not enumerated, in trace order."""
    parent = {name: name for name in factors}

    def root(name):
        while parent[name] != name:
            name = parent[name]
        return name

    for name, factor in factors.items():
        for var in factor.variables & summed.keys():
            parent[root(summed[var])] = root(name)
    groups: dict = {}
    for name in factors:
        groups.setdefault(root(name), []).append(name)
    return [names for names in groups.values() if any(_var(n) not in summed for n in names)]


def _check_no_more_global(names, group, eliminated, measures):
    """NumPyro's check: a group of model sites contracted over a plate in which a guide variable
    it holds is enumerated would need that variable's values jointly across the plate."""
    for var in frozenset().union(*(f.variables for f in group)) & measures.keys():
        over = measures[var].plates & eliminated
        if over:
            raise _error(f"Expected model enumeration to be no more global than guide "
                         f"enumeration, but model sites {_names(names, raw=True)} enumerated "
                         f"outside plate `{min(over)}` depend on guide site "
                         f"`{var.removeprefix('_enum_')}`, enumerated inside it. Enumerate "
                         f"those model sites in the guide, or the guide site in the model.")


def _weighted(cost, name, measures, dice=()):
    """`sum over cost's inputs of q(z) cost(z)`: `z` the guide's enumerated variables `cost`
    holds, `q(z)` their marginal (the guide's factors of `z` and of the variables upstream of
    them, the latter summed out, elementwise over the cost's plates); times the `dice` factors
    (`_Factor`s of drawn sites, zero-valued), each summed over the plates `cost` is not in."""
    funsor = _funsor()
    held = frozenset(cost.inputs) & measures.keys()
    needed, pending = set(), list(held)
    while pending:
        var = pending.pop()
        if var not in needed:
            needed.add(var)
            pending.extend(measures[var].variables - needed)
    for var in needed:
        outside = measures[var].plates - frozenset(cost.inputs)
        if outside:
            raise _error(f"the term of site `{name}` depends on guide site "
                         f"`{var.removeprefix('_enum_')}`, enumerated inside plate "
                         f"`{min(outside)}`, but is not itself in that plate: not supported "
                         f"(its expectation would need every element's value jointly).")
    weights = []
    if needed:
        log_q = functools.reduce(operator.add, (measures[v].tensor for v in sorted(needed)))
        extra = frozenset(needed) - held
        if extra:
            log_q = log_q.reduce(funsor.ops.logaddexp, extra)
        weights.append(log_q)
    for factor in dice:
        outside = factor.plates - frozenset(cost.inputs)  # a product over them: a sum of logs
        weights.append(factor.tensor.reduce(funsor.ops.add, outside) if outside
                       else factor.tensor)
    if weights:
        cost = cost * funsor.ops.exp(functools.reduce(operator.add, weights))
    value = cost.reduce(funsor.ops.add)
    return jnp.asarray(value.data)  # pyright: ignore[reportAttributeAccessIssue]


def _names(variables, raw=False):
    return ", ".join(f"`{v if raw else v.removeprefix('_enum_')}`" for v in sorted(variables))
