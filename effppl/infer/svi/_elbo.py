"""Evidence lower bounds, built from effppl's handlers: `seed` + `substitute` run the
guide, `log_density` scores it, its latent values are substituted into the model, `log_density`
scores the model. Gradients come from `jax.grad` of the eliminated program.

NumPyro's names and semantics: `loss(rng_key, param_map, model, guide, *args, **kwargs)` is the
negative ELBO at the constrained parameter values `param_map`.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions.kl import kl_divergence

from ... import handlers
from ...handlers.internal import (
    analyze_model,
    is_enumerated,
    log_joint,
    marginal_log_joint,
    model_name,
    substitute_exactly,
    with_site_configurator,
)
from . import _enum_guide
from ._elbo_error import ELBOError

__all__ = ["Trace_ELBO", "TraceMeanField_ELBO", "RenyiELBO", "TraceEnum_ELBO", "ELBOError"]


def _raw_key(rng_key):
    if jnp.issubdtype(getattr(rng_key, "dtype", None), jax.dtypes.prng_key):
        return jax.random.key_data(rng_key)
    return rng_key


def _scaled_sum(site):
    lp = site["log_prob"]
    return jnp.sum(lp if site.get("scale") is None else lp * site["scale"])


def _latent(tr):
    return {n: s for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}


def run_guide(rng_key, param_map, guide, args, kwargs):
    """`(log q(z), guide trace, model key, values)`: the guide run at the constrained params
    `param_map` with `z ~ q`, and the values to give the model (params and `z`). The key splits
    as NumPyro's ELBOs split it (model's first), so one key draws the same `z` as in NumPyro."""
    k_model, k_guide = jax.random.split(rng_key)
    guide = handlers.seed(substitute_exactly(guide, data=param_map), k_guide)
    log_q, guide_tr = handlers.log_density(guide, args, kwargs, {})
    return log_q, guide_tr, k_model, _model_values(param_map, guide_tr)


def _model_values(param_map, guide_tr):
    """What the model is given: the params, the guide's latent values, and the indices of the
    guide's subsampled plates (NumPyro replays them: the model's plate takes the same subsample)."""
    plates = {n: s["value"] for n, s in guide_tr.items()
              if s["type"] == "plate" and s["args"][1] != s["args"][0]}
    return {**param_map, **plates, **{n: s["value"] for n, s in _latent(guide_tr).items()}}


def run_guide_and_model(rng_key, param_map, model, guide, args, kwargs, model_trace=True):
    """One particle: `(log p(x, z), log q(z), model trace, guide trace)` with `z ~ q`, both
    log densities at the constrained params `param_map` (masks and scales applied). Without
    `model_trace` the model's sites are not recorded (its trace is None): a model whose sites sit
    in loops then carries no buffers of their values through them."""
    log_q, guide_tr, k_model, values = run_guide(rng_key, param_map, guide, args, kwargs)
    check_model_guide_match(model, guide_tr, args, kwargs, param_map)
    model = handlers.seed(model, k_model)
    if model_trace:
        log_p, model_tr = handlers.log_density(model, args, kwargs, values)
        return log_p, log_q, model_tr, guide_tr
    given = substitute_exactly(model, data=values)
    given.entry_point = "log_density"
    _, log_p = log_joint(given, *args, **kwargs)
    return log_p, log_q, None, guide_tr


def check_model_guide_match(model, guide_tr, args, kwargs, params=None):
    """`ELBOError` naming the first latent site whose value in the guide has a shape the model's
    site does not have (stacked over the loops around it), as NumPyro's
    `check_model_guide_match`: the shapes, aligned on the right, must agree, a missing leading
    axis counting as 1. Without it the model would broadcast the guide's value (e.g. one scalar
    for a whole plate) and the ELBO would be a silently different number. `params` (the
    constrained params) are given to the model's param sites (one may have no `init_value`)."""
    if params:
        model = substitute_exactly(model, data=params)
    check_model_guide_shapes(model, {n: tuple(jnp.shape(s["value"])) for n, s in guide_tr.items()
                                     if s["type"] == "sample"}, args, kwargs)


