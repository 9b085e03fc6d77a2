"""The base of `AutoSemiDAIS`'s annealing when a `local_guide` is given (NumPyro's semantics):
the local guide, run at the subsample's indices, draws the initial local latent values `z_0`,
and its log density in unconstrained space is both the base `log q0(z)` of the annealing path
(its gradient a force of each HMC step) and, at `z_0`, a term of the guide's density (the
factor `{prefix}_z_0_factor`).

Two kinds of local guide:

- a hand-written guide (any callable with ordinary sample sites): run hidden by `block` (its
  params exposed, so SVI learns them), its draws read from a trace and mapped to unconstrained
  space with the supports of its own sites; its density at other values is its
  `unconstrained_log_density` with those values and its params given, as NumPyro's
  `potential_energy` of the guide;
- effppl's `AutoNormal` (whose draws are `Delta` sites at its own noise, so that it has no
  density at other values): its params are registered as it registers them, its noise drawn with
  one key per site as NumPyro's `AutoNormal` draws its sites, and its density is the diagonal
  normal of its params.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions.transforms import biject_to

from .... import handlers
from ....handlers import internal as ppl
from ....handlers import unconstrained_log_density
from ....handlers.internal import substitute_exactly
from ._errors import AutoGuideError
from ._per_site import AutoNormal
from ._prototype import in_first_run

__all__ = ["local_guide_base"]

_GUIDE = "effppl.infer.autoguide.AutoSemiDAIS"


def local_guide_base(guide, plan, plate, idx, args, kwargs):
    """`(z_0, base_log_prob)`: the local guide's draw of the subsample's local latent values,
    packed `(B, D)` (`plan.pack`), and `base_log_prob(z)`, its log density (a scalar, the
    subsample's sum, not scaled by the plate) at packed unconstrained values `z`.

    **Arguments:** `guide`: the local guide; `plan`: `AutoSemiDAIS`'s `_LocalPlan`; `idx`: the
    subsample's indices, given to the guide's plate of the plan's name; `args`, `kwargs`: the
    local guide's arguments (those of `local_model`); `plate`: `AutoSemiDAIS`'s subsample plate
    (entered again by an `AutoNormal`, so as not to create it twice).

    **Raises:** `AutoGuideError` naming a local latent site the guide does not sample, or a site
    it samples that is no local latent site of the model."""
    given = {plan.plate: idx}
    if isinstance(guide, AutoNormal):
        return _auto_normal_base(guide, plan, plate, args, kwargs)
    return _hand_written_base(guide, plan, given, args, kwargs)


def _check_sites(plan, names, guide):
    """An `AutoGuideError` unless the local guide's latent sites `names` are the model's local
    latent sites."""
    wanted = [name for name, *_ in plan.sites]
    missing = [n for n in wanted if n not in names]
    extra = [n for n in names if n not in wanted]
    if missing or extra:
        what = (f"does not sample the local latent site `{missing[0]}`" if missing else
                f"samples `{extra[0]}`, which is no local latent site of the model's plate "
                f"`{plan.plate}`")
        raise AutoGuideError(f"{_GUIDE}(local_guide={getattr(guide, '__name__', guide)!r:.60}) "
                             f"expected a guide of the local latent sites {wanted}, but it "
                             f"{what}. Write a local guide whose latent sample sites are "
                             f"exactly those of the local model.")


def _hand_written_base(guide, plan, given, args, kwargs):
    """A guide with ordinary sample sites: its draw (hidden, its params exposed) and its
    unconstrained log density at other values (its params and the draw's indices given)."""
    supports = {}  # site -> support, read while the draw is traced

    def draw():  # a handled function returns arrays only: the trace's values
        _, tr = handlers.trace(substitute_exactly(guide, data=given))._run(*args, **kwargs)
        latent = {n: s for n, s in tr.items()
                  if s["type"] == "sample" and not s.get("is_observed", False)}
        supports.update({n: s["fn"].support for n, s in latent.items()})
        return ({n: s["value"] for n, s in latent.items()},
                {n: s["value"] for n, s in tr.items() if s["type"] == "param"})

    values, params = handlers.block(draw, hide_fn=lambda msg: msg["type"] != "param")()
    _check_sites(plan, list(values), guide)
    z_0 = plan.pack({n: biject_to(supports[n]).inv(v) for n, v in values.items()})
    scale = plan.size / plan.subsample_size
    density = substitute_exactly(guide, data={**params, **given})

    def base_log_prob(z):  # the guide's plate scales its sites by N / B: undone
        return handlers.block(lambda: unconstrained_log_density(
            density, args, kwargs, plan.unpack(z)))() / scale

    return z_0, base_log_prob


def _auto_normal_base(guide, plan, plate, args, kwargs):
    """effppl's `AutoNormal`: its params (`{site}_{prefix}_loc`, `{site}_{prefix}_scale`, full
    size, read at the indices of `plate`), then one key per site in the model's order (NumPyro's
    `AutoNormal` draws), and its diagonal normal density."""
    sites = guide._latent_sites(args, kwargs)
    _check_sites(plan, list(sites), guide)

    # its initial values from a key of `seed` in the first run only (`SVI.init`): the local
    # arguments are the global model's traced output, so it keeps no prototype of its own
    init_key = ppl.raw_key(f"_{guide.prefix}_init") if in_first_run() else None
    init = guide._init_locs(args, kwargs, sites, init_key)
    locs, scales = guide._params(sites, init, {plan.plate: plate})
    u = {}
    for name, latent in sites.items():
        key = ppl.raw_key(f"_{guide.prefix}_draw")
        u[name] = locs[name] + scales[name] * jax.random.normal(key, latent.shape,
                                                                latent.dtype)

    def base_log_prob(z):
        values = plan.unpack(z)
        return sum(jnp.sum(dist.Normal(locs[n], scales[n]).log_prob(values[n])) for n in u)

    return plan.pack(u), base_log_prob