def check_model_guide_shapes(model, guide_shapes, args, kwargs):
    """`check_model_guide_match` on the guide's shapes `{site: shape}`; a `UserWarning` naming a
    site the guide samples and the model observes."""
    from itertools import zip_longest

    for name, site in analyze_model(model, args, kwargs).items():
        if site.type == "sample" and site.is_observed and name in guide_shapes:
            warnings.warn(f"The guide samples site `{name}`, which the model observes: the model "
                          f"keeps its observation and the ELBO still counts the guide's log "
                          f"density of its draw, a number without meaning. Remove `{name}` from "
                          f"the guide (or do not observe it in the model).", UserWarning,
                          stacklevel=2)
        if site.type != "sample" or site.is_observed or not site.bounded \
                or name not in guide_shapes:
            continue
        model_shape = (*site.loops, *site.aval.shape)
        guide_shape = guide_shapes[name]
        if any(m != g for m, g in zip_longest(reversed(model_shape), reversed(guide_shape),
                                              fillvalue=1)):
            raise ELBOError(f"Model and guide shapes disagree at site `{name}`: the model's "
                            f"site has shape {model_shape}, the guide's value {guide_shape} "
                            f"(stacked over the loops and plates around the site). Sample it "
                            f"in the guide with the model's shape, e.g. inside the same plates.")


def _score_surrogate(elbo, guide_tr):
    """`elbo` plus a zero-valued term whose gradient is the score-function estimator of the guide
    sites that cannot be reparameterised (discrete ones), as in NumPyro's `Trace_ELBO`."""
    return _surrogate(elbo, [s for s in _latent(guide_tr).values()
                             if s["fn"] is not None and not s["fn"].has_rsample])


def _surrogate(elbo, sites):
    """`elbo` plus a zero-valued term whose gradient is the score-function estimator of the
    guide's draws at `sites` (trace entries)."""
    score = sum((_scaled_sum(s) for s in sites), start=0.0)
    if isinstance(score, float):
        return elbo
    return elbo + jax.lax.stop_gradient(elbo) * (score - jax.lax.stop_gradient(score))


class _ELBO:
    """Shared by the ELBOs: `num_particles` draws of `z ~ q`, vectorised (`jax.vmap`) or in a
    sequential `lax.map`; subclasses give one particle's ELBO and how particles combine."""

    can_infer_discrete = False  # NumPyro's flag: guide sites without a reparametrized sampler

    def __init__(self, num_particles: int = 1, vectorize_particles: bool = True):
        if not isinstance(num_particles, int) or num_particles < 1:
            raise ELBOError(f"effppl.infer.{type(self).__name__}(num_particles={num_particles!r}) "
                            f"expected a positive int.")
        self.num_particles = num_particles
        self.vectorize_particles = bool(vectorize_particles)

    def _key(self):
        return type(self), tuple(sorted(vars(self).items()))

    def __eq__(self, other):  # equal settings share SVI's compiled update (a structural key)
        return isinstance(other, _ELBO) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def particle(self, rng_key, param_map, model, guide, args, kwargs):
        """One particle's ELBO term (a subclass's)."""
        raise NotImplementedError

    def particles(self, rng_key, param_map, model, guide, args, kwargs):
        def one(key):
            return self.particle(key, param_map, model, guide, args, kwargs)

        if self.num_particles == 1:  # the key itself, as NumPyro: no split, no batch axis
            return jax.tree.map(lambda x: x[None], one(_raw_key(rng_key)))
        keys = jax.random.split(_raw_key(rng_key), self.num_particles)
        return jax.vmap(one)(keys) if self.vectorize_particles else jax.lax.map(one, keys)

    def loss(self, rng_key, param_map, model, guide, *args, **kwargs):
        """The loss (a scalar, to minimise) at the constrained params `param_map`; with
        `sum_sites=False` (`Trace_ELBO`, `TraceMeanField_ELBO`), a dict site name -> its term,
        whose values sum to the loss (NumPyro's)."""
        return self.combine(self.particles(rng_key, param_map, model, guide, args, kwargs))

    def combine(self, elbos):
        return jax.tree.map(lambda x: -jnp.mean(x), elbos)

    def mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
        """The values the guide and the model leave at their `effppl.mutable` sites when the loss
        is computed with this key at `param_map` (which gives the sites' values at the start):
        dict name -> pytree, or None without such sites. As NumPyro's, one particle only: with
        `num_particles > 1` the state is not updated (None, with a warning)."""
        if self.num_particles != 1:
            warnings.warn("mutable state is currently ignored when num_particles > 1 (as in "
                          "NumPyro).", UserWarning, stacklevel=2)
            return None
        return _mutable_sites(_raw_key(rng_key), param_map, model, guide, args, kwargs)

    def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
        """NumPyro's `{"loss": loss, "mutable_state": mutable_state}` (see `mutable_state`)."""
        return {"loss": self.loss(rng_key, param_map, model, guide, *args, **kwargs),
                "mutable_state": self.mutable_state(rng_key, param_map, model, guide, *args,
                                                    **kwargs)}


def _mutable_sites(rng_key, param_map, model, guide, args, kwargs):
    """`{name: final value}` of the mutable sites of the guide and of the model (run on the
    guide's draws, with the model key a particle uses), or None when there are none. The
    enumerated sites of a model are drawn here, not summed: a state computed from them is not
    supported."""

    def names(fn):
        return [n for n, s in analyze_model(fn, args, kwargs).items() if s.type == "mutable"]

    k_model, k_guide = jax.random.split(rng_key)
    guide_sites, model_sites = names(guide), names(model)
    if not guide_sites and not model_sites:
        return None
    guide_tr = handlers.trace(handlers.seed(substitute_exactly(guide, data=param_map),
                                            k_guide)).get_trace(*args, **kwargs)
    values = _model_values(param_map, guide_tr)
    state = {n: guide_tr[n]["value"] for n in guide_sites}
    if model_sites:
        keep = handlers.trace(handlers.seed(substitute_exactly(model, data=values), k_model))
        keep.keep = lambda name, site: site.type == "mutable"
        model_tr = keep.get_trace(*args, **kwargs)
        state.update({n: model_tr[n]["value"] for n in model_sites})
    return state


class Trace_ELBO(_ELBO):
    """The ELBO `E_q[log p(x, z) - log q(z)]`, averaged over `num_particles` draws of the guide.

    Guide sites that cannot be reparameterised get NumPyro's score-function surrogate (so,
    unlike NumPyro's, discrete guide sites are supported: `can_infer_discrete`).

    **Arguments:** `num_particles` (int), `vectorize_particles` (bool: `jax.vmap` over particles,
    else a sequential `lax.map`), `multi_sample_guide` (bool: the guide draws `S` samples of the
    latent sites at once, along a leading axis of each of their values; the model is run once
    per sample, `vmap`ped, and its log densities are summed, as NumPyro's: the ELBO is then
    `sum_s [log p(x, z_s)] - log q(z_1..S)`), `sum_sites` (bool: False gives the loss per site,
    a dict site name -> `-(log p - log q)` of that site's draws, NumPyro's; without the score
    surrogate).

    **Raises:** `ELBOError` with `multi_sample_guide=True` for a guide without sample sites, or
    whose sites' leading axes differ.

    **References:** Ranganath et al. (2014), "Black box variational inference"; Kingma & Welling
    (2014); NumPyro's `Trace_ELBO`.
    """

    can_infer_discrete = True

    def __init__(self, num_particles: int = 1, vectorize_particles: bool = True,
                 multi_sample_guide: bool = False, sum_sites: bool = True):
        super().__init__(num_particles, vectorize_particles)
        self.multi_sample_guide = bool(multi_sample_guide)
        self.sum_sites = bool(sum_sites)

    def particle(self, rng_key, param_map, model, guide, args, kwargs):
        if self.multi_sample_guide:
            return self._multi_sample(rng_key, param_map, model, guide, args, kwargs)
        if not self.sum_sites:
            _, _, model_tr, guide_tr = run_guide_and_model(rng_key, param_map, model, guide,
                                                           args, kwargs)
            return by_site(model_tr, guide_tr)
        log_p, log_q, _, guide_tr = run_guide_and_model(rng_key, param_map, model, guide, args,
                                                        kwargs, model_trace=False)
        return _score_surrogate(log_p - log_q, guide_tr)


    def _multi_sample(self, rng_key, param_map, model, guide, args, kwargs):
        """One particle of a guide drawing `S` samples at once (`multi_sample_guide`)."""
        log_q, guide_tr, k_model, values = run_guide(rng_key, param_map, guide, args, kwargs)
        latent = {n: s["value"] for n, s in guide_tr.items()
                  if (s["type"] == "sample" and not s["is_observed"]
                      and jnp.size(s["value"]) > 0) or s["type"] == "deterministic"}
        sizes = {n: jnp.shape(v)[0] for n, v in latent.items() if jnp.ndim(v) > 0}
        if not any(s["type"] == "sample" and not s["is_observed"] for s in guide_tr.values()):
            raise ELBOError("Trace_ELBO(multi_sample_guide=True): the guide is missing `sample` "
                            "sites.")
        if len(set(sizes.values())) != 1 or len(sizes) != len(latent):
            raise ELBOError(f"Trace_ELBO(multi_sample_guide=True): the guide's sites must hold "
                            f"the same number of samples along their leading axis, but their "
                            f"shapes are {({n: tuple(jnp.shape(v)) for n, v in latent.items()})}.")
        fixed = {n: v for n, v in values.items() if n not in latent}  # params, plates' indices

        def one(key, sample):
            given = substitute_exactly(handlers.seed(model, key), data={**fixed, **sample})
            given.entry_point = "log_density"
            return log_joint(given, *args, **kwargs)[1]

        keys = jax.random.split(k_model, next(iter(sizes.values())))
        log_p = jax.vmap(one)(keys, latent).sum()
        if not self.sum_sites:
            raise ELBOError("Trace_ELBO(multi_sample_guide=True, sum_sites=False) is not "
                            "supported: the model's per-site terms are summed over the samples.")
        return _score_surrogate(log_p - log_q, guide_tr)


def by_site(model_tr, guide_tr) -> dict:
    """`{site: log p - log q}`: each sample site's scaled log density in the model trace minus
    that in the guide trace (0 where a trace lacks the site), as NumPyro's per-site ELBO."""
    terms: dict = {}
    for tr, sign in ((model_tr, 1.0), (guide_tr, -1.0)):
        for name, site in tr.items():
            if site["type"] == "sample" and site.get("log_prob") is not None:
                terms[name] = terms.get(name, 0.0) + sign * _scaled_sum(site)
    return {name: jnp.asarray(term) for name, term in terms.items()}


class TraceMeanField_ELBO(Trace_ELBO):
    """The ELBO with the analytic KL divergence `KL(q(z_i) || p(z_i | ...))` in place of the Monte
    Carlo term `log p(z_i) - log q(z_i)` for each latent site whose guide and model distributions
    have one in `numpyro.distributions.kl` (Monte Carlo elsewhere), as NumPyro's
    `TraceMeanField_ELBO`. Valid when the guide is mean-field over those sites (their model
    distributions do not depend on other latents through the guide's dependencies). Sites under a
    `mask` should not use it (the KL term is not masked).
    """

    def particle(self, rng_key, param_map, model, guide, args, kwargs):
        log_p, log_q, model_tr, guide_tr = run_guide_and_model(rng_key, param_map, model, guide,
                                                               args, kwargs)
        assert model_tr is not None  # recorded: `model_trace=True`
        elbo = log_p - log_q
        terms = by_site(model_tr, guide_tr) if not self.sum_sites else {}
        for name, g in _latent(guide_tr).items():
            m = model_tr.get(name)
            if m is None or m["type"] != "sample" or g["fn"] is None or m["fn"] is None:
                continue
            kl = _analytic_kl(g["fn"], m["fn"])
            if kl is None:
                continue
            if m.get("scale") is not None:
                kl = kl * m["scale"]
            elbo = elbo - (_scaled_sum(m) - _scaled_sum(g)) - jnp.sum(kl)
            terms[name] = -jnp.sum(kl)
        if not self.sum_sites:
            return terms
        return _score_surrogate(elbo, guide_tr)


def _analytic_kl(q, p):
    """`KL(q || p)` by `numpyro.distributions.kl` (shape: `p`'s batch shape), or None where
    it has none. An autoguide's `Delta` site stands for its `base` distribution where it keeps
    one (a site with real support, `GuideDelta`) and has the model site's shape; any other
    `Delta` has no analytic KL here (NumPyro's registered `KL(Delta || p)`, `-log p(v) + log
    q(v)`, is the Monte Carlo term itself, and broadcasts a whole-value log density over `p`'s
    batch shape)."""
    if isinstance(q, dist.Delta):
        base = getattr(q, "base", None)
        if base is None or jnp.shape(base.loc) != p.shape():
            return None
        q = base.to_event(p.event_dim) if p.event_dim else base
    try:
        return kl_divergence(q, p)
    except NotImplementedError:
        return None


class RenyiELBO(_ELBO):
    """Rényi's alpha-divergence bound `1/(1-alpha) log mean_k exp((1-alpha) w_k)`, `w_k` the
    particles' `log p - log q` (alpha = 0: the importance-weighted bound of Burda et al.).

    **Arguments:** `alpha` (float, not 1: alpha -> 1 is `Trace_ELBO`), `num_particles` (int, at
    least 2 for the bound to differ from `Trace_ELBO`), `vectorize_particles`.

    **Raises:** `ELBOError` for alpha = 1.

    **References:** Li & Turner (2016), "Rényi divergence variational inference"; NumPyro's
    `RenyiELBO`.
    """

    def __init__(self, alpha: float = 0.0, num_particles: int = 2, vectorize_particles=True):
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
            raise ELBOError(f"effppl.infer.RenyiELBO(alpha={alpha!r}) expected a number (not 1).")
        if alpha == 1:
            raise ELBOError("effppl.infer.RenyiELBO(alpha=1) is the usual ELBO: use "
                            "effppl.infer.Trace_ELBO instead.")
        super().__init__(num_particles, vectorize_particles)
        self.alpha = float(alpha)

    def particle(self, rng_key, param_map, model, guide, args, kwargs):
        log_p, log_q, _, _ = run_guide_and_model(rng_key, param_map, model, guide, args, kwargs,
                                                 model_trace=False)
        return log_p - log_q

    def combine(self, elbos):
        scaled = (1.0 - self.alpha) * elbos
        bound = jax.nn.logsumexp(scaled) - jnp.log(self.num_particles)
        return -bound / (1.0 - self.alpha)


class TraceEnum_ELBO(_ELBO):
    """The ELBO with the sites marked for enumeration (`infer={"enumerate": "parallel"}`, or
    `effppl.infer.config_enumerate`) summed exactly, as NumPyro's `TraceEnum_ELBO`: `E_q[log
    sum_y p(x, y, z) - log q(z)]`, `y` the model's marked sites that the guide does not sample,
    and, for the guide's marked sites `e`, the expectation over them exact: `sum_e q(e) E_q(z|e)
    [log sum_y p(x, y, z, e) - log q(z, e)]`.

    The model's sum is its log density with enumeration (`effppl.handlers.log_density`): tensor
    variable elimination in plates (funsor's `sum_product`), and the forward algorithm for
    enumerated sites inside a plain `lax.scan` (NumPyro needs its `scan` and `markov` for that).
    A guide site marked for enumeration takes its whole support along a fresh dim (inside plates,
    one value per element), the guide's sites below it are drawn once per value, and each term
    of the ELBO (each site's `log p` or `-log q`, or a group of model sites contracted over the
    model's enumerated sites) is weighted by the guide's probability of the enumerated values it
    holds, elementwise over its plates (`_enum_guide.py`). Guide sites that cannot be
    reparameterised and are drawn (discrete ones the guide samples, not enumerating them) get
    NumPyro's Rao-Blackwellised score-function surrogate, whether sites are enumerated or not:
    each term weighted by the scores of the drawn sites it depends on (by provenance), summed
    over the plates it is not in (loss and gradient NumPyro's).

    Sharp edges:

    - Where the guide enumerates nothing and either the model enumerates inside a loop (a
      `lax.scan`, `fori_loop`) or `markov` frames, or the guide draws such a site inside a loop,
      the drawn sites get `Trace_ELBO`'s surrogate (each score weighted by the whole ELBO: the
      same loss, an unbiased but noisier gradient than NumPyro's).
    - Provenance is by site name: a model site inside a loop is one term, weighted by the
      scores of the drawn sites any of its iterations depends on (NumPyro, unrolled, weights
      each iteration by its own; the same where every iteration depends on the same drawn
      sites).

    **Arguments:** `num_particles` (int); `max_plate_nesting` (int >= 0, or `float("inf")`:
    inferred from the model's (and an enumerating guide's) plates): enumerated dims start left of
    that many plate dims (the value changes where enumerated values sit, never the loss);
    `vectorize_particles` (bool).

    **Raises:** `ELBOError` (from `loss`) for a discrete latent site of the model that is neither
    marked for enumeration nor sampled by the guide; for a bad `max_plate_nesting`; and, with
    sites enumerated in the guide, naming the site, for what is not supported: a guide site
    enumerated inside a loop of the guide, model sites enumerated inside a loop or `markov`
    frames, a guide site drawn without a reparameterised sampler below an enumerated one or
    inside a loop of the guide, a term
    holding a guide variable enumerated in a plate the term is not in, and (as NumPyro raises)
    model enumeration more global than the guide's.

    **References:** Obermeyer et al. (2019), "Tensor Variable Elimination for Plated Factor
    Graphs"; Rabiner (1989) (forward algorithm); NumPyro's `TraceEnum_ELBO`.
    """

    can_infer_discrete = True

    def __init__(self, num_particles: int = 1, max_plate_nesting=float("inf"),
                 vectorize_particles: bool = True):
        finite = isinstance(max_plate_nesting, int) and not isinstance(max_plate_nesting, bool)
        if not (max_plate_nesting == float("inf") or (finite and max_plate_nesting >= 0)):
            raise ELBOError(f"effppl.infer.TraceEnum_ELBO(max_plate_nesting="
                            f"{max_plate_nesting!r}) expected an int >= 0 or float('inf') "
                            f"(inferred from the model's plates).")
        super().__init__(num_particles, vectorize_particles)
        self.max_plate_nesting = max_plate_nesting

    def particle(self, rng_key, param_map, model, guide, args, kwargs):
        if _enum_guide.enumerated_guide_sites(guide, args, kwargs):
            return self._enumerated_guide_particle(rng_key, param_map, model, guide, args, kwargs)
        log_q, guide_tr, k_model, values = run_guide(rng_key, param_map, guide, args, kwargs)
        _check_enumeration(model, frozenset(guide_tr), args, kwargs)
        check_model_guide_match(model, guide_tr, args, kwargs, param_map)
        model = _unmarked(model, frozenset(_latent(guide_tr)))
        first = None if self.max_plate_nesting == float("inf") else -self.max_plate_nesting - 1

        def score_surrogate():  # Trace_ELBO's: each draw's score weighted by the whole ELBO
            log_p = marginal_log_joint(handlers.seed(model, k_model), args, kwargs, values, first)
            return _score_surrogate(log_p - log_q, guide_tr)

        drawn = [s for s in _latent(guide_tr).values()
                 if s["fn"] is not None and not s["fn"].has_rsample]
        if drawn:
            # NumPyro's Rao-Blackwellised surrogate: guide enumeration's, with nothing enumerated
            # in the guide, whether the model enumerates or not (the model's enumeration in a
            # loop or `markov` frames, or a drawn site in a loop of the guide: the above)
            return _enum_guide.elbo(rng_key, param_map, model, guide, args, kwargs,
                                    self.max_plate_nesting, _model_values,
                                    fallback=score_surrogate)
        return score_surrogate()

    def _enumerated_guide_particle(self, rng_key, param_map, model, guide, args, kwargs):
        """The guide's marked sites summed exactly, weighted by q (`_enum_guide`)."""
        guide_sites = analyze_model(guide, args, kwargs)
        latent = {n: (*s.loops, *s.aval.shape) for n, s in guide_sites.items()
                  if s.type == "sample" and not s.is_observed}
        _check_enumeration(model, frozenset(guide_sites), args, kwargs)
        check_model_guide_shapes(model, latent, args, kwargs)  # the shapes without enumeration
        return _enum_guide.elbo(rng_key, param_map, _unmarked(model, frozenset(latent)), guide,
                                args, kwargs, self.max_plate_nesting, _model_values)


def _unmarked(model, names):
    """`model` with the sites in `names` (those the guide samples) no longer marked for
    enumeration: the guide's value is scored, as NumPyro replays guide sites into the model."""
    def configure(name, msg, infer, is_observed):
        if name in names and "enumerate" in infer:
            infer = {k: v for k, v in infer.items() if k != "enumerate"}
        return msg, infer

    return with_site_configurator(model, configure)


def _check_enumeration(model, guide_sites, args, kwargs):
    """`ELBOError` for a discrete latent model site that is neither marked for enumeration nor
    among the guide's sites `guide_sites`."""
    for name, site in analyze_model(model, args, kwargs).items():
        if site.type != "sample" or site.is_observed or name in guide_sites:
            continue
        static = dict(site.key.static)
        if is_enumerated(static.get("infer", ())):
            continue
        fn = site.message.fn
        if getattr(getattr(fn, "support", None), "is_discrete", False):
            raise ELBOError(f"effppl.infer.TraceEnum_ELBO: site `{name}` of model "
                            f"`{model_name(model)}` is discrete ({type(fn).__name__}) and neither "
                            f"marked for enumeration nor sampled by the guide: mark it "
                            f"`infer={{'enumerate': 'parallel'}}` (or wrap the model in "
                            f"`effppl.infer.config_enumerate`), or sample it in the guide.")
